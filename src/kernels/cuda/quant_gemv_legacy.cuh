// The slice GEMV kernel (QuantGemvArgs::legacy, the default of quant_matmul), for one
// matrix or several of one format and one k in one launch (quant_gemv_many).
// Included by quant_gemv.cu only.
//
// 128 output rows per block of 8 warps (each warp 16 rows; QuantGemvArgs::slice_warps = 4:
// 4 warps of 32 rows, the earlier configuration), K split into slices of up
// to 15 chunks over blocks (quant_gemv_plan); slices summed in slice order by a second
// kernel (or by the last block of each row block, QuantGemvArgs::fused_sum). Several
// segments (matrices): the grid is the list of (segment, row block, slice) units, each
// segment with the plan it would get alone, and one summing launch serves them all, so
// every segment's bits equal a call on it alone.
//
// Per block: the first U chunks of weights of every lane are loaded into registers
// before anything else (U = QuantGemvArgs::inflight: q4 U x 32 bytes per lane, fp8 U x
// 64), then the block stages x for its K slice in shared memory, only the m rows the call
// has (rows >= m read as zeros): per (x row, chunk, t) the lane's 8 pairs of x, scaled by a
// power of two 2^e per (row, chunk) that puts its largest |x| in [2^13, 2^14) and split
// into f16 hi and lo (22 significant bits; the 2^-e goes into the scale). Both weight
// formats are exact in f16 (q4: lop3 to 1024 + q, minus 1032; e4m3: one cvt), so the
// MMAs are f16. (Two bf16 terms with q4's -136 folded into the f32 side, tried this
// session, measured 5.9e-6 relative error against 9.8e-7 before, enough to flip a
// greedy near-tie of the random-weight demo between the CPU and CUDA backends.)
// Run3 (earlier version, U = 2, 3 terms, x staged for 8 rows): 4096->8192 m=1 20.5 us
// = 21% of HBM.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_gemv_frag.cuh"

namespace tf::cuda::legacy_gemv {
namespace {

using qfrag::fp8_pair_f16;
using qfrag::half2_bits;
using qfrag::load_lane_chunk;
using qfrag::mma_16816_f16;
using qfrag::pair_elem;
using qfrag::q4_pair_f16;

// T = 16-row MMA tiles per warp (a template parameter): 2 (4 warps of 32 rows, the
// earlier configuration) or 1 (8 warps of 16 rows: twice the warps per SM, each with
// half the serial chain; QuantGemvArgs::slice_warps). A row's bits are the same either
// way (an MMA tile's rows do not depend on the other tile).
template <int T>
constexpr int warps_of() { return static_cast<int>(kQuantBlockRows) / (16 * T); }
constexpr int kChunkWords = 64;  // x tile words per (x row, chunk): [quad][t][4]
// Row stride of the x tile = chunks * 64 + 16 words: x rows g and g+1 (one 8-lane phase
// of a 16-byte load) land in different halves of the banks.
constexpr int kRowPadWords = 16;
static_assert(warps_of<1>() * 16 == kQuantBlockRows && warps_of<2>() * 32 == kQuantBlockRows, "a block covers one fp8 scale row");

// One matrix of a launch and its plan.
struct Seg {
  float* out;
  int64_t ldo;
  const uint8_t* codes;
  const void* scales;
  float* ws;           // [slices, m, n] when slices > 1
  unsigned* counters;  // per row block (fused slice sum); null: the second kernel sums
  int64_t n, row_blocks, slices, cps, unit0;  // unit0: first grid block of the segment
  bool wvec;
};

struct Params {
  const float* x;
  int64_t ldx;
  int64_t m, k, chunks;
  int count;
  int64_t xtile_words;  // words of the x tile (the shared-memory weight ring follows it)
  // Slices summed by cluster rank 0 through distributed shared memory: each row block's
  // slices are one cluster (consecutive blocks, rank = slice; every segment has the same
  // slice count, the cluster size). Else the grid is row block fastest.
  bool cluster;
  bool accumulate, xvec;
  // B-operand kernel (quant_gemv_bop.cuh): q4 scales copied in 4-byte pairs of chunks (every
  // segment's scales 4-byte aligned, an even chunk count per row and per slice).
  bool scale_pairs;
  Seg seg[kQuantGemvMaxSegments];
};

// x rows 0..m-1 of chunks [c0, c0 + nck) into the tile (word (c * 4 + quad) * 16 + 4t + e of
// a row: quads 0-1 the hi pairs 0-3 / 4-7 of lane t's 16 elements, quads 2-3 the lo pairs),
// and one f32 per (row, chunk) into negs[chunk][row] (zeros for rows >= m):
// both formats: f16 terms of x * 2^e (e per row and chunk, putting the chunk's largest |x| in
// [2^13, 2^14): hi + lo carry 22 significant bits), 2^-e.
template <MatrixFormat F>
__device__ void stage_x(uint32_t* xs, float* negs, int row_words, const Params& p, int64_t c0, int nck) {
  const int units = static_cast<int>(p.m) * nck * 4;
  const int padded = (units + 31) / 32 * 32;  // whole warps: the chunk sum below shuffles
  for (int i = threadIdx.x; i < kQuantGemvRows * nck; i += blockDim.x) {
    if (i / nck >= p.m) negs[(i % nck) * kQuantGemvRows + i / nck] = 0.0f;
  }
  for (int u = threadIdx.x; u < padded; u += blockDim.x) {
    const bool on = u < units;
    const int r = on ? u / (nck * 4) : 0, rem = u % (nck * 4), c = rem >> 2, t = rem & 3;
    const int64_t k0 = (c0 + c) * kQuantChunk + 16 * t;
    float v[16];
    const float* src = p.x + r * p.ldx + k0;
    if (on && p.xvec && k0 + 16 <= p.k) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 f = __ldg(reinterpret_cast<const float4*>(src) + q);
        v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = on && k0 + i < p.k ? __ldg(src + i) : 0.0f;
    }
    uint32_t words[16];
    float per_chunk = 0.0f;
    {
      // Both formats: f16 terms of x * 2^e (q4 and e4m3 weights are exact in f16).
      float mx = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) mx = fmaxf(mx, fabsf(v[i]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // mx < 2^E with E its frexp exponent (biased exponent - 126; zero and subnormals
      // take the largest scale); e = 14 - E, kept where 2^e and 2^-e are normal floats.
      const int be = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFFu);
      const int e = max(-126, min(126, 14 - (be - 126)));
      const float up = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
      per_chunk = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a = v[pair_elem<F>(j, 0)] * up, b = v[pair_elem<F>(j, 1)] * up;  // exact
        const __half2 hi = __floats2half2_rn(a, b);
        const __half2 lo = __floats2half2_rn(a - __low2float(hi), b - __high2float(hi));  // exact difference
        words[j] = half2_bits(hi);
        words[8 + j] = half2_bits(lo);
      }
    }
    if (!on) continue;
    if (t == 0) negs[c * kQuantGemvRows + r] = per_chunk;
    uint32_t* row = xs + r * row_words + c * kChunkWords + 4 * t;
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<uint4*>(row + 16 * q) = make_uint4(words[4 * q], words[4 * q + 1], words[4 * q + 2], words[4 * q + 3]);
  }
}

