// Pieces shared by the mHC pre-step's pass kernels (cuda_mhc_pre.cu: decode rows;
// cuda_mhc_pre_rows.cuh: prefill rows): fn loads, the float4 dot products, and the
// mhc_expand inputs when a pass computes the streams itself. Included by
// cuda_mhc_pre.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

// Four consecutive fn values of a row (index in units of four), f32 or bf16 (exact).
__device__ __forceinline__ float4 load_fn4(const float* fn, int64_t i4) {
  return reinterpret_cast<const float4*>(fn)[i4];
}
__device__ __forceinline__ float4 load_fn4(const __nv_bfloat16* fn, int64_t i4) {
  const uint2 u = reinterpret_cast<const uint2*>(fn)[i4];
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                     __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

__device__ __forceinline__ float dot4(float4 a, float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

__device__ __forceinline__ double sq4(float4 v) {
  return static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
         static_cast<double>(v.w) * v.w;
}

// A row's M streams (row-major [M][d4] at xs) as this thread's float4 columns
// threadIdx.x + t * stride, t < V (zeros past d4): the finish kernels' collapse inputs.
template <int M, int V>
__device__ __forceinline__ void load_row_streams(float4 (&xv)[V][M], const float4* xs, int d4, int stride) {
#pragma unroll
  for (int t = 0; t < V; ++t) {
    const int i = threadIdx.x + t * stride;
#pragma unroll
    for (int j = 0; j < M; ++j)
      xv[t][j] = i < d4 ? xs[static_cast<int64_t>(j) * d4 + i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// The row's collapse by p (mhc_collapse's order: acc = 0, then += p[j] * stream j for j
// = 0..M-1) and its RMS norm (times w where given) into o[0, d4), the columns as
// load_row_streams'. Every thread of the block calls it (a block reduction in scratch).
template <int M, int V>
__device__ __forceinline__ void collapse_norm_row(float4* o, const float4 (&xv)[V][M], const float (&p)[M],
                                                  const float4* w, int d4, int stride, float norm_eps,
                                                  double* scratch) {
  float4 c[V];
  double ss = 0;
#pragma unroll
  for (int t = 0; t < V; ++t) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < M; ++j) {
      acc.x += p[j] * xv[t][j].x;
      acc.y += p[j] * xv[t][j].y;
      acc.z += p[j] * xv[t][j].z;
      acc.w += p[j] * xv[t][j].w;
    }
    c[t] = acc;
    if (threadIdx.x + t * stride < d4) ss += sq4(acc);
  }
  ss = block_reduce(ss, SumOp{}, scratch);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / (4 * d4)) + norm_eps);
#pragma unroll
  for (int t = 0; t < V; ++t) {
    const int i = threadIdx.x + t * stride;
    if (i >= d4) continue;
    float4 y = make_float4(c[t].x * inv, c[t].y * inv, c[t].z * inv, c[t].w * inv);
    if (w) {
      const float4 g = w[i];
      y = make_float4(g.x * y.x, g.y * y.y, g.z * y.z, g.w * y.w);
    }
    o[i] = y;
  }
}

// mhc_expand's inputs when the pass computes the streams itself (mhc_expand_pre).
struct ExpandIn {
  float4* out = nullptr;             // the new streams [rows, M, d4]
  const float4* y = nullptr;         // [rows, d4]
  const float* post = nullptr;       // [rows, M]
  const float* comb = nullptr;       // [rows, M, M]
  const float4* residual = nullptr;  // [rows, M, d4]
  int d4 = 0;
};

// mhc_expand's value of stream m at float4 column kk of a row: the same sum in the same
// order as mhc_expand's kernels (acc = sum over j of comb[j][m] * residual j, then
// post[m] * y + acc), so the same bits.
template <int M>
__device__ __forceinline__ float4 expand4(const ExpandIn& ex, int64_t row, int m, int kk) {
  const float* c = ex.comb + row * M * M;
  const float4* res = ex.residual + row * M * ex.d4 + kk;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const float cj = c[j * M + m];
    const float4 v = res[static_cast<int64_t>(j) * ex.d4];
    acc.x += cj * v.x;
    acc.y += cj * v.y;
    acc.z += cj * v.z;
    acc.w += cj * v.w;
  }
  const float pi = ex.post[row * M + m];
  const float4 yv = ex.y[row * ex.d4 + kk];
  return make_float4(pi * yv.x + acc.x, pi * yv.y + acc.y, pi * yv.z + acc.z, pi * yv.w + acc.w);
}

}  // namespace
}  // namespace tf::cuda
