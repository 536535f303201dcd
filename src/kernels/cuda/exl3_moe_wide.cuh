// The grouped EXL3 MoE GEMV for prefill-sized calls (exl3_moe.cu, more than 64 tokens):
// each tile is decoded once per pass of up to 8 * RT of its expert's rows (48 or 128,
// exl3_moe.cu WideKernels), and a block runs its column of tiles over all of k, summing the
// k-splits itself.
//
// Why: the decode-sized grouped kernel (grid split in kMoeSplits along k, at most 64 rows
// per pass) decoded every tile of an expert once per 64 of its rows per call, read its
// rows' activations from L1/L2 once per warp, and left kMoeSplits f32 partials per row
// for the epilogue (~170 KB of scratch per (token, expert) pair). On the H200 a 1,024-token
// prefill chunk spent ~20 ms per MoE layer there (71% of the chunk, run1s24); this kernel
// ~9.6 ms (run3s24), ~5.9 ms since its tiles carry no per-tile branches or index arithmetic
// (148 -> 92 instructions per tile under ncu, run1s25-run4s25; bench/RESULTS.md session 25).
//
// Precision (XHalf, exl3_moe.cu wide_x_half): by default a prefill row's x is rounded to fp16
// and multiplied once per tile, as exllamav3's kernels take activations; prefill rows of the
// dense projections go through bf16 tensor cores already (cuda_linear.cu, past exact_rows),
// so the hi/lo pair bought these rows nothing end to end and doubled the MMAs. A row's sums
// still depend on its own x alone, never on the rows beside it. TF_EXL3_WIDE_X=split keeps
// the decode-sized kernels' bits: the same MMAs (hi then lo fragment, per k-tile in k order,
// one accumulator per k-split), and the splits are summed in split order from 0
// (SplitPartials::sum: ((0 + s0) + s1) + ...), here into the row's one f32 value as each
// split ends; with it a token's result does not depend on the call it is in. In fp16 the
// rows' fragments are stored, copied and staged as their hi halves alone (WideX: 8 bytes per
// lane quad and k-tile instead of 16).
//
// A block: 8 warps, one 16-column n-tile each (a 128-column block), one expert, one
// projection, passes of 8 * RT rows. Each warp streams its column of tiles through its
// cp.async ring (exl3_stream.cuh, NS stages of ST tiles); the pass's activation
// fragments of each stage's k-tiles ride in the same cp.async groups into NS block-wide
// buffers ([k-tile][row][quad]: conflict-free reads), so one barrier per stage serves both.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_moe_flat.cuh"
#include "kernels/cuda/exl3_stream.cuh"
#include "kernels/cuda/moe_grouping.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda::exl3 {

struct WideArgs {
  const ExpertPtrs* table;
  int proj0;            // projection of blockIdx.z == 0 (gate and up share a launch)
  const void* xr[2];    // per blockIdx.z: the rows' input fragments [rows][tiles_k * 4] of WideX<XHalf>
  float* sum[2];        // per blockIdx.z: the rows' split-summed products [rows][n]
  int64_t tiles_k, tiles_n;
  int per;              // k-tiles per split (kMoeSplits splits, the decode-sized kernels')
  MoeGroups lay;
};

// One lane quad's B fragment of one (row, k-tile): the fp16 hi and lo halves of x (uint4, the
// decode-sized kernels' layout, store_fragment_value), or (XHalf) the hi half alone (uint2,
// store_fragment_hi): half the bytes to stage and copy.
template <bool XHalf>
using WideX = std::conditional_t<XHalf, uint2, uint4>;

// Shared memory of one block: the warps' rings, then NS stages of a pass's fragments.
template <int K, int RT, int NS, int ST = kStageTiles, bool XHalf = false>
constexpr size_t wide_smem_bytes() {
  return static_cast<size_t>(kGemvWarps) * ring_words<K, ST, NS>() * 4 +
         static_cast<size_t>(NS) * ST * 8 * RT * 4 * sizeof(WideX<XHalf>);
}