// One lane's raw weights of one chunk: rows g and g+8 of each tile (q4 2 words each, fp8 4),
// and their scales as loaded (q4: the f16 bits per row, converted where used so that no
// instruction waits on the load early; fp8: the block's f32 bits).
template <MatrixFormat F, int T>
struct Raw {
  static constexpr int kTiles = T;
  static constexpr int kWords = F == MatrixFormat::kQ4 ? 2 : 4;
  static constexpr int kScales = F == MatrixFormat::kQ4 ? kTiles * 2 : 1;
  uint32_t w[kTiles][2][kWords];
  uint32_t s[kScales];
  __device__ float scale(int r, int h) const {
    if constexpr (F == MatrixFormat::kQ4) {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(s[2 * r + h])));
    } else {
      return __uint_as_float(s[0]);
    }
  }
  __device__ uint32_t pair(int r, int h, int j) const {
    if constexpr (F == MatrixFormat::kQ4) {
      return q4_pair_f16(w[r][h][0], w[r][h][1], j);
    } else {
      return fp8_pair_f16(w[r][h], j);
    }
  }
};

template <MatrixFormat F, int T>
__device__ __forceinline__ void load_raw(Raw<F, T>& raw, const Seg& sg, const Params& p, int64_t row0, int64_t chunk,
                                         int g, int t) {
  load_lane_chunk<F, T>(raw.w, raw.s, sg.codes, sg.scales, sg.n, p.k, p.chunks, sg.wvec, row0, chunk, g, t);
}

