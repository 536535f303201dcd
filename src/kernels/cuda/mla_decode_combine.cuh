// MLA sparse decode, step 3 (cuda_mla_decode.cu): the chunks' partial outputs of a (head, row) combined.
// Included by cuda_mla_decode.cu only.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/mla_decode_layout.cuh"

namespace tf::cuda {
namespace {

// ---- 3. combine ----------------------------------------------------------------

struct CombineArgs {
  float* out;
  Workspace ws;
  int heads, r, chunks;
};

constexpr int kCombineThreads = 256;
constexpr int kCombineMaxChunks = 256;  // pipe_max_chunks()'s limit
constexpr int kCombineUnroll = 8;       // partial loads in flight per thread

// What both combine kernels read for block (head, row): the output row, the chunks' max/sum
// pairs (chunk k at ml[k * heads * 2]) and partial outputs (chunk k at po[k * heads * r]),
// and the chunks the row used (the split's chunking of its n tokens). A row without tokens
// gets zeros here (used = 0).
struct CombineRow {
  float* o;
  const float* ml;
  const float* po;
  int used;
};
__device__ __forceinline__ CombineRow combine_row(const CombineArgs& a) {
  const Workspace& ws = a.ws;
  const int heads = a.heads, r = a.r, chunks = a.chunks, h = blockIdx.x;
  const int64_t b = blockIdx.y;
  CombineRow c{a.out + (b * heads + h) * int64_t(r), ws.part_ml + (b * chunks * heads + h) * 2,
               ws.part_o + (b * chunks * heads + h) * int64_t(r), 0};
  const int n = ws.count[b];
  if (n == 0) {
    for (int x = threadIdx.x; x < r; x += blockDim.x) c.o[x] = 0.0f;
    return c;
  }
  const int tiles = (n + kTile - 1) / kTile, per = (tiles + chunks - 1) / chunks;
  c.used = (tiles + per - 1) / per;
  return c;
}

// Session 48's combine (TF_MLA_DECODE_COMBINE=v1, for A/B runs): 128 threads, each
// chunk's weight recomputed per channel. The same bits as combine_kernel.
__global__ void combine_v1_kernel(CombineArgs a) {
  pdl_wait();
  const CombineRow c = combine_row(a);
  if (c.used == 0) return;
  const int heads = a.heads, r = a.r, used = c.used;
  const float* ml = c.ml;
  const float* po = c.po;
  float* o = c.o;
  float mx = -INFINITY;
  for (int k = 0; k < used; ++k) mx = fmaxf(mx, ml[k * heads * 2]);
  float total = 0.0f;
  for (int k = 0; k < used; ++k) total += ml[k * heads * 2 + 1] * expf(ml[k * heads * 2] - mx);
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < used; ++k) acc += po[int64_t(k) * heads * r + x] * expf(ml[k * heads * 2] - mx);
    o[x] = acc / total;
  }
}

// A block per (head, row). Each chunk's weight exp(m_k - max) is computed once (was once
// per channel), then every thread sums its channels over the chunks with kCombineUnroll
// loads in flight: the same terms added in the same order as before, so the same bits.
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(CombineArgs a) {
  __shared__ float weight[kCombineMaxChunks];
  __shared__ float total_sum;
  pdl_wait();  // the split's partials (a no-op without programmatic dependent launch)
  const CombineRow c = combine_row(a);
  if (c.used == 0) return;  // block-uniform
  const int heads = a.heads, r = a.r, used = c.used;
  const float* ml = c.ml;
  float* o = c.o;
  if (threadIdx.x < 32) {
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < used; k += 32) mx = fmaxf(mx, ml[k * heads * 2]);
    mx = warp_reduce(mx, MaxOp{});
    for (int k = threadIdx.x; k < used; k += 32) weight[k] = expf(ml[k * heads * 2] - mx);
    __syncwarp();
    if (threadIdx.x == 0) {
      float total = 0.0f;  // in chunk order
      for (int k = 0; k < used; ++k) total += ml[k * heads * 2 + 1] * weight[k];
      total_sum = total;
    }
  }
  __syncthreads();
  const float total = total_sum;
  const float* __restrict__ po = c.po;
  const int64_t stride = int64_t(heads) * r;
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float acc = 0.0f;
    int k = 0;
    for (; k + kCombineUnroll <= used; k += kCombineUnroll) {
      float v[kCombineUnroll];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) v[u] = po[(k + u) * stride + x];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) acc += v[u] * weight[k + u];
    }
    for (; k < used; ++k) acc += po[k * stride + x] * weight[k];
    o[x] = acc / total;
  }
}

}  // namespace
}  // namespace tf::cuda
