// Row pieces the grouped MoE GEMVs share (cuda_moe.cu's bf16/f32 kernels and
// cuda_moe_fp8.cu's FP8 ones):
//  - moe_load_row_chunk: C activations of a row from column c0 (kVec: float4 loads,
//    16-byte aligned and inside the row; else element loads, zeros past k);
//  - moe_reduce_store_row: each of the warp's NR per-lane sums reduced by warp_reduce's
//    fixed butterfly, then lane 0 writes the row's NC columns from o: kSwiglu:
//    o[c] = silu(min(gate, limit)) * clamp(up, -limit, limit) with gate the sum of weight
//    row c and up that of row NC + c (Ops::swiglu's arithmetic); else o[c] = sum c.
//    Columns whose weight row is past the matrix (ok[c] false) are not written.
// And two host helpers of their launches: moe_rows_per_pass and moe_round_up.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {

// Rows per pass for a call of `tokens` tokens: the smallest of 1, 2, 4, 8 that holds
// them all (an expert has at most `tokens` rows unless a token names it twice).
inline int moe_rows_per_pass(int64_t tokens) { return tokens <= 1 ? 1 : tokens <= 2 ? 2 : tokens <= 4 ? 4 : 8; }

// n rounded up to a multiple of a (scratch offsets).
inline int64_t moe_round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

template <bool kVec, int C>
__device__ __forceinline__ void moe_load_row_chunk(float (&xv)[C], const float* row, int64_t c0, int64_t k) {
  if constexpr (kVec) {
    static_assert(C % 4 == 0, "float4 loads");
#pragma unroll
    for (int i = 0; i < C; i += 4) {
      const float4 f = *reinterpret_cast<const float4*>(row + c0 + i);
      xv[i] = f.x;
      xv[i + 1] = f.y;
      xv[i + 2] = f.z;
      xv[i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < C; ++i) xv[i] = c0 + i < k ? row[c0 + i] : 0.0f;
  }
}

template <int NC, int NR, bool kSwiglu>
__device__ __forceinline__ void moe_reduce_store_row(float* o, const float (&acc)[NR], const bool (&ok)[NR],
                                                     bool store, float limit) {
  float v[NR];
#pragma unroll
  for (int q = 0; q < NR; ++q) v[q] = warp_reduce(acc[q], SumOp{});
  if (!store || (threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (!ok[c]) continue;
    if constexpr (kSwiglu) {
      const float g = fminf(v[c], limit);
      const float u = fminf(fmaxf(v[NC + c], -limit), limit);
      o[c] = g / (1.0f + expf(-g)) * u;
    } else {
      o[c] = v[c];
    }
  }
}

}  // namespace tf::cuda