// The block's cp.async copies of a pass's fragments into xs [ST][8 * RT][4] (WideX units), a
// stage at a time. Each thread owns one 16-byte piece of a row's stage (a k-tile and a part of
// its quads) and the same piece of every kRowStep-th row: its shared and global offsets are
// fixed for the kernel, so a copy costs a predicate, an address add and the copy (the per-copy
// generic-to-shared conversion and 64-bit index products cost ~15 instructions per copy,
// ~18 per tile of the stage loop, H200 ncu run2s33).
template <int RT, int ST, bool XHalf>
struct RowCopies {
  static constexpr int kRows = 8 * RT, kUnit = sizeof(WideX<XHalf>);
  static constexpr int kPerKTile = 4 * kUnit / 16;  // 16-byte pieces of one (row, k-tile)
  static constexpr int kPerRow = ST * kPerKTile;    // ... of one row in a stage
  static constexpr int kThreads = kGemvWarps * 32;
  static_assert(kThreads % kPerRow == 0 && kRows % (kThreads / kPerRow) == 0, "RowCopies: whole sweeps");
  static constexpr int kRowStep = kThreads / kPerRow;  // rows per sweep of the block
  static constexpr uint32_t kStageBytes = ST * kRows * 4 * kUnit;
  static constexpr int kKTileBytes = 4 * kUnit;  // one k-tile of a row
  int u;                                         // the thread's k-tile within a stage
  int row0;                                      // its first row
  uint32_t s_off;  // its shared-memory piece of row0 in stage buffer 0 (a shared-window address)
  int64_t g_off;   // its bytes from a pass's first row at k-tile 0
  int64_t g_step;  // bytes of kRowStep rows

  __device__ __forceinline__ RowCopies(const void* xs, int64_t tiles_k) {
    const int q = threadIdx.x % kPerRow;
    u = q / kPerKTile;
    row0 = threadIdx.x / kPerRow;
    s_off = static_cast<uint32_t>(__cvta_generic_to_shared(xs)) + (u * kRows + row0) * 4 * kUnit +
            (q % kPerKTile) * 16;
    const int64_t row_bytes = tiles_k * kKTileBytes;
    g_off = row0 * row_bytes + static_cast<int64_t>(q) * 16;
    g_step = kRowStep * row_bytes;
  }
  // Stage buffer b gets k-tiles k0 .. k0 + nk - 1 of rows [0, rows) from src (the pass's first
  // row); no commit.
  __device__ __forceinline__ void issue(int b, const char* src, int rows, int64_t k0, int nk) const {
    if (u >= nk) return;
    const char* g = src + g_off + k0 * kKTileBytes;
    const uint32_t d = s_off + b * kStageBytes;
#pragma unroll
    for (int j = 0; j < kRows / kRowStep; ++j) {
      if (row0 + j * kRowStep < rows) cp_async16_shared(d + j * kRowStep * 4 * kUnit, g + j * g_step);
    }
  }
};

// A warp's cp.async copies of its column of tiles into its ring, a stage of ST tiles at a time
// (load_stage's layout: tile u of a stage at u * 8K words). Where a tile's 2K 16-byte pieces
// divide a warp's 32 (K = 1, 2, 4, 8), a lane copies the same piece of every (32 / 2K)-th tile:
// its source a fixed offset from the stage's start and shared-memory offsets fixed at compile time, ~4
// instructions per copy (load_stage recomputes both addresses per copy: ~20 per copy, H200 ncu
// run4s33). Other K go through load_stage.
template <int K, int ST>
struct TileCopies {
  static constexpr int kChunks = 2 * K;                         // 16-byte pieces of a tile
  static constexpr bool kAffine = 32 % kChunks == 0;            // a lane keeps its piece of each tile
  static constexpr int kTileStep = kAffine ? 32 / kChunks : 1;  // tiles between a lane's copies
  static constexpr int kPerLane = (ST * kChunks + 31) / 32;
  static constexpr uint32_t kStageBytes = stage_words<K, ST>() * 4;
  const uint32_t* tile0;  // the column's first tile
  int64_t step;           // words from one tile of the column to the next
  int ntiles;             // tiles of the column
  uint32_t* ring;
  const char* src = nullptr;  // kAffine: the lane's piece of its first tile in stage 0
  int64_t copy_step = 0;      // kAffine: bytes between a lane's copies (kTileStep tiles)
  int64_t stage_step = 0;     // kAffine: bytes of a stage of the column
  uint32_t dst = 0;           // kAffine: the lane's shared-window address in ring buffer 0
  int u0 = 0;                 // kAffine: its first tile within a stage