// One chunk's MMAs into acc: x row g's B fragments from the tile (zeros for rows >= m),
// the lane's weights and scales from `rw`.
template <MatrixFormat F, int T>
__device__ __forceinline__ void chunk_mma(float (&acc)[T][4], const Raw<F, T>& rw, const uint32_t* xrow,
                                          const float* negs, int c, int t, bool has_x) {
  constexpr int kTiles = T;
  uint32_t b[16];  // hi pairs 0..7, lo pairs 0..7 of x row g
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 v = has_x ? *reinterpret_cast<const uint4*>(xrow + c * kChunkWords + 16 * q) : make_uint4(0u, 0u, 0u, 0u);
    b[4 * q] = v.x; b[4 * q + 1] = v.y; b[4 * q + 2] = v.z; b[4 * q + 3] = v.w;
  }
  // Two accumulator chains per tile (hi, lo): 4 independent chains of 4 MMAs; the
  // chunk's sum is scaled back by 2^-e of its column (C column 2t + (i & 1)).
  float ph[kTiles][4], pl[kTiles][4];
  const float2 ns = *reinterpret_cast<const float2*>(negs + c * kQuantGemvRows + 2 * t);
#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ph[r][i] = 0.0f;
      pl[r][i] = 0.0f;
    }
#pragma unroll
  for (int s = 0; s < 4; ++s) {
#pragma unroll
    for (int r = 0; r < kTiles; ++r) {
      const uint32_t a[4] = {rw.pair(r, 0, 2 * s), rw.pair(r, 1, 2 * s), rw.pair(r, 0, 2 * s + 1),
                             rw.pair(r, 1, 2 * s + 1)};
      mma_16816_f16(ph[r], a, b[2 * s], b[2 * s + 1]);
      mma_16816_f16(pl[r], a, b[8 + 2 * s], b[8 + 2 * s + 1]);
    }
  }
  if constexpr (F == MatrixFormat::kQ4) {
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        acc[r][i] = fmaf(rw.scale(r, i >> 1) * (i & 1 ? ns.y : ns.x), ph[r][i] + pl[r][i], acc[r][i]);  // 2^-e: exact
  } else {
    const float s0 = rw.scale(0, 0) * ns.x, s1 = rw.scale(0, 0) * ns.y;  // exact: 2^-e
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][i] = fmaf(i & 1 ? s1 : s0, ph[r][i] + pl[r][i], acc[r][i]);
  }
}

// U > 0: each lane keeps U chunks of its weights in flight in registers (load_raw).
// U == 0 (QuantGemvArgs::smem_weights): each warp copies its 16T rows into a
// shared-memory ring of two groups of 128 bytes per row (q4 4 chunks, fp8 2) by
// cp.async (16-byte pieces, 8 lanes per 128-byte line of a row: whole lines per request,
// and no registers held while in flight), the scales into shared memory up front; the
// chunk math is the same, so are the bits. Pieces are swizzled per row so that the
// A-fragment reads are conflict-free.
template <int T>
constexpr int ring_words() { return 2 * (16 * T) * 32; }  // per warp: 2 groups x 16T rows x 128 bytes
constexpr int kBlockRingWords = 2 * static_cast<int>(kQuantBlockRows) * 32;  // per block, either T

// T = 1: 8 warps of 256 threads, at least 4 blocks per SM (<= 64 registers per thread).
template <MatrixFormat F, int U, int T>
__global__ void __launch_bounds__(warps_of<T>() * 32, 4) quant_gemv_kernel(const __grid_constant__ Params p) {
  constexpr int kTiles = T, kWarps = warps_of<T>(), kRingWords = ring_words<T>();
  static_assert(T == 2 || U == 0, "one tile per warp: the shared-memory weight ring only");
  extern __shared__ uint4 smem_x[];
  __shared__ float negs[kQuantMaxSliceChunks * kQuantGemvRows];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_x);
  // The block's segment, row block and slice.
  const int64_t unit = blockIdx.x;
  int si = 0;
  for (int i = 1; i < p.count; ++i)
    if (unit >= p.seg[i].unit0) si = i;
  const Seg& sg = p.seg[si];
  const int64_t local = unit - sg.unit0;
  const int64_t rb = p.cluster ? local / sg.slices : local % sg.row_blocks;
  const int64_t slice = p.cluster ? local % sg.slices : local / sg.row_blocks;
  const int64_t c0 = slice * sg.cps;
  const int nck = static_cast<int>(std::min<int64_t>(sg.cps, p.chunks - c0));
  const int row_words = nck * kChunkWords + kRowPadWords;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = rb * kQuantBlockRows + warp * (16 * kTiles);

  float acc[kTiles][4];
