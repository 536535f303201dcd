// MLA sparse decode (cuda_mla_decode.cu): the accumulator steps the tensor-core split kernels (TF32
// and BF16: the same fragment layouts) share. Included by cuda_mla_decode.cu's headers only.
#pragma once

#include <cstdint>

#include "kernels/cuda/mla_decode_layout.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxMmaTiles = kMaxWidth / 128;  // accumulator tiles per warp

// Steps the tensor-core kernels (TF32 and BF16: the same fragment layouts) share.
// A warp's score partials c[mt] (tokens mt*16 + g (+8), heads 2tq, 2tq + 1) into
// sp [kWarps][kGroup][kTile].
__device__ __forceinline__ void store_score_partials(float* sp, int warp, int g, int tq,
                                                     const float (&c)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    float* s0 = sp + (warp * kGroup + 2 * tq) * kTile + mt * 16 + g;
    s0[0] = c[mt][0];
    s0[kTile] = c[mt][1];
    s0[8] = c[mt][2];
    s0[kTile + 8] = c[mt][3];
  }
}

// The accumulators (columns = heads 2tq, 2tq + 1) rescaled to the heads' new running max.
__device__ __forceinline__ void rescale_accumulators(float (&acc)[kMaxMmaTiles][4], const float* alpha,
                                                     int tq) {
  const float a0 = alpha[2 * tq], a1 = alpha[2 * tq + 1];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) {
    acc[i][0] *= a0;
    acc[i][1] *= a1;
    acc[i][2] *= a0;
    acc[i][3] *= a1;
  }
}

// The chunk's unnormalised output (the warp's mtiles 16-channel tiles from mbase, heads of
// the group below nh) at part_o[part + head], and each head's running max and sum.
__device__ __forceinline__ void store_chunk_partials(const Workspace& ws, int64_t part, int r, int mbase,
                                                     int mtiles, int nh, const float (&acc)[kMaxMmaTiles][4],
                                                     float m_run, float l_run) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) {
    if (i >= mtiles) break;
    const int ch = mbase + i * 16 + g;
    if (2 * tq < nh) {
      ws.part_o[(part + 2 * tq) * r + ch] = acc[i][0];
      ws.part_o[(part + 2 * tq) * r + ch + 8] = acc[i][2];
    }
    if (2 * tq + 1 < nh) {
      ws.part_o[(part + 2 * tq + 1) * r + ch] = acc[i][1];
      ws.part_o[(part + 2 * tq + 1) * r + ch + 8] = acc[i][3];
    }
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
}

}  // namespace
}  // namespace tf::cuda
