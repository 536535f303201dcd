// The mHC pre-step's pass at prefill rows (Ops::mhc_pre / mhc_expand_pre over more than
// exact_rows rows): the decode pass (cuda_mhc_pre.cu) gives every block 128 columns of
// K, so a row's 24 dot products are reduced by shuffles in K / 128 blocks and written
// as K / 128 partials each: at 1,024 rows that is ~63 M warp shuffles and 50 MB of
// partials per site, ~15x the site's memory time. Here a block owns 8 rows and 64
// float4 columns of each of the 4 streams (256 float4 of K):
//  1. its threads compute (mhc_expand, the same bits) or load the rows' streams at
//     those columns into shared memory, writing the new streams when expanding;
//  2. warp w takes fn rows w, w + 8, w + 16 and all 8 rows: each lane accumulates its
//     8 columns in registers (fn read once per 8 rows, x from shared memory), then one
//     reduce-scatter gives lane n the sum of value n (31 shuffles for 24 values); warp
//     w also sums row w's squares (in double, as the norms do).
// Partials per row: K / 1024 of each logit (16 at hidden 4096), summed by the rows
// finish below. Deterministic (fixed order, no atomics) and a row's
// bits do not depend on the other rows; they differ from the decode pass's in the
// summation order (within ~1e-6 relative), as the other ops' prefill paths do past
// exact_rows. Included by cuda_mhc_pre.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_mhc_coeff.cuh"
#include "kernels/cuda/cuda_mhc_pre_common.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda {
namespace {

constexpr int kRowsPassRows = 8;    // rows per block (blockIdx.y), one warp each for the squares
constexpr int kRowsPassCols = 64;   // float4 columns of each stream per block (blockIdx.x)
constexpr int kRowsPassThreads = 256;
constexpr int kRowsPassMinRows = 32;  // below this the decode pass fills the GPU better

// v[n] summed over the warp's lanes, lane n getting the sum of value n (N = 32 values;
// the caller pads with zeros): at each step a lane keeps the half of its values whose
// index has the step's bit equal to its own and adds the partner's copy of that half.
template <int N>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[N], int lane) {
  static_assert(N == 32, "one value per lane");
#pragma unroll
  for (int half = N / 2; half >= 1; half /= 2) {
    const bool upper = (lane & half) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float keep = upper ? v[i + half] : v[i];
      const float send = upper ? v[i] : v[i + half];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, half);
    }
  }
  return v[0];
}

// grid (d4 / kRowsPassCols, ceil(rows / kRowsPassRows)), kRowsPassThreads threads.
// part_dot [rows, 24, np], part_ss [rows, np], np = gridDim.x. kExpand: the streams are
// mhc_expand(ex) (written to ex.out), else x [rows, 4, d4]. fn [24, 4 d4] bf16 (as the
// checkpoint stores it).
template <bool kExpand>
__global__ void __launch_bounds__(kRowsPassThreads)
    mhc_pre_rows_pass_kernel(float* __restrict__ part_dot, double* __restrict__ part_ss,
                             const float4* __restrict__ x, const __nv_bfloat16* __restrict__ fn, int rows, int d4,
                             ExpandIn ex) {
  constexpr int M = 4, kMix = (2 + M) * M, kWarps = kRowsPassThreads / 32;
  constexpr int kPerWarp = kMix / kWarps;  // fn rows per warp
  constexpr int kCols = M * kRowsPassCols;  // float4 of K per block
  static_assert(kMix % kWarps == 0 && kPerWarp * kRowsPassRows <= 32, "one value per lane");
  static_assert(kRowsPassThreads == kCols, "one float4 of K per thread and row");
  __shared__ float4 xs[kRowsPassRows][kCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p = blockIdx.x, np = gridDim.x;
  const int r0 = blockIdx.y * kRowsPassRows;
  const int nr = min(kRowsPassRows, rows - r0);
  const int64_t k4 = int64_t{M} * d4;
  pdl_wait();
  pdl_launch_dependents();
  // 1. The streams at this block's columns: thread t is stream t / 64, column t % 64.
  {
    const int m = threadIdx.x / kRowsPassCols, kk = p * kRowsPassCols + threadIdx.x % kRowsPassCols;
    const int64_t q = int64_t{m} * d4 + kk;
#pragma unroll
    for (int r = 0; r < kRowsPassRows; ++r) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < nr) {
        const int64_t row = r0 + r;
        if constexpr (kExpand) {
          v = expand4<M>(ex, row, m, kk);
          ex.out[row * k4 + q] = v;
        } else {
          v = x[row * k4 + q];
        }
      }
      xs[r][threadIdx.x] = v;
    }
  }
  __syncthreads();
  // 2. Lane l: columns l + 32 i of the block (stream i / 2), fn rows warp + 8 t.
  float acc[32];
