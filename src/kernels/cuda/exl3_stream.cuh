// The memory-bound inner loop of the EXL3 GEMV (exl3_gemv.cu, fused kernel) and the
// grouped MoE (exl3_moe.cu): one warp streams a column of 16x16 trellis tiles
// (fixed n-tile, consecutive k-tiles) through a private shared-memory ring filled
// with 16-byte cp.async copies, decodes each tile in registers into the A fragment
// of mma.m16n8k16 (exl3_decode.cuh) and multiplies it by up to 8 activation rows.
//
// Why a ring in shared memory: a 16 B load per lane moves 4 tiles (K = 4) per warp
// instruction, but lane l must decode word l of each tile; the ring turns the
// copy layout into the decode layout for free (conflict-free 4 B reads), and
// kStages stages in flight keep ~3 KB per warp outstanding (Little's law needs
// ~30 KB per SM at 4.4 TB/s). The ring's first stages can be issued before the
// kernel waits on its predecessor (programmatic dependent launch): weights never
// depend on earlier kernels.
//
// Activations: `xf` holds, per row, the B fragments of the rotated input (hi/lo
// fp16 split, exl3_gemv.cuh store_fragment_value), k-chunk major; two MMAs per tile
// (hi then lo) accumulate in f32, exactly as the older gemv_warp, so a row's sums
// keep one order whatever the batch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/exl3_decode.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda::exl3 {

constexpr int kStageTiles = 4;  // tiles per ring stage (one 16 B copy per lane at K = 4)
constexpr int kStages = 6;      // ring stages per warp

// u32 words of one ring stage / of a warp's whole ring at K bits per weight (ST tiles per
// stage, NS stages).
template <int K, int ST = kStageTiles>
constexpr int stage_words() {
  return ST * 8 * K;
}
template <int K, int ST = kStageTiles, int NS = kStages>
constexpr int ring_words() {
  return NS * stage_words<K, ST>();
}

// What a streaming kernel does per tile (kNormal); the others exist to time the
// parts alone (exl3_cuda_bench): kLoadOnly streams the trellis and skips decode and
// MMAs, kDecodeOnly decodes and multiplies whatever the ring holds without loading,
// kFixedOnly skips the stream entirely (what is left: launches, routing, rotations,
// epilogues), kOldLoop = kNormal through the previous loop (run_v1, for A/B timing),
// kNoRegCap = kNormal in a kernel compiled without its register cap (flat kernels: A/B of
// occupancy against spills).
enum StreamMode : int {
  kNormal = 0, kLoadOnly = 1, kDecodeOnly = 2, kFixedOnly = 3, kOldLoop = 4, kNoRegCap = 5
};
// Flags or'ed into a flat kernel's Mode (run_v2 only; A/B of the issue-8 levers, same bits):
// kFmaPack = decode_pair_fma (the pair pack on the FMA pipe, exl3_decode.cuh); kStage8 = ring
// stages of 8 tiles x 4 stages instead of 4 x 6 (half the per-stage bookkeeping per tile,
// ~the same bytes in flight); kDupStates = K = 4 states as doubled words (lane_states_k4_dup,
// one op fewer per tile); kStage16 = stages of 16 tiles x 3.
// Session 10: kInterleave2 / kInterleave4 = the warp's columns 2 / 4 at a time, their tiles of
// one k-tile decoded side by side (run_interleaved: independent decode and MMA chains, one x
// fragment read per k-tile for all of them); kWordHash = K = 4 hashes straight from the stream
// words (lane_hashes_k4: 4 ALU ops per tile move to the FMA pipe).
constexpr int kFmaPack = 16, kStage8 = 32, kDupStates = 64, kStage16 = 128;
constexpr int kInterleave2 = 256, kInterleave4 = 512, kWordHash = 1024;
// kPrefetchScales (flat down and combine kernels): the finish's svh / bias / suh prefetched into
// L1 before the wait on the preceding kernel (exl3_moe_flat.cuh prefetch_l1_128h; same bits).
// H200 run6s10: no gain (76.2 vs 76.3 us at 1 token; fixed-only 9.6 vs 9.0 us), not in the default.
constexpr int kPrefetchScales = 2048;
// kUncapped: the flat kernels compiled without their 64-register cap (exl3_moe_flat.cuh
// flat_min_blocks; the default since run6s10).
constexpr int kUncapped = 4096;
constexpr int mode_base(int mode) { return mode & 15; }
constexpr int mode_interleave(int mode) { return (mode & kInterleave4) ? 4 : (mode & kInterleave2) ? 2 : 1; }
constexpr int mode_stage_tiles(int mode) { return (mode & kStage16) ? 16 : (mode & kStage8) ? 8 : kStageTiles; }
constexpr int mode_stages(int mode) { return (mode & kStage16) ? 3 : (mode & kStage8) ? 4 : kStages; }