#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;
  const bool has_x = g < p.m;
  const uint32_t* xrow = xs + g * row_words + 4 * t;

  if constexpr (U == 0) {
    // Bytes of one chunk of one row (q4 32, fp8 64) and chunks per 128-byte group.
    constexpr int kChunkBytes = F == MatrixFormat::kQ4 ? 32 : 64, kG = 128 / kChunkBytes, kPieces = kChunkBytes / 16;
    uint32_t* ring = xs + p.xtile_words + warp * kRingWords;
    // Scales: q4 [128 rows][nck] f16 bits, fp8 [nck] f32 (one per 128-row block and chunk).
    void* scale_tile = xs + p.xtile_words + kBlockRingWords;
    const int groups = (nck + kG - 1) / kG;
    const int64_t row_bytes = F == MatrixFormat::kQ4 ? p.chunks * 32 : p.k;
    // Piece pc of a row sits at pc ^ swizzle(row): the A-fragment reads are conflict-free.
    auto swz = [](int row) { return F == MatrixFormat::kQ4 ? (row & 3) << 1 : (row & 1) << 2; };
    auto issue = [&](int q) {
      uint32_t* slot = ring + (q & 1) * (kRingWords / 2);
#pragma unroll
      for (int i = 0; i < 4 * kTiles; ++i) {  // 8 pieces per row
        const int piece = lane + 32 * i, row = piece >> 3, pc = piece & 7, chunk = kG * q + pc / kPieces;
        const int64_t byte = (c0 + chunk) * kChunkBytes + (pc % kPieces) * 16;
        if (chunk < nck && row0 + row < sg.n) {
          // fp8: a piece past K (K a multiple of 16 here) is zero-filled, never read from the next row.
          const int valid = F == MatrixFormat::kQ4 || byte < p.k ? 16 : 0;
          const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(slot + row * 32 + ((pc ^ swz(row)) * 4)));
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s),
                       "l"(sg.codes + (row0 + row) * row_bytes + (valid ? byte : 0)), "r"(valid)
                       : "memory");
        }
      }
      cp_async_commit();
    };
    issue(0);
    if (groups > 1) {
      issue(1);
    } else {
      cp_async_commit();
    }
    // Scales of the block's rows and slice (weights too: before the dependency wait).
    if constexpr (F == MatrixFormat::kQ4) {
      auto* ssc = static_cast<unsigned short*>(scale_tile);
      const auto* sc = static_cast<const unsigned short*>(sg.scales);
      const int64_t grow = rb * kQuantBlockRows + threadIdx.x;
      if (threadIdx.x < kQuantBlockRows) {  // one thread per row of the block (T = 1: half the threads)
        unsigned short v[kQuantMaxSliceChunks];
#pragma unroll
        for (int j = 0; j < kQuantMaxSliceChunks; ++j)
          v[j] = j < nck && grow < sg.n ? __ldg(sc + grow * p.chunks + c0 + j) : static_cast<unsigned short>(0);
#pragma unroll
        for (int j = 0; j < kQuantMaxSliceChunks; ++j)
          if (j < nck) ssc[threadIdx.x * nck + j] = v[j];
      }
    } else {
      const int64_t gc = (p.k + 127) / 128;
      if (static_cast<int>(threadIdx.x) < nck)
        static_cast<float*>(scale_tile)[threadIdx.x] =
            __ldg(static_cast<const float*>(sg.scales) + rb * gc + (c0 + threadIdx.x) / 2);
    }
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    stage_x<F>(xs, negs, row_words, p, c0, nck);
    __syncthreads();
    for (int q = 0; q < groups; ++q) {
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // group q has landed (q + 1 may not)
      __syncwarp();
      const uint32_t* slot = ring + (q & 1) * (kRingWords / 2);
#pragma unroll
      for (int j = 0; j < kG; ++j) {
        const int c = kG * q + j;
        if (c >= nck) break;
        Raw<F, T> rw;
#pragma unroll
        for (int r = 0; r < kTiles; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 16 * r + 8 * h + g;
            if constexpr (F == MatrixFormat::kQ4) {
              const int pc = 2 * j + (t >> 1);
              const uint2 v = *reinterpret_cast<const uint2*>(slot + row * 32 + ((pc ^ swz(row)) * 4) + (t & 1) * 2);
              rw.w[r][h][0] = v.x;
              rw.w[r][h][1] = v.y;
              rw.s[2 * r + h] = static_cast<const unsigned short*>(scale_tile)[(warp * (16 * kTiles) + row) * nck + c];
            } else {
              const int pc = 4 * j + t;
              const uint4 v = *reinterpret_cast<const uint4*>(slot + row * 32 + ((pc ^ swz(row)) * 4));
              rw.w[r][h][0] = v.x;
              rw.w[r][h][1] = v.y;
              rw.w[r][h][2] = v.z;
              rw.w[r][h][3] = v.w;
            }
          }
        if constexpr (F != MatrixFormat::kQ4) rw.s[0] = __float_as_uint(static_cast<const float*>(scale_tile)[c]);
        chunk_mma<F>(acc, rw, xrow, negs, c, t, has_x);
      }
      __syncwarp();  // the slot is read: refill it
      if (q + 2 < groups) {
        issue(q + 2);
      } else {
        cp_async_commit();  // an empty group keeps wait_group 1 meaning "all but the newest"
      }
    }
  } else {
    // The first weights are in flight while the block stages x.
    Raw<F, T> raw[U > 0 ? U : 1];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < nck) load_raw<F, T>(raw[u], sg, p, row0, c0 + u, g, t);
    // Up to here only the weights were read: under programmatic dependent launch this runs
    // while the kernel before still finishes; x, out and the workspace come after it has.
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    stage_x<F>(xs, negs, row_words, p, c0, nck);
    __syncthreads();
    for (int c = 0; c < nck; c += U) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (c + u >= nck) break;
        chunk_mma<F>(acc, raw[u], xrow, negs, c + u, t, has_x);
        // This slot's registers are free: load the chunk U ahead into it.
        if (c + u + U < nck) load_raw<F, T>(raw[u], sg, p, row0, c0 + c + u + U, g, t);
      }
    }
  }

  if (p.cluster) {
    // The block's sums into shared memory; cluster rank 0 adds the slices in rank (=
    // slice) order, as the second kernel would.
    __shared__ float red[kQuantGemvRows * kQuantBlockRows];
    const int wr = (threadIdx.x >> 5) * (16 * kTiles);
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[(2 * t + (i & 1)) * kQuantBlockRows + wr + 16 * r + 8 * (i >> 1) + g] = acc[r][i];
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // a block barrier too
    if (cluster.block_rank() == 0) {
      const int64_t rb0 = rb * kQuantBlockRows;
      for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
        const int64_t row = rb0 + i % kQuantBlockRows, xr = i / kQuantBlockRows;
        if (row >= sg.n) continue;
        float v = red[i];
        for (int s = 1; s < static_cast<int>(sg.slices); ++s) v += cluster.map_shared_rank(red, s)[i];
        float* o = sg.out + xr * sg.ldo + row;
        *o = p.accumulate ? *o + v : v;
      }
    }
    cluster.sync();  // the other blocks' shared memory must outlive rank 0's reads
    return;
  }
