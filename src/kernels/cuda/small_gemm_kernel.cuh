// Device side of small_gemm (small_gemm.cu holds the plan and the launches):
// the kernel that streams the weights once per call for m <= 64 rows.
//
// Arithmetic (the same for every plan and row count, so a row's bits never depend
// on the batch): K is cut into quads of 4 elements, and the quads into S = k_splits
// contiguous slices of slice_quads quads (S from the shape only: n, k, heads). In
// each slice, lane l of the warp that owns output (r, c) sums the slice's quads
// l, l+32, l+64, ... (counted from the slice start) in ascending order, the 4
// products of a quad in order, one FMA each (fused multiply-add, f32); past K the
// operands are zero. The 32 lane sums are combined by the xor butterfly of
// warp_reduce (commutative adds: every lane ends with the same bits) into the
// slice's partial p_s, and the output is ((p_0 + p_1) + p_2) + ... in slice order.
// S = 1 is a plain per-lane chain over all of K.
//
// Speed: the weight matrix is the traffic (decode is HBM-bound up to ~16 rows,
// f32-FMA-bound above). A warp owns NC adjacent columns and MR rows (a bucket of
// m). Per step each lane issues up to 16 weight loads (bf16: 8 bytes, one quad),
// U quads of each of its NC columns, before any FMA (~128 bytes per lane in
// flight), and prefetches quads further on into L2; then it multiplies each
// weight quad by its rows' x quads (16-byte loads, coalesced across lanes,
// L1-resident). Up to 8 rows sit in one warp's registers, so every weight byte
// is loaded once; above 8 rows a block holds ceil(m/8) row-warps over the same
// columns, whose weight loads meet in L1 (DRAM still sees each byte once). NC
// trades x reuse (L1 traffic per weight byte is 2*MR/NC) against warps in flight
// (n/NC); small_gemm_plan picks it, cuda_ops_bench sweeps it.
//
// Narrow N with long K (decode's low-rank and gate projections: N = 24..288,
// K = 4096..16384) had a few dozen warps each streaming a whole column: S > 1
// spreads the slices of a column over S warps of a block (up to 8 rows; the
// partials meet in shared memory and one pass sums them in slice order), or, above
// 8 rows, one warp walks the slices in order and folds p_s into its running sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda::small_gemm_detail {

constexpr int kWarpsPerBlock = 8;
constexpr int kMaxRowsPerWarp = 8;

struct KernelArgs {
  float* out;
  int64_t ldo, o_hs;
  const float* x;
  int64_t ldx, x_hs;
  const void* w;
  int64_t w_hs;
  int64_t m, n, k;
  int row_warps, col_warps;
  // k_splits slices of slice_quads quads; slice_warps warps of a block take the
  // slices of one column group (1: each warp walks all slices itself).
  int k_splits, slice_warps;
  int64_t slice_quads;
  bool accumulate;
};

// Raw bits of one weight quad: 8 bytes of bf16, 16 bytes of f32.
template <typename W>
struct QuadBits;
template <>
struct QuadBits<__nv_bfloat16> {
  using Type = uint2;
};
template <>
struct QuadBits<float> {
  using Type = uint4;
};

// Quad at p, elements at or past `valid` read as +0 (kVec: all 4 valid and aligned).
template <bool kVec>
__device__ __forceinline__ uint2 load_quad(const __nv_bfloat16* p, int64_t valid) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const uint2*>(p));
  } else {
    uint2 r = make_uint2(0u, 0u);
    if (valid > 0) r.x = __bfloat16_as_ushort(p[0]);
    if (valid > 1) r.x |= static_cast<unsigned>(__bfloat16_as_ushort(p[1])) << 16;
    if (valid > 2) r.y = __bfloat16_as_ushort(p[2]);
    if (valid > 3) r.y |= static_cast<unsigned>(__bfloat16_as_ushort(p[3])) << 16;
    return r;
  }
}