  __device__ __forceinline__ TileCopies(const uint32_t* t0, int64_t st, int nt, uint32_t* r, int lane)
      : tile0(t0), step(st), ntiles(nt), ring(r) {
    if constexpr (kAffine) {
      u0 = lane / kChunks;
      const int q = lane % kChunks;
      src = reinterpret_cast<const char*>(t0 + u0 * st + q * 4);
      copy_step = kTileStep * st * 4;
      stage_step = ST * st * 4;
      dst = static_cast<uint32_t>(__cvta_generic_to_shared(r)) + (u0 * 8 * K + q * 4) * 4;
    }
  }
  __device__ __forceinline__ int stages() const { return (ntiles + ST - 1) / ST; }
  // Stage s into ring buffer b; commits the group, also past the last stage (the group count
  // stays fixed for wait_group).
  __device__ __forceinline__ void issue(int s, int b, int lane) const {
    if (s < stages()) {
      if constexpr (kAffine) {
        // The stage's tiles (at K = 1, 2 a warp's pieces reach past a stage of 8 or 4 tiles).
        const int lim = min(ST, ntiles - s * ST);
        const uint32_t d = dst + b * kStageBytes;
        const char* g = src + s * stage_step;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          if (u0 + i * kTileStep < lim) cp_async16_shared(d + i * kTileStep * 8 * K * 4, g + i * copy_step);
        }
      } else {
        load_stage<K, ST>(ring + b * stage_words<K, ST>(), tile0 + static_cast<int64_t>(s) * ST * step, step,
                          ntiles - s * ST, lane);
      }
    }
    cp_async_commit();
  }
};

