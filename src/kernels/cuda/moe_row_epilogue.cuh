// The grouped MoE GEMVs' last step for one row (cuda_moe.cu's bf16/f32 kernels and
// cuda_moe_fp8.cu's FP8 ones): each of the warp's NR per-lane sums reduced by
// warp_reduce's fixed butterfly, then lane 0 writes the row's NC columns from o:
// kSwiglu: o[c] = silu(min(gate, limit)) * clamp(up, -limit, limit) with gate the sum of
// weight row c and up that of row NC + c (Ops::swiglu's arithmetic); else o[c] = sum c.
// Columns whose weight row is past the matrix (ok[c] false) are not written.
#pragma once

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {

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
