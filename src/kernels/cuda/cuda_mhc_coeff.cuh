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

}  // namespace tf::cuda