#pragma unroll
  for (int n = 0; n < 32; ++n) acc[n] = 0.0f;
  double ss = 0;
#pragma unroll 2
  for (int i = 0; i < kCols / 32; ++i) {
    const int c = lane + 32 * i;
    const int m = c / kRowsPassCols, kk = p * kRowsPassCols + c % kRowsPassCols;
    float4 f[kPerWarp];
#pragma unroll
    for (int t = 0; t < kPerWarp; ++t) f[t] = load_fn4(fn, (warp + t * kWarps) * k4 + int64_t{m} * d4 + kk);
#pragma unroll
    for (int r = 0; r < kRowsPassRows; ++r) {
      const float4 v = xs[r][c];
      if (r == warp) ss += sq4(v);
#pragma unroll
      for (int t = 0; t < kPerWarp; ++t) {
        float& a = acc[t * kRowsPassRows + r];
        a = fmaf(f[t].x, v.x, a);
        a = fmaf(f[t].y, v.y, a);
        a = fmaf(f[t].z, v.z, a);
        a = fmaf(f[t].w, v.w, a);
      }
    }
  }
  const float sum = warp_reduce_scatter(acc, lane);
  ss = warp_reduce(ss, SumOp{});
  // Lane n = t * 8 + r holds fn row warp + 8 t's dot product with row r0 + r.
  if (lane < kPerWarp * kRowsPassRows) {
    const int t = lane / kRowsPassRows, r = lane % kRowsPassRows;
    if (r < nr) part_dot[(static_cast<int64_t>(r0 + r) * kMix + warp + t * kWarps) * np + p] = sum;
  }
  if (lane == 0 && warp < nr) part_ss[static_cast<int64_t>(r0 + warp) * np + p] = ss;
}

// The finish after the rows pass. The decode finish (cuda_mhc_pre.cu) gives each row two
// blocks of up to 1,024 threads side by side, one of which runs the Sinkhorn chain on a
// single warp: right for one row's latency, but at prefill rows a block slot waits on
// one warp's chain per row. Here one launch holds two kinds of 256-thread blocks:
//  - coefficient blocks first (kFinCoefRows rows each, two per warp, one per 16-lane
//    group: mhc_coeff_row_fast, the same chain as the decode finish);
//  - then one collapse block per row: pre, the collapse and the weighted norm.
// Both sum a row's partials with the same code (row_logit, row_inv), so pre agrees.
constexpr int kFinThreads = 256;
constexpr int kFinCoefRows = 2 * (kFinThreads / 32);

// Logit j of row r: its np partials summed in order (the pass wrote [rows, 24, np]).
// One lane per value: summing each value across a warp instead (a butterfly per
// value) measured slower (run4s26: 152 vs 136 us per 1,024-row site).
__device__ __forceinline__ float row_logit(const float* __restrict__ part_dot, int64_t r, int j, int np) {
  const float* src = part_dot + (r * 24 + j) * np;
  float a = 0;
  for (int p = 0; p < np; ++p) a += src[p];
  return a;
}

// The flat norm's 1 / rms of row r (as rms_norm's kernels: mean in double, then
// 1 / sqrtf in float) from its np partial sums of squares over k values.
__device__ __forceinline__ float row_inv(const double* __restrict__ part_ss, int64_t r, int np, int k,
                                         float norm_eps) {
  const double* src = part_ss + r * np;
  double a = 0;
  for (int p = 0; p < np; ++p) a += src[p];
  return 1.0f / sqrtf(static_cast<float>(a / k) + norm_eps);
}