// Whether the EXL3 kernels launch with programmatic stream serialization (host side;
// exl3_gemv.cu: on unless TF_EXL3_PDL=0 or exl3_set_pdl(false)).
bool pdl_enabled();

// Copies tiles [0, min(kStageTiles, left)) of a stage (tile u at tile0 + u * step
// words) into `dst` (tile u at u * 8K words).
template <int K, int ST = kStageTiles>
__device__ __forceinline__ void load_stage(uint32_t* dst, const uint32_t* __restrict__ tile0, int64_t step, int left,
                                           int lane) {
  constexpr int kChunks = 2 * K;  // 16 B chunks per tile (32K bytes)
#pragma unroll
  for (int c = lane; c < ST * kChunks; c += 32) {
    const int u = c / kChunks, q = c % kChunks;
    if (u < left) cp_async16(dst + u * 8 * K + q * 4, tile0 + u * step + q * 4);
  }
}

// The lane's A fragment of a tile held in shared memory (8K words).
// FmaPack: decode_pair_fma; Dup (K = 4 only): lane_states_k4_dup + codebook_hash_dup;
// WordHash (K = 4 only; wins over Dup): lane_hashes_k4.
template <int K, int CB, bool FmaPack = false, bool DupIn = false, bool WordHash = false>
__device__ __forceinline__ void decode_smem_tile(const uint32_t* t, int lane, uint32_t (&a)[4]) {
  if constexpr (WordHash && K == 4) {
    uint32_t x[8];
    lane_hashes_k4<CB>(t[(lane + 31) & 31], t[lane], x);
    if constexpr (FmaPack) {
      a[0] = pair_values_fma<CB>(x[0], x[1]);
      a[1] = pair_values_fma<CB>(x[4], x[5]);
      a[2] = pair_values_fma<CB>(x[2], x[3]);
      a[3] = pair_values_fma<CB>(x[6], x[7]);
    } else {
      a[0] = pair_values<CB>(x[0], x[1]);
      a[1] = pair_values<CB>(x[4], x[5]);
      a[2] = pair_values<CB>(x[2], x[3]);
      a[3] = pair_values<CB>(x[6], x[7]);
    }
    return;
  }
  constexpr bool Dup = DupIn && K == 4;
  uint32_t st[8];
  if constexpr (Dup) {
    lane_states_k4_dup(t[(lane + 31) & 31], t[lane], st);
  } else if constexpr (K == 4) {
    // Bit s = 32l - 12: bits 20.. of word l-1 (tail-biting), then word l.
    lane_states_k4(t[(lane + 31) & 31], t[lane], st);
  } else if constexpr (K == 8) {
    const uint2 v = reinterpret_cast<const uint2*>(t)[lane];
    lane_states<K>(t[(2 * lane + 63) & 63], v.x, v.y, 0u, 24, st);
  } else {
    constexpr int nw = 8 * K;
    const int s = lane_first_bit<K>(lane), b = s >> 5;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = b + i;
      w[i] = t[idx >= nw ? idx - nw : idx];
    }
    lane_states<K>(w[0], w[1], w[2], w[3], s & 31, st);
  }
  if constexpr (FmaPack) {
    a[0] = decode_pair_fma<CB, Dup>(st[0], st[1]);
    a[1] = decode_pair_fma<CB, Dup>(st[4], st[5]);
    a[2] = decode_pair_fma<CB, Dup>(st[2], st[3]);
    a[3] = decode_pair_fma<CB, Dup>(st[6], st[7]);
  } else {
    a[0] = decode_pair<CB, Dup>(st[0], st[1]);
    a[1] = decode_pair<CB, Dup>(st[4], st[5]);
    a[2] = decode_pair<CB, Dup>(st[2], st[3]);
    a[3] = decode_pair<CB, Dup>(st[6], st[7]);
  }
}