#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + 16 * r + 8 * (i >> 1) + g;
      const int64_t xr = 2 * t + (i & 1);
      if (row >= sg.n || xr >= p.m) continue;
      if (sg.slices == 1) {
        float* o = sg.out + xr * sg.ldo + row;
        *o = p.accumulate ? *o + acc[r][i] : acc[r][i];
      } else {
        sg.ws[(slice * p.m + xr) * sg.n + row] = acc[r][i];
      }
    }
  if (sg.slices == 1 || sg.counters == nullptr) return;
  // The last block of this row block to finish adds the slices in slice order (the
  // counter says who is last; it resets it for the next call).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* ctr = sg.counters + rb;
    last = atomicAdd(ctr, 1u) == static_cast<unsigned>(sg.slices - 1);
    if (last) atomicExch(ctr, 0u);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t rb0 = rb * kQuantBlockRows;
  for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
    const int64_t row = rb0 + i % kQuantBlockRows, xr = i / kQuantBlockRows;
    if (row >= sg.n) continue;
    float v = __ldcg(sg.ws + xr * sg.n + row);
    for (int64_t s = 1; s < sg.slices; ++s) v += __ldcg(sg.ws + (s * p.m + xr) * sg.n + row);
    float* o = sg.out + xr * sg.ldo + row;
    *o = p.accumulate ? *o + v : v;
  }
}

// The second kernel: for every segment with slices > 1, out[xr, row] (+)= the sum over
// slices in order of ws[slice, xr, row]. Elements are numbered segment after segment.
struct SumSeg {
  float* out;
  int64_t ldo;
  const float* ws;
  int64_t n, slices, e0;  // e0: first element (of m * n) of the segment
};
struct SumParams {
  int count;
  int64_t m, total;
  bool accumulate;
  SumSeg seg[kQuantGemvMaxSegments];
};

__global__ void quant_gemv_sum_slices(const __grid_constant__ SumParams p) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the GEMV's partial sums (PDL)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.total; i += int64_t(gridDim.x) * blockDim.x) {
    int si = 0;
    for (int s = 1; s < p.count; ++s)
      if (i >= p.seg[s].e0) si = s;
    const SumSeg& sg = p.seg[si];
    const int64_t e = i - sg.e0, plane = p.m * sg.n;
    float v = sg.ws[e];
    for (int64_t s = 1; s < sg.slices; ++s) v += sg.ws[s * plane + e];
    float* o = sg.out + (e / sg.n) * sg.ldo + e % sg.n;
    *o = p.accumulate ? *o + v : v;
  }
}

