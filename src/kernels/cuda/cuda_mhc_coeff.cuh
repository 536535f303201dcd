// The mHC coefficients of one row for a compile-time M, computed by a group of
// lanes (one per entry of the M x M matrix), shared by mhc_coefficients' M = 4
// kernel (cuda_mhc.cu) and the fused mhc_pre (cuda_mhc_pre.cu) so that both give
// the same bits from the same logits. Entries of a row or column are gathered by
// shuffles and summed in index order, as the CPU reference sums them.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {

// Lanes per group for M (the power of two >= M*M, at most 32).
template <int M>
constexpr int mhc_coeff_group() {
  constexpr int kMm = M * M;
  return kMm <= 1 ? 1 : kMm <= 2 ? 2 : kMm <= 4 ? 4 : kMm <= 8 ? 8 : kMm <= 16 ? 16 : 32;
}

// Every lane of the warp must call this (full-mask shuffles). `lane` is the lane's
// index in its group; `row_ok` false for groups without a row (their l is not read).
// l: the row's (2+M)M logits; b: base; s: the 3 scales. Writes pre[M], post[M] and
// comb[M*M] of the row.
template <int M>
__device__ __forceinline__ void mhc_coeff_row(int lane, bool row_ok, const float* l,
                                              const float* __restrict__ b, const float* __restrict__ s,
                                              float hc_eps, int iters, float* pre, float* post, float* comb) {
  constexpr int kMm = M * M, kGroup = mhc_coeff_group<M>();
  const bool own = row_ok && lane < kMm;
  const int i = lane / M, j = lane % M;
  const float s0 = s[0], s1 = s[1], s2 = s[2];
  if (row_ok && lane < M) {
    pre[lane] = sigmoidf_(l[lane] * s0 + b[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoidf_(l[M + lane] * s1 + b[M + lane]);
  }
  float c = own ? l[2 * M + lane] * s2 + b[2 * M + lane] : 0.0f;
  // Row i's (column j's) entries, gathered together, summed in index order.
  auto row_sum = [&](float v) {
    float g[M];
#pragma unroll
    for (int jj = 0; jj < M; ++jj) g[jj] = __shfl_sync(0xffffffffu, v, i * M + jj, kGroup);
    float sum = 0;
#pragma unroll
    for (int jj = 0; jj < M; ++jj) sum += g[jj];
    return sum;
  };
  {
    float g[M];
#pragma unroll
    for (int jj = 0; jj < M; ++jj) g[jj] = __shfl_sync(0xffffffffu, c, i * M + jj, kGroup);
    float mx = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < M; ++jj) mx = fmaxf(mx, g[jj]);
    const float e = own ? expf(c - mx) : 0.0f;
    c = e / row_sum(e) + hc_eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) c /= (row_sum(c) + hc_eps);  // rows, then columns (the first pass is columns only)
    float g[M];
#pragma unroll
    for (int ii = 0; ii < M; ++ii) g[ii] = __shfl_sync(0xffffffffu, c, ii * M + j, kGroup);
    float sum = 0;
#pragma unroll
    for (int ii = 0; ii < M; ++ii) sum += g[ii];
    c /= (sum + hc_eps);
  }
  if (own) comb[lane] = c;
}

// a / b with the bits of IEEE division (div.rn, what `a / b` compiles to), sharing the
// reciprocal: r = rcp_refined(b) once, then mhc_div_by(a, b, r). The quotient is the
// fast path of the compiler's own division (the hardware reciprocal refined by one
// Newton step, q = a*r, then one correction by the remainder), correctly rounded when
// no intermediate over- or underflows; outside a safe range of a and b (and for NaN,
// inf, zero b) it falls back to `a / b`. It skips the compiler's range check and
// branch on the chain's critical path: the Sinkhorn iterations are a chain of 40 of
// these.
__device__ __forceinline__ float mhc_rcp_refined(float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return fmaf(r, fmaf(-b, r, 1.0f), r);
}
__device__ __forceinline__ float mhc_div_by(float a, float b, float r) {
  const float q0 = __fmul_rn(a, r);
  float q = fmaf(r, fmaf(-b, q0, a), q0);
  const float fa = fabsf(a);
  const bool safe = b >= 0x1p-100f && b <= 0x1p100f && fa <= 0x1p100f && (fa >= 0x1p-100f || a == 0.0f);
  if (!safe) q = a / b;
  return q;
}
__device__ __forceinline__ float mhc_div(float a, float b) { return mhc_div_by(a, b, mhc_rcp_refined(b)); }

// The Sinkhorn chain of mhc_coeff_row with a shorter critical path and the same bits
// (the CPU reference's arithmetic and order): one lane per entry of the M x M matrix
// (lanes of other groups, or without a row, carry a dummy 1 so that they never take
// the division's slow path). Per half-iteration: M shuffles of the row (column), the
// sum from the first entry in index order (the reference's 0 + x0 is x0: every entry
// is >= 0), + eps and one mhc_div. kIters > 0 fixes the iteration count at compile
// time (fully unrolled), else `iters` is read. As the CPU reference (and unlike
// mhc_coeff_row) iters <= 1 still runs the one column pass. pre/post as mhc_coeff_row.
template <int M, int kIters = 0>
__device__ __forceinline__ void mhc_coeff_row_fast(int lane, bool row_ok, const float* l,
                                                   const float* __restrict__ b, const float* __restrict__ s,
                                                   float hc_eps, int iters, float* pre, float* post,
                                                   float* comb) {
  constexpr int kMm = M * M, kGroup = mhc_coeff_group<M>();
  const bool own = row_ok && lane < kMm;
  const int i = lane / M, j = lane % M;
  if (row_ok && lane < M) {
    pre[lane] = sigmoidf_(l[lane] * s[0] + b[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoidf_(l[M + lane] * s[1] + b[M + lane]);
  }
  float c = own ? l[2 * M + lane] * s[2] + b[2 * M + lane] : 1.0f;
  // The M entries of row i (stride 1) or column j (stride M) summed in index order.
  auto line_sum = [&](float v, int first, int stride) {
    float sum = __shfl_sync(0xffffffffu, v, first, kGroup);
#pragma unroll
    for (int t = 1; t < M; ++t) sum += __shfl_sync(0xffffffffu, v, first + t * stride, kGroup);
    return sum;
  };
  {
    float mx = -INFINITY;
#pragma unroll
    for (int t = 0; t < M; ++t) mx = fmaxf(mx, __shfl_sync(0xffffffffu, c, i * M + t, kGroup));
    const float e = own ? expf(c - mx) : 1.0f;
    c = mhc_div(e, line_sum(e, i * M, 1)) + hc_eps;
  }
  auto col_pass = [&]() { c = mhc_div(c, line_sum(c, j, M) + hc_eps); };
  auto row_pass = [&]() { c = mhc_div(c, line_sum(c, i * M, 1) + hc_eps); };
  col_pass();
  if constexpr (kIters > 0) {
#pragma unroll
    for (int it = 1; it < kIters; ++it) {
      row_pass();
      col_pass();
    }
  } else {
    for (int it = 1; it < iters; ++it) {
      row_pass();
      col_pass();
    }
  }
  if (own) comb[lane] = c;
}

}  // namespace tf::cuda