// A warp's column of `ntiles` tiles: tile i at tile0 + i * step (words). Split in two
// so that a kernel can issue the first copies before it waits on its predecessor.
// ST tiles per ring stage, NS stages (the defaults everywhere but the flat kernels' kStage8).
template <int K, int ST = kStageTiles, int NS = kStages>
struct WarpStream {
  static constexpr int kStageTiles = ST;
  static constexpr int kStages = NS;
  const uint32_t* tile0;
  int64_t step;
  int ntiles;      // tiles of one column
  uint32_t* ring;  // ring_words<K, ST, NS>() words of this warp's shared memory
  // Columns streamed back to back through the same ring (column c at tile0 + c * col_step):
  // the ring never drains between them. More than one needs ntiles % kStageTiles == 0
  // and run_v2 (on_column gets every column's sums but the last).
  int cols = 1;
  int64_t col_step = 0;

  __device__ __forceinline__ int col_stages() const { return (ntiles + kStageTiles - 1) / kStageTiles; }
  __device__ __forceinline__ int stages() const { return col_stages() * cols; }

  // Stage s of a single column (run_v1's per-stage issue).
  __device__ __forceinline__ void issue(int s, int lane) const {
    if (s < col_stages())
      load_stage<K, ST>(ring + (s % kStages) * stage_words<K, ST>(),
                        tile0 + static_cast<int64_t>(s) * kStageTiles * step, step, ntiles - s * kStageTiles, lane);
    cp_async_commit();  // always: the group count stays fixed for wait_group
  }

  // Stage s of the whole column sequence (the prologue: a few stages, once).
  __device__ __forceinline__ void issue_cols(int s, int lane) const {
    if (cols == 1) return issue(s, lane);  // folds away where cols is the default (no division)
    const int spc = col_stages(), c = s / spc, ks = s - c * spc;
    if (s < stages())
      load_stage<K, ST>(ring + (s % kStages) * stage_words<K, ST>(),
                        tile0 + c * col_step + static_cast<int64_t>(ks) * kStageTiles * step, step,
                        ntiles - ks * kStageTiles, lane);
    cp_async_commit();  // always: the group count stays fixed for wait_group
  }