template <bool kVec>
__device__ __forceinline__ uint4 load_quad(const float* p, int64_t valid) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    return make_uint4(valid > 0 ? __float_as_uint(p[0]) : 0u, valid > 1 ? __float_as_uint(p[1]) : 0u,
                      valid > 2 ? __float_as_uint(p[2]) : 0u, valid > 3 ? __float_as_uint(p[3]) : 0u);
  }
}

// bf16 -> f32 is exact: the bf16 bits become the high half of the f32.
__device__ __forceinline__ float4 quad_to_f32(uint2 r) {
  return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u),
                     __uint_as_float(r.y << 16), __uint_as_float(r.y & 0xffff0000u));
}
__device__ __forceinline__ float4 quad_to_f32(uint4 r) {
  return make_float4(__uint_as_float(r.x), __uint_as_float(r.y), __uint_as_float(r.z), __uint_as_float(r.w));
}

template <bool kVec>
__device__ __forceinline__ float4 load_x(const float* p, int64_t valid) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const float4*>(p));
  } else {
    return make_float4(valid > 0 ? p[0] : 0.0f, valid > 1 ? p[1] : 0.0f, valid > 2 ? p[2] : 0.0f,
                       valid > 3 ? p[3] : 0.0f);
  }
}

// Quad q of each of the NC columns times quad q of each of the rows' x:
// acc[r][c] += the 4 products in order, one rounding each (FMA). Rows past
// `rows` repeat the last real row (sums dropped later): branch-free, so the x
// loads of all rows can be issued together.
// ok false (a lane past its slice's last quad): the sums are left as they are.
template <bool kVec, int MR, int NC, typename Bits>
__device__ __forceinline__ void mac_quad(float (&acc)[MR][NC], const Bits (&raw)[NC], const float* x,
                                         int64_t ldx, int rows, int64_t q, int64_t k, bool ok = true) {
  float4 wf[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) wf[c] = quad_to_f32(raw[c]);
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const int64_t xr = r < rows ? r : rows - 1;
    const float4 xv = load_x<kVec>(x + xr * ldx + q * 4, k - q * 4);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      float s = acc[r][c];
      s = __fmaf_rn(wf[c].x, xv.x, s);
      s = __fmaf_rn(wf[c].y, xv.y, s);
      s = __fmaf_rn(wf[c].z, xv.z, s);
      s = __fmaf_rn(wf[c].w, xv.w, s);
      acc[r][c] = ok ? s : acc[r][c];
    }
  }
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Quads per column per step: NC * U loads in flight per lane (bf16 16 x 8 B, f32
// 8 x 16 B) with 1-2 rows; with more rows each quad feeds more FMAs and registers
// go to accumulators and x: half that with 4 rows, one quad per column with 8
// (the L2 prefetch keeps DRAM busy; register-capped variants spilled otherwise).
template <typename W, int MR, int NC>
constexpr int quads_per_step() {
  constexpr int loads = (sizeof(W) == 2 ? 16 : 8) / (MR >= 4 ? 2 : 1);
  // 8 rows over 1-2 columns (narrow-N decode at 5-8 rows): 2 quads per step (f32
  // with 2 columns: 1), else a slice of a few quads per lane waits one latency per
  // quad; 4 spilled.
  if constexpr (MR >= 8) return NC == 1 || (NC == 2 && sizeof(W) == 2) ? 2 : 1;
  return loads / NC < 1 ? 1 : loads / NC;
}

// Lane sums of one slice, quads [qs, qe) of the warp's NC columns (column c at
// w + c * k; columns past last_col re-read it): full steps of U quads per column
// (all loads issued before the math, quads kAhead further prefetched into L2),
// then steps of U / 4 whose loads are clamped to qe - 1 and whose FMAs past qe
// are dropped. Loads are unconditional: a guarded load would be sunk next to its use
// by the compiler, leaving one load in flight.
template <typename W, bool kVec, int MR, int NC>
__device__ __forceinline__ void slice_sums(float (&acc)[MR][NC], const W* w, int last_col, const float* x,
                                           int64_t ldx, int rows, int64_t k, int64_t qs, int64_t qe, int lane) {
  constexpr int U = quads_per_step<W, MR, NC>();
  // L2 prefetch distance in quads per lane: at least 8 steps of one quad, so that
  // with few quads per step the prefetch still runs a DRAM latency ahead.
  constexpr int kAhead = U > 8 ? U : 8;
  using Bits = typename QuadBits<W>::Type;
  int64_t q0 = qs + lane;
  for (; q0 + 32 * (U - 1) < qe; q0 += 32 * U) {
    Bits raw[U][NC];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int64_t q = q0 + 32 * u;
        raw[u][c] =
            load_quad<kVec>(w + static_cast<int64_t>(c < last_col ? c : last_col) * k + q * 4, k - q * 4);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t q = q0 + 32 * (kAhead + u);
      if (q < qe) {
#pragma unroll
        for (int c = 0; c < NC; ++c)
          prefetch_l2(w + static_cast<int64_t>(c < last_col ? c : last_col) * k + q * 4);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mac_quad<kVec, MR, NC>(acc, raw[u], x, ldx, rows, q0 + 32 * u, k);
  }
  // The rest (< U quads per lane) in steps of T: fewer registers than a step of U.
  constexpr int T = U >= 4 ? U / 4 : 1;
  for (; q0 < qe; q0 += 32 * T) {
    Bits raw[T][NC];
#pragma unroll
    for (int u = 0; u < T; ++u)
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int64_t q = q0 + 32 * u < qe ? q0 + 32 * u : qe - 1;
        raw[u][c] =
            load_quad<kVec>(w + static_cast<int64_t>(c < last_col ? c : last_col) * k + q * 4, k - q * 4);
      }
#pragma unroll
    for (int u = 0; u < T; ++u) {
      const int64_t q = q0 + 32 * u;
      mac_quad<kVec, MR, NC>(acc, raw[u], x, ldx, rows, q < qe ? q : qe - 1, k, q < qe);
    }
  }
}

// One warp's (rows, columns) group: warp w of the block is row-warp
// w % row_warps, slice-warp (w / row_warps) % slice_warps, of column group
// w / (row_warps * slice_warps); rows [row0, row0 + MR) ∩ [0, m) times columns
// [col0, col0 + NC) ∩ [0, n) of column block `bx` of head `head`. See the top of
// the file for the per-output arithmetic. `part` is the block's shared memory of
// kWarpsPerBlock * MR * NC floats.
template <typename W, bool kVec, int MR, int NC>
__device__ __forceinline__ void gemm_block(const KernelArgs& a, int64_t bx, int64_t head, float* part) {
  constexpr int kOut = MR * NC, kSlots = (kOut + 31) / 32;
  // Slice partials when slice_warps > 1: [k_splits][col_warps][kOut] (k_splits *
  // col_warps == kWarpsPerBlock then).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sw = (warp / a.row_warps) % a.slice_warps, cw = warp / (a.row_warps * a.slice_warps);
  const int64_t row0 = static_cast<int64_t>(warp % a.row_warps) * MR;
  const int64_t col0 = (bx * a.col_warps + cw) * NC;
  const bool shared_slices = a.slice_warps > 1;
  // A whole warp leaves (no shuffle is skipped half-way), except where the block
  // meets again at the barrier below.
  const bool active = row0 < a.m && col0 < a.n;
  if (!active && !shared_slices) return;
  const int rows = a.m - row0 < MR ? static_cast<int>(a.m - row0) : MR;
  // Columns past n re-read the last real column (valid memory); their sums are dropped.
  const int last_col = a.n - col0 - 1 < NC - 1 ? static_cast<int>(a.n - col0 - 1) : NC - 1;
  const int64_t k = a.k, nq = (k + 3) / 4;
  const float* x = a.x + head * a.x_hs + row0 * a.ldx;
  const W* w = static_cast<const W*>(a.w) + head * a.w_hs + col0 * k;

  // Output i = r*NC + c of a slice's partial (and of the total) is held by lane
  // i % 32 in slot i / 32, so the stores of a warp go out together.
  float total[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) total[s] = 0.0f;
  if (active) {
    for (int sl = sw; sl < a.k_splits; sl += a.slice_warps) {
      const int64_t qs = sl * a.slice_quads < nq ? sl * a.slice_quads : nq;
      const int64_t qe = qs + a.slice_quads < nq ? qs + a.slice_quads : nq;
      float acc[MR][NC];
#pragma unroll
      for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
      slice_sums<W, kVec, MR, NC>(acc, w, last_col, x, a.ldx, rows, k, qs, qe, lane);
      float mine[kSlots];
#pragma unroll
      for (int s = 0; s < kSlots; ++s) mine[s] = 0.0f;
#pragma unroll
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
#pragma unroll
          for (int c = 0; c < NC; ++c) {
            const float v = warp_reduce(acc[r][c], SumOp{});
            if (((r * NC + c) & 31) == lane) mine[(r * NC + c) >> 5] = v;
          }
        }
      }
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        if (shared_slices) {
          const int i = s * 32 + lane;
          if (i < kOut) part[(sl * a.col_warps + cw) * kOut + i] = mine[s];
        } else {
          total[s] = sl == 0 ? mine[s] : total[s] + mine[s];
        }
      }
    }
  }
  if (shared_slices) {
    __syncthreads();
    // Slice-warp sw of each column group sums outputs sw*32 + lane, (sw + slice_warps)*32 + lane, ...
    if (!active) return;
    for (int i = sw * 32 + lane; i < kOut; i += 32 * a.slice_warps) {
      const int r = i / NC, c = i % NC;
      if (r >= rows || c > last_col) continue;
      float v = part[cw * kOut + i];
      for (int sl = 1; sl < a.k_splits; ++sl) v += part[(sl * a.col_warps + cw) * kOut + i];
      float* o = a.out + head * a.o_hs + (row0 + r) * a.ldo + col0 + c;
      *o = a.accumulate ? *o + v : v;
    }
    return;
  }
  float* out = a.out + head * a.o_hs + row0 * a.ldo + col0;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int i = s * 32 + lane, r = i / NC, c = i % NC;
    if (i < kOut && r < rows && c <= last_col) {
      float* o = out + r * a.ldo + c;
      *o = a.accumulate ? *o + total[s] : total[s];
    }
  }
}

