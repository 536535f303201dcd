// The per-row kernels around the EXL3 expert products, shared by the grouped MoE body
// (exl3_moe.cu: products as k-split partials, activations as MMA fragments) and the
// prefill path (exl3_moe_prefill.cu: products from cuBLAS on hi/lo row pairs,
// activations as interleaved hi/lo fp16 rows). Both give a row the same arithmetic
// around its products: x * suh, FWHT, the products, FWHT, * svh (+ bias), SwiGLU.
//
// A product source (Src) gives row r's f32 product at column c before the output
// rotation; an activation sink (Sink) stores row r's rotated input value at column c.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_moe_flat.cuh"
#include "kernels/cuda/moe_grouping.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda::exl3 {

// The grouped GEMV's partials [kMoeSplits][prows][n], summed in split order.
struct SplitPartials {
  const float* p;
  int64_t prows;
  __device__ __forceinline__ float sum(int row, int64_t n, int64_t c) const {
    float v = 0.0f;
#pragma unroll
    for (int s = 0; s < kMoeSplits; ++s) v = __fadd_rn(v, p[(s * prows + row) * n + c]);
    return v;
  }
};

// The wide prefill kernel's products with the splits already summed, [rows][n]
// (exl3_moe_wide.cuh): the value SplitPartials::sum gives for the same row.
struct SummedProducts {
  const float* p;
  __device__ __forceinline__ float sum(int row, int64_t n, int64_t c) const { return p[row * n + c]; }
};

// cuBLAS products of interleaved hi/lo rows: rows 2(r - row0) (x's fp16 hi part) and
// 2(r - row0) + 1 (its lo part) of p [.., n], summed hi + lo.
struct HiLoProducts {
  const float* p;
  int row0;
  __device__ __forceinline__ float sum(int row, int64_t n, int64_t c) const {
    const float* q = p + 2 * static_cast<int64_t>(row - row0) * n + c;
    return __fadd_rn(q[0], q[n]);
  }
};

// The grouped GEMV's activation fragments (store_fragment_value), k_pad inputs per row.
struct FragmentSink {
  uint4* base;
  int64_t k_pad;
  __device__ __forceinline__ void store(int row, int c, float v) const {
    store_fragment_value(base + static_cast<int64_t>(row) * (k_pad / 16) * 4, c, v);
  }
};

// The wide GEMV's fragments with x in fp16 (exl3_moe_wide.cuh WideX<true>): the hi halves of
// store_fragment_value's layout alone, a uint2 per lane quad and k-tile.
struct HalfFragmentSink {
  uint2* base;
  int64_t k_pad;
  __device__ __forceinline__ void store(int row, int c, float v) const {
    store_fragment_hi(base + static_cast<int64_t>(row) * (k_pad / 16) * 4, c, v);
  }
};

// Interleaved fp16 rows for cuBLAS: row 2(r - row0) = hi = fp16(v), row 2(r - row0) + 1 =
// lo = fp16(v - hi) (the split of store_fragment_value), k_pad values each.
struct HiLoRowSink {
  __half* base;
  int64_t k_pad;
  int row0;
  __device__ __forceinline__ void store(int row, int c, float v) const {
    const __half hi = __float2half_rn(v);
    const __half lo = __float2half_rn(__fsub_rn(v, __half2float(hi)));
    __half* q = base + 2 * static_cast<int64_t>(row - row0) * k_pad + c;
    q[0] = hi;
    q[k_pad] = lo;
  }
};

// Row `row`, column c of a projection: FWHT of the products, * svh (+ bias).
template <typename Src>
__device__ __forceinline__ float finish(const Src& src, int64_t n, int row, int64_t c,
                                        const __half* __restrict__ svh, const __half* __restrict__ bias,
                                        float* smem) {
  float v = src.sum(row, n, c);
  v = block_fwht128(v, smem);
  v = __fmul_rn(v, __half2float(svh[c]));
  return bias ? __fadd_rn(v, __half2float(bias[c])) : v;
}

// grid (k_pad/128, rows, 2), 128 threads: row r = row0 + blockIdx.y of each projection
// (gate, up) gets FWHT(x[token] * suh_proj[expert]).
template <typename Sink>
__global__ void __launch_bounds__(128)
    rotate_rows_kernel(Sink gate, Sink up, const float* __restrict__ x, int64_t h, int row0,
                       const ExpertPtrs* __restrict__ table, MoeGroups lay) {
  __shared__ float smem[128];
  pdl_launch_dependents();  // the grouped GEMV may start streaming its weights
  const int row = row0 + static_cast<int>(blockIdx.y);
  if (row >= *lay.num_rows) return;  // block-uniform
  const int proj = blockIdx.z;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const int t = lay.row_token[row], e = lay.row_expert[row];
  const __half* suh = table[e].suh[proj];
  const float v = c < h ? __fmul_rn(x[static_cast<int64_t>(t) * h + c], __half2float(suh[c])) : 0.0f;
  const float r = block_fwht128(v, smem);
  (proj == kProjGate ? gate : up).store(row, static_cast<int>(c), r);
}

// grid (i_pad/128, rows), 128 threads, row r = row0 + blockIdx.y: act = swiglu(gate, up)
// (0 beyond `inter`), then down's rotated input FWHT(act * suh_down).
template <typename Src, typename Sink>
__global__ void __launch_bounds__(128)
    act_kernel(Sink down_in, Src gate, Src up, int64_t i_pad, int64_t inter, int row0,
               const ExpertPtrs* __restrict__ table, MoeGroups lay, float limit) {
  __shared__ float smem[128];
  pdl_launch_dependents();  // the down GEMV may start streaming its weights
  const int row = row0 + static_cast<int>(blockIdx.y);
  if (row >= *lay.num_rows) return;
  const int e = lay.row_expert[row];
  const ExpertPtrs& p = table[e];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const float g = finish(gate, i_pad, row, c, p.svh[kProjGate], p.bias[kProjGate], smem);
  const float u = finish(up, i_pad, row, c, p.svh[kProjUp], p.bias[kProjUp], smem);
  float a = 0.0f;
  if (c < inter) {
    // As the CPU's swiglu: silu(min(gate, limit)) * clamp(up, -limit, limit).
    const float gc = fminf(g, limit);
    const float uc = fminf(fmaxf(u, -limit), limit);
    a = gc / (1.0f + expf(-gc)) * uc;
  }
  const float v = c < inter ? __fmul_rn(a, __half2float(p.suh[kProjDown][c])) : 0.0f;
  down_in.store(row, static_cast<int>(c), block_fwht128(v, smem));
}

}  // namespace tf::cuda::exl3