  // Stages 0 .. kStages-2 (weights only: safe before pdl_wait).
  template <int Mode = kNormal>
  __device__ __forceinline__ void prologue(int lane) const {
    if constexpr (mode_base(Mode) != kDecodeOnly && mode_base(Mode) != kFixedOnly) {
      constexpr int IC = mode_interleave(Mode);
      if constexpr (IC > 1) {
        if (interleave_ok<IC>()) {  // warp-uniform; the same test as stream()'s
#pragma unroll
          for (int s = 0; s < kStages - 1; ++s) issue_interleaved<IC>(s, lane);
          return;
        }
      }
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) issue_cols(s, lane);
    }
  }

  // Whether run_interleaved<IC> takes this stream: whole groups of IC columns and whole stages
  // of kStageTiles / IC k-tiles per column (else run_v2 does, in its own order).
  template <int IC>
  __device__ __forceinline__ bool interleave_ok() const {
    return cols % IC == 0 && ntiles % (kStageTiles / IC) == 0;
  }
  // Stages of the interleaved order: per group of IC columns, ntiles / (kStageTiles / IC).
  template <int IC>
  __device__ __forceinline__ int interleaved_stages() const {
    return cols / IC * (ntiles / (kStageTiles / IC));
  }
  // Stage s of the interleaved order (the prologue's): column group gi = s / spg, k-tiles
  // (s % spg) * kKSteps .. + kKSteps; ring tile u = k-step u / IC of column u % IC.
  template <int IC>
  __device__ __forceinline__ void issue_interleaved(int s, int lane) const {
    constexpr int kKSteps = kStageTiles / IC, kChunks = 2 * K;
    const int spg = ntiles / kKSteps;
    if (s < interleaved_stages<IC>()) {
      const int gi = s / spg, ks = s - gi * spg;
      const uint32_t* base = tile0 + static_cast<int64_t>(gi) * IC * col_step + static_cast<int64_t>(ks) * kKSteps * step;
      uint32_t* dst = ring + (s % kStages) * stage_words<K, ST>();
#pragma unroll
      for (int c = lane; c < ST * kChunks; c += 32) {
        const int u = c / kChunks, q = c % kChunks;
        cp_async16(dst + u * 8 * K + q * 4, base + (u % IC) * col_step + (u / IC) * step + q * 4);
      }
    }
    cp_async_commit();  // always: the group count stays fixed for wait_group
  }

  // acc[rt] (the lane's C fragment of row tile rt: output columns g, g+8 of the n-tile,
  // rows 8rt + 2t, +1) += tiles^T · x. Row r's fragments: xf + r * xs (uint4s), k-chunk
  // i at i * 4 + t; rows >= `rows` (1 <= rows) hold junk: callers must not store them.
  // The grouped MoE and the fused GEMV stay on run_v1: run_v2's bookkeeping registers cost
  // them occupancy (grouped RT = 1: 47 -> 79 registers); the flat kernels (register-capped)
  // use stream().
  template <int CB, int RT, int Mode = kNormal>
  __device__ __forceinline__ void run(const uint4* xf, int64_t xs, int rows, float (&acc)[RT][4]) const {
    if constexpr (mode_base(Mode) == kFixedOnly) return;
    else
      run_v1<CB, RT, (mode_base(Mode) == kOldLoop || mode_base(Mode) == kNoRegCap) ? kNormal : Mode>(xf, xs, rows, acc);
  }
  // run() through run_v2, with several columns when cols > 1: on_column(c, acc) for
  // c < cols - 1, then acc is zeroed for the next column; the last column's sums stay in acc.
  template <int CB, int RT, int Mode, typename OnColumn>
  __device__ __forceinline__ void stream(const uint4* xf, int64_t xs, int rows, float (&acc)[RT][4],
                                         OnColumn&& on_column) const {
    if constexpr (mode_base(Mode) == kFixedOnly) return;
    else if constexpr (mode_base(Mode) == kOldLoop) run_v1<CB, RT, kNormal>(xf, xs, rows, acc);
    else if constexpr (mode_interleave(Mode) > 1) {
      static_assert(RT == 1, "interleaved columns: one row tile (the flat kernels)");
      if (interleave_ok<mode_interleave(Mode)>())  // warp-uniform
        run_interleaved<CB, mode_interleave(Mode), Mode>(xf, xs, rows, acc, on_column);
      else
        run_v2<CB, RT, Mode>(xf, xs, rows, acc, on_column);
    } else {
      run_v2<CB, RT, Mode>(xf, xs, rows, acc, on_column);
    }
  }

  // One tile's decode + MMAs (tile u of the stage at `st`; xs[rt] = row tile rt's
  // fragments at the stage's first k-chunk, so each tile's offsets are immediates).
  template <int CB, int RT, int Mode>
  __device__ __forceinline__ void tile(const uint32_t* st, int u, const uint4* const (&xs)[RT], int rows, int lane,
                                       float (&acc)[RT][4]) const {
    if constexpr (mode_base(Mode) == kLoadOnly) {
      acc[0][0] += static_cast<float>(st[u * 8 * K + lane] >> 31);
    } else {
      uint32_t a[4];
      decode_smem_tile<K, CB, (Mode & kFmaPack) != 0, (Mode & kDupStates) != 0, (Mode & kWordHash) != 0>(
          st + u * 8 * K, lane, a);
      // The lever variants also drop the first row tile's check (rows >= 1 always): it cost a
      // compare-and-branch per tile at RT = 1 (the flat kernels' PTX, session 8).
      constexpr bool kTrim = (Mode & (kFmaPack | kStage8 | kDupStates | kStage16 | kWordHash)) != 0;
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        if ((!kTrim || rt > 0) && rt * 8 >= rows) break;  // warp-uniform
        const uint4 xv = xs[rt][u * 4];
        mma_f16_16816(acc[rt], a, xv.x, xv.y);
        mma_f16_16816(acc[rt], a, xv.z, xv.w);
      }
    }
  }

  // run() with the loop's bookkeeping taken out of the per-tile path (same arithmetic in
  // the same order as run_v1, so the same bits): the lane's copy sources advance by one
  // stage per iteration (no 64-bit multiplies), ring slots advance by compare-and-wrap
  // (no modulo), the x fragments by a per-stage offset (immediate per tile), and full
  // stages skip the per-tile bounds check. run_v1 spent ~15 of its ~58 instructions per
  // tile on this (H200 SASS count, final6).
  template <int CB, int RT, int Mode, typename OnColumn>
  __device__ __forceinline__ void run_v2(const uint4* xf, int64_t xs, int rows, float (&acc)[RT][4],
                                         OnColumn& on_column) const {
    constexpr int kChunks = 2 * K, kStageChunks = kStageTiles * kChunks, kCopies = (kStageChunks + 31) / 32;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (ntiles <= 0) {
      if constexpr (mode_base(Mode) != kDecodeOnly) cp_async_wait<0>();
      return;
    }
    const int ns = stages(), spc = col_stages();
    // Column jump of the copy sources after a column's last stage.
    const int64_t col_jump = col_step - static_cast<int64_t>(spc - 1) * kStageTiles * step;
    // Rows past `rows` read a valid row (see run_v1). (Only the flat kernels, RT = 1, use
    // run_v2: one pointer per row tile is cheap there.)
    const uint4* xrow[RT];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) xrow[rt] = xf + min(rt * 8 + g, rows - 1) * xs + t;
    const uint32_t* src[kCopies];
    int dst[kCopies], unit[kCopies];
    const int64_t stage_step = kStageTiles * step;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const int c = lane + 32 * j, u = c / kChunks, q = c % kChunks;
      unit[j] = c < kStageChunks ? u : kStageTiles;  // kStageTiles: never copies
      dst[j] = u * 8 * K + q * 4;
      src[j] = tile0 + u * step + q * 4 + (kStages - 1) * stage_step;
    }
    // Ring word offsets of stage s + kStages - 1 (being filled) and of stage s (int: fewer
    // registers than pointers; the flat kernels run register-capped).
    int wslot = (kStages - 1) * stage_words<K, ST>(), rslot = 0;
    int left = ntiles * cols - (kStages - 1) * kStageTiles;  // tiles from the stage being issued on
    // Stage-in-column of the next stage to issue (kStages - 1).
    int kis = (kStages - 1) % spc;
    if (cols > 1) {
      // The prologue's stages may already have crossed columns.
#pragma unroll
      for (int j = 0; j < kCopies; ++j)
        src[j] += static_cast<int64_t>((kStages - 1) / spc) * col_step -
                  static_cast<int64_t>((kStages - 1) / spc) * spc * stage_step;
    }
    // Issues the stage kStages - 1 ahead and waits for the current one.
    auto advance = [&]() {
      if constexpr (mode_base(Mode) != kDecodeOnly) {
        if (left > 0) {
#pragma unroll
          for (int j = 0; j < kCopies; ++j)
            if (unit[j] < left) cp_async16(ring + wslot + dst[j], src[j]);
        }
        cp_async_commit();  // always: the group count stays fixed for wait_group
        const int64_t adv = ++kis == spc ? col_jump : stage_step;
        if (kis == spc) kis = 0;
#pragma unroll
        for (int j = 0; j < kCopies; ++j) src[j] += adv;
        left -= kStageTiles;
        wslot += stage_words<K, ST>();
        if (wslot == ring_words<K, ST, NS>()) wslot = 0;
        cp_async_wait<kStages - 1>();
        __syncwarp();
      }
    };
    // Columns, each a tight loop over its full stages (the loop exl3_sass_count.py counts:
    // the column's store stays outside it), then a single column's partial stage if any.
    const int col_full = cols > 1 ? spc : ntiles / kStageTiles;
    for (int col = 0; col < cols; ++col) {
      for (int ks = 0; ks < col_full; ++ks) {
        advance();
        const uint32_t* st = ring + rslot;
        const uint4* xst[RT];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) xst[rt] = xrow[rt] + ks * kStageTiles * 4;
#pragma unroll
        for (int u = 0; u < kStageTiles; ++u) tile<CB, RT, Mode>(st, u, xst, rows, lane, acc);
        rslot += stage_words<K, ST>();
        if (rslot == ring_words<K, ST, NS>()) rslot = 0;
        if constexpr (mode_base(Mode) != kDecodeOnly) __syncwarp();  // the slot is refilled next iteration
      }
      if (col + 1 < cols) {  // warp-uniform; never for a single column
        on_column(col, acc);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[rt][i] = 0.0f;
      }
    }
    if (cols == 1 && col_full < ns) {  // a single column's partial last stage
      advance();
      const uint4* xst[RT];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) xst[rt] = xrow[rt] + col_full * kStageTiles * 4;