template <MatrixFormat F, int U, int T>
void launch_kernel(cudaStream_t stream, Params p, int64_t units, int64_t cps_max, bool pdl) {
  constexpr int kWarps = warps_of<T>();
  p.xtile_words = p.m * (cps_max * kChunkWords + kRowPadWords);
  size_t smem = size_t(p.xtile_words) * 4;
  if (U == 0) smem += size_t{kBlockRingWords} * 4 + size_t(kQuantBlockRows * cps_max) * 2;  // fp8 needs less
  // Four blocks of up to 49 KB of x tile per SM: ask for the largest shared-memory
  // carveout, and allow more than 48 KB of dynamic shared memory.
  static const bool carveout = [] {
    (void)cudaFuncSetAttribute(quant_gemv_kernel<F, U, T>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               int{cudaSharedmemCarveoutMaxShared});
    (void)cudaFuncSetAttribute(
        quant_gemv_kernel<F, U, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(kQuantGemvRows * (kQuantMaxSliceChunks * kChunkWords + kRowPadWords) * 4 +
                         (U == 0 ? kBlockRingWords * 4 + kQuantBlockRows * kQuantMaxSliceChunks * 2 : 0)));
    (void)cudaGetLastError();
    return true;
  }();
  (void)carveout;
  if (!p.cluster && !pdl) {
    quant_gemv_kernel<F, U, T><<<static_cast<unsigned>(units), kWarps * 32, smem, stream>>>(p);
    return;
  }
  const dim3 cluster(static_cast<unsigned>(p.seg[0].slices), 1, 1);
  const cudaError_t e = launch_kernel_ex(quant_gemv_kernel<F, U, T>, dim3(static_cast<unsigned>(units)),
                                         dim3(kWarps * 32), smem, stream, p.cluster ? &cluster : nullptr, pdl, p);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("quant_gemv: launch failed: ") + cudaGetErrorString(e)));
}

void launch_sum(cudaStream_t stream, const SumParams& sp, bool pdl) {
  if (!pdl) {
    quant_gemv_sum_slices<<<grid_1d(sp.total), 256, 0, stream>>>(sp);
    return;
  }
  const cudaError_t e =
      launch_kernel_ex(quant_gemv_sum_slices, dim3(grid_1d(sp.total)), dim3(256), 0, stream, nullptr, true, sp);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("quant_gemv: sum launch failed: ") + cudaGetErrorString(e)));
}

// Chunks in flight per lane (QuantGemvArgs::inflight; 0: the default; -1 the
// shared-memory weight ring), `one_tile`: 8 warps of one MMA tile (ring only).
template <MatrixFormat F>
void launch_f(cudaStream_t stream, int inflight, bool one_tile, const Params& p, int64_t units, int64_t cps_max,
              bool pdl) {
  if (inflight < 0 && one_tile) return launch_kernel<F, 0, 1>(stream, p, units, cps_max, pdl);
  if constexpr (F == MatrixFormat::kQ4) {
    if (inflight < 0) return launch_kernel<F, 0, 2>(stream, p, units, cps_max, pdl);
    if (inflight == 2) return launch_kernel<F, 2, 2>(stream, p, units, cps_max, pdl);
    if (inflight >= 8) return launch_kernel<F, 8, 2>(stream, p, units, cps_max, pdl);
    return launch_kernel<F, 4, 2>(stream, p, units, cps_max, pdl);
  } else {
    if (inflight < 0) return launch_kernel<F, 0, 2>(stream, p, units, cps_max, pdl);
    if (inflight >= 4) return launch_kernel<F, 4, 2>(stream, p, units, cps_max, pdl);
    return launch_kernel<F, 2, 2>(stream, p, units, cps_max, pdl);
  }
}

// Slice counters of the fused sum: zero when the module loads, and the last block of
// each row block puts its counter back to zero. A call takes the next `row_blocks`
// counters of the pool (a ring), so calls running at the same time on different
// streams of one process do not share counters unless 2^20 counters go round while
// one of them runs; calls on one stream (CudaOps, its graphs) never overlap.
constexpr int64_t kCounterPool = int64_t{1} << 20;
__device__ unsigned g_slice_counters[kCounterPool];