// At least two blocks per SM (<= 128 registers): one block's math covers the
// other's loads (a block's row-warps wait on the same weight lines together), and
// ptxas does not spend registers hoisting x loads at the cost of warps in flight.
// 8x8 keeps one block: its 64 accumulators need more registers.
template <typename W, bool kVec, int MR, int NC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, MR == 8 && NC == 8 ? 1 : 2)
    small_gemm_kernel(const KernelArgs a) {
  __shared__ float part[kWarpsPerBlock * MR * NC];
  gemm_block<W, kVec, MR, NC>(a, blockIdx.x, blockIdx.y, part);
}

// Several matrices against one x in one launch (small_gemm_many): matrix i owns
// column blocks [first_block[i], first_block[i + 1]) of the grid and runs exactly the
// blocks small_gemm would launch for it alone (its own K slices and warp layout; the
// block size, a function of m only, is common). __grid_constant__ lets the kernel
// index its parameters (no per-thread copy of the segment table).
constexpr int kMaxMatrices = 8;
struct ManyArgs {
  KernelArgs mat[kMaxMatrices];
  int64_t first_block[kMaxMatrices + 1];
  int count;
};

template <typename W, int MR, int NC>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, MR == 8 && NC == 8 ? 1 : 2)
    small_gemm_many_kernel(const __grid_constant__ ManyArgs a) {
  __shared__ float part[kWarpsPerBlock * MR * NC];
  const int64_t bx = blockIdx.x;
  int sel = 0;
#pragma unroll
  for (int i = 1; i < kMaxMatrices; ++i)
    if (i < a.count && bx >= a.first_block[i]) sel = i;
  gemm_block<W, true, MR, NC>(a.mat[sel], bx - a.first_block[sel], 0, part);
}

}  // namespace tf::cuda::small_gemm_detail