// Adds a lane's C fragments of the first NRT row tiles into the rows' sums (store_partial's
// layout); the first split stores 0 + its value (SplitPartials::sum starts from 0).
template <int RT, int NRT>
__device__ __forceinline__ void add_split(float* __restrict__ sum, int64_t n, int64_t n0, int rows, bool first,
                                          const float (&acc)[RT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  auto add = [&](int r, int64_t c, float v) {
    float* p = sum + r * n + c;
    *p = __fadd_rn(first ? 0.0f : *p, v);
  };
#pragma unroll
  for (int rt = 0; rt < NRT; ++rt) {
    const int r0 = rt * 8 + 2 * t;
    if (r0 < rows) {
      add(r0, n0 + g, acc[rt][0]);
      add(r0, n0 + g + 8, acc[rt][2]);
    }
    if (r0 + 1 < rows) {
      add(r0 + 1, n0 + g, acc[rt][1]);
      add(r0 + 1, n0 + g + 8, acc[rt][3]);
    }
  }
}

// One tile of a stage: decode it (the flat kernels' word hashes at K = 4: the same bits), then
// its MMAs for the pass's first NRT row tiles: hi then lo fragment, or (XHalf) the hi fragment
// alone, i.e. x rounded to fp16 as exllamav3's own kernels take it. Rows past the pass's last
// read whatever their staged slot holds: their columns of D are never stored (D's column j
// depends on x row j alone).
template <int K, int CB, int RT, int NRT, bool XHalf>
__device__ __forceinline__ void wide_tile(const uint32_t* st, const WideX<XHalf>* xl, int lane,
                                          float (&acc)[RT][4]) {
  uint32_t w[4];
  decode_smem_tile<K, CB, false, false, true>(st, lane, w);
#pragma unroll
  for (int rt = 0; rt < NRT; ++rt) {
    if constexpr (XHalf) {
      const uint2 xv = xl[rt * 8 * 4];
      mma_f16_16816(acc[rt], w, xv.x, xv.y);
    } else {
      const uint4 xv = xl[rt * 8 * 4];
      mma_f16_16816(acc[rt], w, xv.x, xv.y);
      mma_f16_16816(acc[rt], w, xv.z, xv.w);
    }
  }
}

// Calls f(std::integral_constant<int, N>) for the least N in {Step, 2 Step, ..., RT} with
// N >= nrt: one compiled loop per row-tile count, so a tile's MMAs carry no per-tile branches
// (at Step 2 a pass may run one row tile of unused rows).
template <int RT, int Step, int N = Step, typename F>
__device__ __forceinline__ void with_row_tiles(int nrt, F&& f) {
  if constexpr (N >= RT) {
    f(std::integral_constant<int, RT>{});
  } else {
    if (nrt <= N) f(std::integral_constant<int, N>{});
    else with_row_tiles<RT, Step, N + Step>(nrt, f);
  }
}

// grid (tiles_n / kGemvWarps, expert slots, projections), kGemvWarps * 32 threads,
// wide_smem_bytes<K, RT, NS, ST, XHalf>() of dynamic shared memory; compiled for MinBlocks blocks per SM.
// XHalf: one MMA per row tile with x in fp16 (wide_tile); else the hi/lo pair, the bits of the
// decode-sized kernels.
template <int K, int CB, int RT, int NS, int MinBlocks, int ST = kStageTiles, bool XHalf = false>
__global__ void __launch_bounds__(kGemvWarps * 32, MinBlocks) wide_gemv_kernel(WideArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using X = WideX<XHalf>;
  constexpr int kRows = 8 * RT, kStageX = ST * kRows * 4;  // X units of one fragment stage
  const int slot = blockIdx.y;
  if (slot >= *a.lay.num_active) return;  // block-uniform
  const int z = blockIdx.z, proj = a.proj0 + z;
  const int e = a.lay.slot_expert[slot], first = a.lay.slot_first[slot], cnt = a.lay.slot_count[slot];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t tn = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  const int64_t tile_words = 8 * K, n = a.tiles_n * 16, xstride = a.tiles_k * 4;
  uint32_t* ring = reinterpret_cast<uint32_t*>(smem_raw) + warp * ring_words<K, ST, NS>();
  X* xs = reinterpret_cast<X*>(smem_raw + static_cast<size_t>(kGemvWarps) * ring_words<K, ST, NS>() * 4);
  const RowCopies<RT, ST, XHalf> copies(xs, a.tiles_k);
  const TileCopies<K, ST> ws(a.table[e].trellis[proj] + tn * tile_words, a.tiles_n * tile_words,
                             static_cast<int>(a.tiles_k), ring, lane);
  const int ns = ws.stages(), tiles_k = static_cast<int>(a.tiles_k);
  pdl_wait();  // the fragments ride with the weights: nothing is issued before the wait
  for (int r0 = 0; r0 < cnt; r0 += kRows) {
    const int rows = min(cnt - r0, kRows);
    const char* src =
        static_cast<const char*>(a.xr[z]) + (first + r0) * xstride * static_cast<int64_t>(sizeof(X));
    float* sum = a.sum[z] + static_cast<int64_t>(first + r0) * n;
    // Stage s into buffer b: its fragments, then its tiles (ws.issue commits the group, also
    // past the end).
    auto issue = [&](int s, int b) {
      if (s < ns) {
        const int64_t k0 = static_cast<int64_t>(s) * ST;
        copies.issue(b, src, rows, k0, static_cast<int>(min(static_cast<int64_t>(ST), a.tiles_k - k0)));
      }
      ws.issue(s, b, lane);
    };
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(s, s);
    with_row_tiles<RT, (RT > 8 ? 2 : 1)>((rows + 7) / 8, [&](auto nrt_c) {
      constexpr int NRT = decltype(nrt_c)::value;
      float acc[RT][4];
#pragma unroll
      for (int rt = 0; rt < NRT; ++rt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rt][i] = 0.0f;
      int split_end = min(a.per, tiles_k);
      bool first_split = true;
      // A k-split ends after tile i: its sums into the rows', in split order.
      auto end_split = [&]() {
        add_split<RT, NRT>(sum, n, tn * 16, rows, first_split, acc);
        first_split = false;
        split_end = min(split_end + a.per, tiles_k);
#pragma unroll
        for (int rt = 0; rt < NRT; ++rt)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[rt][q] = 0.0f;
      };
      // Buffers: stage s is read from rb = s % NS, stage s + NS - 1 issued into wb (the one read
      // at s - 1), kept as counters (the modulo costs ~3 instructions per use).
      int rb = 0, wb = NS - 1;
      for (int s = 0; s < ns; ++s) {
        cp_async_wait<NS - 2>();
        // Stage s has landed for every thread, and every warp is done with stage s - 1, whose
        // buffers the next issue refills.
        __syncthreads();
        issue(s + NS - 1, wb);
        wb = rb;
        const uint32_t* st = ring + rb * stage_words<K, ST>();
        const X* xl = xs + rb * kStageX + g * 4 + t;  // the lane's fragment of row tile 0
        rb = rb + 1 == NS ? 0 : rb + 1;
        const int i0 = s * ST;
        if (i0 + ST <= split_end) {  // block-uniform: a whole stage inside one split
#pragma unroll
          for (int u = 0; u < ST; ++u) wide_tile<K, CB, RT, NRT, XHalf>(st + u * 8 * K, xl + u * kRows * 4, lane, acc);
          if (i0 + ST == split_end) end_split();
        } else {  // a split (or k) ends inside the stage: k not a multiple of 4 ST tiles
#pragma unroll 1
          for (int u = 0; u < ST && i0 + u < tiles_k; ++u) {
            wide_tile<K, CB, RT, NRT, XHalf>(st + u * 8 * K, xl + u * kRows * 4, lane, acc);
            if (i0 + u + 1 == split_end) end_split();
          }
        }
      }
    });
    cp_async_wait<0>();
    __syncthreads();  // the next pass refills every buffer
  }
}

}  // namespace tf::cuda::exl3