unsigned* slice_counters(int64_t row_blocks) {
  static std::mutex mu;
  static int64_t next = 0;
  static std::vector<unsigned*> bases;  // per device
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= bases.size()) bases.resize(static_cast<size_t>(device) + 1, nullptr);
  unsigned*& base = bases[static_cast<size_t>(device)];
  if (base == nullptr && cudaGetSymbolAddress(reinterpret_cast<void**>(&base), g_slice_counters) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the caller falls back to the second kernel
    base = nullptr;
    return nullptr;
  }
  if (next + row_blocks > kCounterPool) next = 0;
  unsigned* p = base + next;
  next += row_blocks;
  return p;
}

constexpr int64_t kMaxClusterSlices = 8;  // the portable cluster size
// QuantGemvArgs::smem_weights = -1: the shared-memory weight ring (run2s7, graph-replayed:
// q4 4096->24576 57.6 -> 40.3 us at m=1, 72.9 -> 56.0 at m=8; fp8 4096->8192 20.3 -> 17.8,
// fp8 4096->24576 69.0 -> 45.3; q4 4096->8192 / 8192->4096 within 2-3%: 19.4 -> 19.8 at m=1,
// 21.4 -> 20.9 at m=8), else the register ring.
constexpr bool kSmemWeightsDefault = true;
// QuantGemvArgs::slice_warps = 0: warps per block of the shared-memory ring path. 8 (one
// 16-row MMA tile per warp, <= 64 registers, 32 warps per SM: twice the warps, each with
// half the serial chain; issue #8, to be measured) or 4 (two tiles per warp, 122
// registers, 16 warps per SM: the earlier default). The same bits either way.
constexpr int kSliceWarpsDefault = 8;

