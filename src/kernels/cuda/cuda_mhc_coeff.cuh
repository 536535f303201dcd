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
// no intermediate over- or underflows: |a| and b in [2^-60, 2^60], so that the
// quotient, the reciprocal and the remainder stay normal. Outside it (zeros, whose
// sign the fast path can lose, NaN, inf, negative b) it falls back to `a / b`. It skips the compiler's range check and
// branch on the chain's critical path: the Sinkhorn iterations are a chain of 40 of
// these.
__device__ __forceinline__ float mhc_rcp_refined(float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return fmaf(r, fmaf(-b, r, 1.0f), r);
}
__device__ __forceinline__ bool mhc_div_in_range(float a, float b) {
  const float fa = fabsf(a);
  return b >= 0x1p-60f && b <= 0x1p60f && fa >= 0x1p-60f && fa <= 0x1p60f;
}
__device__ __forceinline__ float mhc_div_by(float a, float b, float r) {
  const float q0 = __fmul_rn(a, r);
  float q = fmaf(r, fmaf(-b, q0, a), q0);
  if (!mhc_div_in_range(a, b)) q = a / b;
  return q;
}
__device__ __forceinline__ float mhc_div(float a, float b) { return mhc_div_by(a, b, mhc_rcp_refined(b)); }
// The fast path alone, without the range check (correct only inside the range:
// timing probes and callers that checked the range themselves).
__device__ __forceinline__ float mhc_div_unchecked(float a, float b, float r) {
  const float q0 = __fmul_rn(a, r);
  return fmaf(r, fmaf(-b, q0, a), q0);
}

// How mhc_coeff_row_fast divides: 0 `a / b`, 1 mhc_div (checked per division), 2 the
// fast path unchecked (probe only: a timing bound, wrong outside the range), 3 (the
// default) the fast path unchecked while recording whether any division left the
// range; the whole chain is then redone with mode 1 (the same bits, off the chain's
// critical path: no branch per division).
template <int kDiv>
__device__ __forceinline__ float mhc_div_mode(float a, float b, bool& bad) {
  if constexpr (kDiv == 0) {
    return a / b;
  } else if constexpr (kDiv == 1) {
    return mhc_div(a, b);
  } else {
    if constexpr (kDiv == 3) bad |= !mhc_div_in_range(a, b);
    return mhc_div_unchecked(a, b, mhc_rcp_refined(b));
  }
}

// The Sinkhorn chain of one entry (lane (i, j) of its group holds c[i][j]): the row
// softmax of the logit c, + eps, one column pass, then iters - 1 row + column passes
// (the CPU reference's order). Every lane of the warp calls it (full-mask shuffles).
template <int M, int kIters, int kDiv>
__device__ __forceinline__ float mhc_sinkhorn_chain(float c, bool own, int i, int j, float hc_eps, int iters,
                                                    bool& bad) {
  constexpr int kGroup = mhc_coeff_group<M>();
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
    c = mhc_div_mode<kDiv>(e, line_sum(e, i * M, 1), bad) + hc_eps;
  }
  auto col_pass = [&]() { c = mhc_div_mode<kDiv>(c, line_sum(c, j, M) + hc_eps, bad); };
  auto row_pass = [&]() { c = mhc_div_mode<kDiv>(c, line_sum(c, i * M, 1) + hc_eps, bad); };
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
  return c;
}

// The Sinkhorn chain of mhc_coeff_row with a shorter critical path and the same bits
// (the CPU reference's arithmetic and order): one lane per entry of the M x M matrix
// (lanes of other groups, or without a row, carry a dummy 1 so that they never leave
// the division's fast range). Per half-iteration: M shuffles of the row (column), the
// sum from the first entry in index order (the reference's 0 + x0 is x0: every entry
// is >= 0), + eps and one division (kDiv: mhc_div_mode). kIters > 0 fixes the
// iteration count at compile time (fully unrolled), else `iters` is read. As the CPU
// reference (and unlike mhc_coeff_row) iters <= 1 still runs the one column pass.
// pre/post as mhc_coeff_row.
template <int M, int kIters = 0, int kDiv = 3>
__device__ __forceinline__ void mhc_coeff_row_fast(int lane, bool row_ok, const float* l,
                                                   const float* __restrict__ b, const float* __restrict__ s,
                                                   float hc_eps, int iters, float* pre, float* post,
                                                   float* comb) {
  constexpr int kMm = M * M;
  const bool own = row_ok && lane < kMm;
  const int i = lane / M, j = lane % M;
  if (row_ok && lane < M) {
    pre[lane] = sigmoidf_(l[lane] * s[0] + b[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoidf_(l[M + lane] * s[1] + b[M + lane]);
  }
  const float c0 = own ? l[2 * M + lane] * s[2] + b[2 * M + lane] : 1.0f;
  bool bad = false;
  float c = mhc_sinkhorn_chain<M, kIters, kDiv>(c0, own, i, j, hc_eps, iters, bad);
  if constexpr (kDiv == 3) {
    if (__any_sync(0xffffffffu, bad)) c = mhc_sinkhorn_chain<M, kIters, 1>(c0, own, i, j, hc_eps, iters, bad);
  }
  if (own) comb[lane] = c;
}

}  // namespace tf::cuda