#pragma unroll
      for (int u = 0; u < kStageTiles; ++u)
        if (col_full * kStageTiles + u < ntiles) tile<CB, RT, Mode>(ring + rslot, u, xst, rows, lane, acc);
    }
    if constexpr (mode_base(Mode) != kDecodeOnly) cp_async_wait<0>();  // no copy may outlive the ring
  }

  // run_v2 for IC columns at a time (kInterleave2 / kInterleave4; one row tile): the ring
  // holds, per k-tile, the IC columns' tiles side by side; their IC decodes are independent and
  // their MMAs are issued hi of every column, then lo of every column, so no MMA waits on the one
  // just before it (run_v2's hi -> lo chain through one accumulator put a NOP and a stall
  // between them, H200 run2s10 ncu: "wait" 26% of the flat loop's stall samples). One x
  // fragment read serves the IC tiles. Each column keeps its own accumulator and run_v2's order
  // of MMAs (k ascending, hi then lo): the same bits. Needs interleave_ok<IC>(); on_column(c,
  // sums) for every column but the last, whose sums end in acc.
  template <int CB, int IC, int Mode, typename OnColumn>
  __device__ __forceinline__ void run_interleaved(const uint4* xf, int64_t xs, int rows, float (&acc)[1][4],
                                                  OnColumn& on_column) const {
    constexpr int kKSteps = kStageTiles / IC, kChunks = 2 * K, kStageChunks = kStageTiles * kChunks;
    constexpr int kCopies = (kStageChunks + 31) / 32;
    // Copy j of a lane is tile u = c / kChunks, chunk q = c % kChunks of c = lane + 32 j. Where
    // kChunks divides 32 and IC divides 32 / kChunks (K = 1, 2, 4, 8 with whole stages), copy j
    // is copy 0 moved by j * (32 / kChunks / IC) k-tiles and 32 * 4 ring words: one source
    // pointer per lane instead of kCopies (registers: the flat kernels run capped).
    constexpr bool kAffine = 32 % kChunks == 0 && (32 / kChunks) % IC == 0 && kStageChunks % 32 == 0;
    constexpr bool kLoads = mode_base(Mode) != kDecodeOnly;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int spg = ntiles / kKSteps, groups = cols / IC;
    const int64_t stage_step = kKSteps * step;
    // Copy-source jump after a group's last stage to the next group's first.
    const int64_t group_jump = IC * col_step - static_cast<int64_t>(spg - 1) * stage_step;
    const uint4* xrow = xf + min(g, rows - 1) * xs + t;  // rows past `rows` read a valid row (run_v1)
    // The loop issues stages kStages - 1 on (the prologue issued the ones before).
    const int g0 = (kStages - 1) / spg;
    int kis = (kStages - 1) - g0 * spg;  // k-stage within its group of the next stage to issue
    const uint32_t* first = tile0 + static_cast<int64_t>(g0) * IC * col_step + kis * stage_step;
    const uint32_t* src[kAffine ? 1 : kCopies];
    int dst[kAffine ? 1 : kCopies];
    bool on[kAffine ? 1 : kCopies];
#pragma unroll
    for (int j = 0; j < (kAffine ? 1 : kCopies); ++j) {
      const int c = lane + 32 * j, u = c / kChunks, q = c % kChunks;
      on[j] = c < kStageChunks;
      dst[j] = u * 8 * K + q * 4;
      src[j] = first + (u % IC) * col_step + (u / IC) * step + q * 4;
    }
    const int64_t copy_step = (32 / kChunks / IC) * step;  // kAffine: copy j - copy 0, in words
    int wslot = (kStages - 1) * stage_words<K, ST>(), rslot = 0;
    int left = groups * spg - (kStages - 1);  // stages still to issue
    auto advance = [&]() {
      if constexpr (kLoads) {
        if (left > 0) {
          if constexpr (kAffine) {
#pragma unroll
            for (int j = 0; j < kCopies; ++j) cp_async16(ring + wslot + dst[0] + j * 32 * 4, src[0] + j * copy_step);
          } else {
#pragma unroll
            for (int j = 0; j < kCopies; ++j)
              if (on[j]) cp_async16(ring + wslot + dst[j], src[j]);
          }
        }
        cp_async_commit();  // always: the group count stays fixed for wait_group
        const int64_t adv = ++kis == spg ? group_jump : stage_step;
        if (kis == spg) kis = 0;
#pragma unroll
        for (int j = 0; j < (kAffine ? 1 : kCopies); ++j) src[j] += adv;
        --left;
        wslot += stage_words<K, ST>();
        if (wslot == ring_words<K, ST, NS>()) wslot = 0;
        cp_async_wait<kStages - 1>();
        __syncwarp();
      }
    };
    for (int gi = 0; gi < groups; ++gi) {
      float sums[IC][1][4];
#pragma unroll
      for (int i = 0; i < IC; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) sums[i][0][q] = 0.0f;
      for (int ks = 0; ks < spg; ++ks) {
        advance();
        const uint32_t* st = ring + rslot;
        const uint4* xst = xrow + ks * kKSteps * 4;
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          const uint4 xv = xst[kk * 4];
          if constexpr (mode_base(Mode) == kLoadOnly) {
#pragma unroll
            for (int i = 0; i < IC; ++i) sums[i][0][0] += static_cast<float>(st[(kk * IC + i) * 8 * K + lane] >> 31);
          } else {
            uint32_t a[IC][4];
#pragma unroll
            for (int i = 0; i < IC; ++i)
              decode_smem_tile<K, CB, (Mode & kFmaPack) != 0, (Mode & kDupStates) != 0, (Mode & kWordHash) != 0>(
                  st + (kk * IC + i) * 8 * K, lane, a[i]);
#pragma unroll
            for (int i = 0; i < IC; ++i) mma_f16_16816(sums[i][0], a[i], xv.x, xv.y);
#pragma unroll
            for (int i = 0; i < IC; ++i) mma_f16_16816(sums[i][0], a[i], xv.z, xv.w);
          }
        }
        rslot += stage_words<K, ST>();
        if (rslot == ring_words<K, ST, NS>()) rslot = 0;
        if constexpr (kLoads) __syncwarp();  // the slot is refilled next iteration
      }
#pragma unroll
      for (int i = 0; i < IC; ++i) {
        const int c = gi * IC + i;
        if (c + 1 < cols) {  // warp-uniform
          on_column(c, sums[i]);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[0][q] = sums[i][0][q];
        }
      }
    }
    if constexpr (kLoads) cp_async_wait<0>();  // no copy may outlive the ring
  }

  // The previous loop (the grouped MoE and fused GEMV; the flat kernels' kOldLoop A/B).
  template <int CB, int RT, int Mode = kNormal>
  __device__ __forceinline__ void run_v1(const uint4* xf, int64_t xs, int rows, float (&acc)[RT][4]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ns = stages();
    for (int s = 0; s < ns; ++s) {
      if constexpr (mode_base(Mode) != kDecodeOnly) {
        issue(s + kStages - 1, lane);
        cp_async_wait<kStages - 1>();
        __syncwarp();
      }
      const uint32_t* st = ring + (s % kStages) * stage_words<K, ST>();
#pragma unroll
      for (int u = 0; u < kStageTiles; ++u) {
        const int i = s * kStageTiles + u;
        if (i >= ntiles) break;  // warp-uniform
        if constexpr (mode_base(Mode) == kLoadOnly) {
          acc[0][0] += static_cast<float>(st[u * 8 * K + lane] >> 31);
        } else {
          uint32_t a[4];
          decode_smem_tile<K, CB, (Mode & kFmaPack) != 0, (Mode & kDupStates) != 0>(st + u * 8 * K, lane, a);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            if (rt * 8 >= rows) break;  // warp-uniform
            // Rows past `rows` read a valid row instead of zeros: an MMA's B column only
            // reaches its own output column, which is never stored; this keeps the select,
            // its zeroing and a divergent branch out of the loop (H200 SASS count, run2s6).
            const int r = min(rt * 8 + g, rows - 1);
            const uint4 xv = xf[r * xs + i * 4 + t];
            mma_f16_16816(acc[rt], a, xv.x, xv.y);
            mma_f16_16816(acc[rt], a, xv.z, xv.w);
          }
        }
      }
      if constexpr (mode_base(Mode) != kDecodeOnly) __syncwarp();  // the slot is refilled next iteration
    }
    if constexpr (mode_base(Mode) != kDecodeOnly) cp_async_wait<0>();  // no copy may outlive the ring
  }
};

// 128-point FWHT of one warp's values: lane l holds elements l + 32q in v[q]. The
// butterflies of kernels/cpu fwht128 (u + v, u - v; h = 1, 2, .., 64), then * 1/sqrt(128).
__device__ __forceinline__ void warp_fwht128(float (&v)[4], float norm) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float o = __shfl_xor_sync(0xffffffffu, v[q], h);
      v[q] = (lane & h) ? __fsub_rn(o, v[q]) : __fadd_rn(v[q], o);
    }
  }
#pragma unroll
  for (int h = 1; h < 4; h <<= 1) {  // element bits 32 and 64 = bits 0 and 1 of q
    float n[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) n[q] = (q & h) ? __fsub_rn(v[q ^ h], v[q]) : __fadd_rn(v[q], v[q ^ h]);
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = n[q];
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = __fmul_rn(v[q], norm);
}

}  // namespace tf::cuda::exl3