// TF_QUANT_PDL=0 turns programmatic dependent launch off (read once).
inline bool pdl_on_by_default() {
  static const bool on = [] {
    const char* e = std::getenv("TF_QUANT_PDL");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

inline bool aligned_to(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// The q4 kernel with the weights as the MMA's B operand (quant_gemv_bop.cuh, included after this
// file by quant_gemv.cu): the same plan, x tile, workspace and slice sums.
void launch_bop(cudaStream_t stream, int inflight, const Params& p, int64_t units, int64_t cps_max, bool pdl);
// QuantGemvArgs::b_operand = -1: q4 runs the B-operand kernel (false: the slice kernel).
// run2s8 (graph): 1.04-1.18x the slice kernel at m = 1..4 on the model's q4 shapes, 0.97-1.13x at m = 8.
constexpr bool kBOperandDefault = true;

// Floats of workspace one segment needs (0 when its plan has one slice).
inline int64_t segment_ws_floats(int64_t m, int64_t n, int64_t k, int sms, int blocks_per_sm) {
  const QuantGemvPlan plan = quant_gemv_plan(n, k, sms, blocks_per_sm);
  return plan.slices == 1 ? 0 : plan.slices * std::min<int64_t>(m, kQuantGemvRows) * n;
}

// `common` already checked by quant_gemv / quant_gemv_many (format, sizes); segments
// with n = 0 are skipped; each segment is checked here. The workspace holds the
// segments' slices one after the other.
inline void run_many(cudaStream_t stream, const QuantGemvArgs& a, const QuantGemvSegment* segs, int count) {
  const int sms = a.sm_count > 0 ? a.sm_count : current_sm_count();
  Params p{};
  p.k = a.k;
  p.chunks = std::max<int64_t>(1, (a.k + kQuantChunk - 1) / kQuantChunk);
  p.accumulate = a.accumulate;
  p.xvec = aligned_to(a.x, 16) && a.ldx % 4 == 0;
  QuantGemvPlan plans[kQuantGemvMaxSegments];
  int64_t units = 0, cps_max = 1, row_blocks = 0;
  bool any_slices = false;
  for (int i = 0; i < count; ++i) {
    const QuantGemvSegment& s = segs[i];
    if (s.n < 0 || s.ldo < s.n || (s.n > 0 && (s.out == nullptr || s.codes == nullptr || s.scales == nullptr)))
      throw StatusError(invalid_argument("quant_gemv: segment " + std::to_string(i) + " has bad sizes or pointers (n=" +
                                         std::to_string(s.n) + " ldo=" + std::to_string(s.ldo) + ")"));
    if (s.n == 0) continue;
    if (a.format == MatrixFormat::kQ4 && !aligned_to(s.codes, 8))
      throw StatusError(invalid_argument("quant_gemv: q4 codes of segment " + std::to_string(i) +
                                         " must be 8-byte aligned"));
    const QuantGemvPlan plan = quant_gemv_plan(s.n, a.k, sms, a.blocks_per_sm);
    if (plan.slices > 65535 || plan.row_blocks > 0x7fffffff)
      throw StatusError(invalid_argument("quant_gemv: n=" + std::to_string(s.n) + " k=" + std::to_string(a.k) +
                                         " needs too many blocks"));
    Seg& sg = p.seg[p.count];
    plans[p.count] = plan;
    sg.codes = static_cast<const uint8_t*>(s.codes);
    sg.scales = s.scales;
    sg.n = s.n;
    sg.row_blocks = plan.row_blocks;
    sg.slices = plan.slices;
    sg.cps = plan.chunks_per_slice;
    sg.unit0 = units;
    sg.wvec = aligned_to(s.codes, 16) && a.k % 16 == 0;
    units += plan.row_blocks * plan.slices;
    cps_max = std::max(cps_max, plan.chunks_per_slice);
    row_blocks += plan.row_blocks;
    any_slices = any_slices || plan.slices > 1;
    ++p.count;
  }
  if (p.count == 0) return;
  if (units > 0x7fffffff)
    throw StatusError(invalid_argument("quant_gemv: " + std::to_string(units) + " blocks are too many"));
  // Cluster sum: every segment with the same slice count 2..8 (QuantGemvArgs::cluster_sum).
  bool same_slices = true;
  for (int j = 1; j < p.count; ++j) same_slices = same_slices && plans[j].slices == plans[0].slices;
  p.cluster = a.cluster_sum > 0 && !a.fused_sum && same_slices && plans[0].slices >= 2 &&
              plans[0].slices <= kMaxClusterSlices;
  if (any_slices && !p.cluster && a.workspace == nullptr)
    throw StatusError(invalid_argument("quant_gemv: these shapes need a workspace (quant_gemv_workspace_bytes)"));
  unsigned* counters = any_slices && a.fused_sum && row_blocks <= kCounterPool ? slice_counters(row_blocks) : nullptr;
  for (int64_t r0 = 0; r0 < a.m; r0 += kQuantGemvRows) {
    p.m = std::min<int64_t>(kQuantGemvRows, a.m - r0);
    p.x = a.x + r0 * a.ldx;
    p.ldx = a.ldx;
    SumParams sp{};
    sp.m = p.m;
    sp.accumulate = a.accumulate;
    float* ws = a.workspace;
    int64_t rb_at = 0;
    for (int j = 0, i = 0; i < count; ++i) {
      if (segs[i].n == 0) continue;
      Seg& sg = p.seg[j];
      sg.out = segs[i].out + r0 * segs[i].ldo;
      sg.ldo = segs[i].ldo;
      sg.ws = plans[j].slices > 1 ? ws : nullptr;
      sg.counters = counters != nullptr && plans[j].slices > 1 ? counters + rb_at : nullptr;
      rb_at += plans[j].row_blocks;
      if (plans[j].slices > 1 && !p.cluster) {
        ws += plans[j].slices * p.m * sg.n;
        if (counters == nullptr) {
          SumSeg& ss = sp.seg[sp.count++];
          ss.out = sg.out;
          ss.ldo = sg.ldo;
          ss.ws = sg.ws;
          ss.n = sg.n;
          ss.slices = plans[j].slices;
          ss.e0 = sp.total;
          sp.total += p.m * sg.n;
        }
      }
      ++j;
    }
    const bool pdl = a.slice_pdl < 0 ? pdl_on_by_default() : a.slice_pdl > 0;
    // The shared-memory weight ring: q4 codes 16-byte aligned (whole 16-byte pieces).
    // fp8 also needs K a multiple of 16 (sg.wvec: pieces never straddle a row end).
    bool smem_ok = a.smem_weights < 0 ? kSmemWeightsDefault : a.smem_weights > 0;
    for (int j = 0; j < p.count; ++j)
      smem_ok = smem_ok && aligned_to(p.seg[j].codes, 16) && (a.format == MatrixFormat::kQ4 || p.seg[j].wvec);
    const int inflight = smem_ok ? -1 : std::max(a.inflight, 0);
    const bool one_tile = (a.slice_warps > 0 ? a.slice_warps : kSliceWarpsDefault) == 8;
    const bool bop = a.format == MatrixFormat::kQ4 && (a.b_operand < 0 ? kBOperandDefault : a.b_operand > 0);
    if (bop) {
      launch_bop(stream, a.inflight, p, units, cps_max, pdl);
    } else if (a.format == MatrixFormat::kQ4) {
      launch_f<MatrixFormat::kQ4>(stream, inflight, one_tile, p, units, cps_max, pdl);
    } else {
      launch_f<MatrixFormat::kFp8Block>(stream, inflight, one_tile, p, units, cps_max, pdl);
    }
    if (sp.count > 0) launch_sum(stream, sp, pdl);
  }
  check_launch("quant_gemv");
}

}  // namespace
}  // namespace tf::cuda::legacy_gemv