// grid (ncoef + rows); streams [rows, 4, d4] float4 (d4 <= V * kFinThreads); out
// [rows, d4]; w [d4] or null.
// Three blocks per SM (a V = 4 row's loads spill 24 bytes); V = 8 rows need more registers.
template <int V>
__global__ void __launch_bounds__(kFinThreads, V >= 8 ? 2 : 3)
    mhc_pre_rows_finish_kernel(float* __restrict__ post, float* __restrict__ comb, float4* __restrict__ out,
                               const float* __restrict__ part_dot, const double* __restrict__ part_ss,
                               const float4* __restrict__ streams, const float* __restrict__ base,
                               const float* __restrict__ scale, const float4* __restrict__ w, int rows,
                               int ncoef, int np, int d4, float norm_eps, float hc_eps, int iters) {
  constexpr int M = 4, kMix = (2 + M) * M, kGroup = mhc_coeff_group<M>();
  static_assert(kGroup == 16 && kMix <= 32, "two rows per warp, a logit per lane");
  __shared__ float logits[kFinCoefRows][kMix];
  __shared__ float pre[kFinCoefRows][M];
  __shared__ double scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k = M * 4 * d4;  // the flat width the norm divides by
  pdl_wait();
  if (static_cast<int>(blockIdx.x) < ncoef) {
    // Rows 2 warp and 2 warp + 1 of this block's kFinCoefRows; lane j sums logit j.
    const int64_t r0 = int64_t{blockIdx.x} * kFinCoefRows + 2 * warp;
#pragma unroll
    for (int g = 0; g < 2; ++g) {
      const int64_t r = r0 + g;
      if (r < rows && lane < kMix)
        logits[2 * warp + g][lane] = row_logit(part_dot, r, lane, np) * row_inv(part_ss, r, np, k, norm_eps);
    }
    __syncwarp();
    const int g = lane / kGroup;
    const int64_t r = r0 + g;
    const bool row_ok = r < rows;
    const int64_t rr = row_ok ? r : 0;
    mhc_coeff_row_fast<M>(lane % kGroup, row_ok, logits[2 * warp + g], base, scale, hc_eps, iters,
                          pre[2 * warp + g], post + rr * M, comb + rr * M * M);
    return;
  }
  const int64_t r = blockIdx.x - ncoef;
  const float4* xs = streams + r * M * d4;
  float4 xv[V][M];
  load_row_streams<M, V>(xv, xs, d4, kFinThreads);
  if (warp == 0 && lane < M) {
    const float l = row_logit(part_dot, r, lane, np) * row_inv(part_ss, r, np, k, norm_eps);
    pre[0][lane] = sigmoidf_(l * scale[0] + base[lane]) + hc_eps;
  }
  __syncthreads();
  float p[M];
#pragma unroll
  for (int j = 0; j < M; ++j) p[j] = pre[0][j];
  collapse_norm_row<M, V>(out + r * d4, xv, p, w, d4, kFinThreads, norm_eps, scratch);
}

// Whether a call of `rows` rows over streams of d4 float4 per stream takes the rows pass
// (`enabled`: mhc_pre_rows_pass()). bf16 fn only: an f32 fn past exact_rows takes the
// default sequence (cuda_mhc_pre.cu's takes()).
bool rows_pass_takes(const CudaContext& ctx, int64_t rows, int d4, const Tensor& fn, bool enabled) {
  return enabled && fn.dtype() == DType::kBF16 && rows > ctx.exact_rows && rows >= kRowsPassMinRows &&
         d4 % kRowsPassCols == 0 && d4 <= 8 * kFinThreads;
}

// The rows pass (bf16 fn), launched with PDL as the decode pass; np
// = d4 / kRowsPassCols partials per row.
void launch_rows_pass(CudaContext& ctx, float* part_dot, double* part_ss, const float4* x, const Tensor& fn,
                      int rows, int d4, const ExpandIn& ex, bool pdl) {
  const dim3 grid(static_cast<unsigned>(d4 / kRowsPassCols),
                  static_cast<unsigned>((rows + kRowsPassRows - 1) / kRowsPassRows));
  const auto* f = reinterpret_cast<const __nv_bfloat16*>(fn.raw());  // rows_pass_takes(): bf16
  const cudaError_t e = launch_kernel_ex(ex.out != nullptr ? mhc_pre_rows_pass_kernel<true> : mhc_pre_rows_pass_kernel<false>,
                                         grid, dim3(kRowsPassThreads), 0, ctx.stream, nullptr, pdl, part_dot, part_ss,
                                         x, f, rows, d4, ex);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("mhc_pre (rows pass) launch: ") + cudaGetErrorString(e)));
}

// The rows finish (after launch_rows_pass), launched with PDL when `pdl`.
void launch_rows_finish(CudaContext& ctx, float* post, float* comb, float4* out, const float* part_dot,
                        const double* part_ss, const float4* streams, const float* base, const float* scale,
                        const float4* w, int rows, int d4, float norm_eps, float hc_eps, int iters, bool pdl) {
  const int ncoef = (rows + kFinCoefRows - 1) / kFinCoefRows, np = d4 / kRowsPassCols;
  auto go = [&](auto kernel) {
    return launch_kernel_ex(kernel, dim3(static_cast<unsigned>(ncoef + rows)), dim3(kFinThreads), 0, ctx.stream,
                            nullptr, pdl, post, comb, out, part_dot, part_ss, streams, base, scale, w, rows, ncoef, np,
                            d4, norm_eps, hc_eps, iters);
  };
  const cudaError_t e = d4 <= kFinThreads       ? go(mhc_pre_rows_finish_kernel<1>)
                        : d4 <= 2 * kFinThreads ? go(mhc_pre_rows_finish_kernel<2>)
                        : d4 <= 4 * kFinThreads ? go(mhc_pre_rows_finish_kernel<4>)
                                                : go(mhc_pre_rows_finish_kernel<8>);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("mhc_pre (rows finish) launch: ") + cudaGetErrorString(e)));
}

}  // namespace

}  // namespace tf::cuda
