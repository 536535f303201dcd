// DSA indexer kernels on the GPU: pooled keys (a per-channel softmax over the k_p
// members of a pool; one thread per (pool, channel)) and relu-weighted pool
// scores (one thread per (query row, pool), the row's q and weights in shared
// memory). Both keep the CPU reference's summation order.
#include <cfloat>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

__global__ void pool_keys_kernel(float* __restrict__ out, const float* __restrict__ keys,
                                 const float* __restrict__ gate, const float* __restrict__ ape, int64_t p, int64_t kp,
                                 int64_t d) {
  const int64_t total = p * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pi = e / d, x = e % d;
    float mx = -INFINITY;
    for (int64_t i = 0; i < kp; ++i) mx = fmaxf(mx, gate[(pi * kp + i) * d + x] + ape[i * d + x]);
    float sum = 0, acc = 0;
    for (int64_t i = 0; i < kp; ++i) {
      const float ex = expf(gate[(pi * kp + i) * d + x] + ape[i * d + x] - mx);
      sum += ex;
      acc += ex * keys[(pi * kp + i) * d + x];
    }
    out[e] = acc / sum;
  }
}

__global__ void scores_kernel(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ pool,
                              const float* __restrict__ w, const int32_t* __restrict__ cand, int64_t p, int64_t h,
                              int64_t d, float scale) {
  extern __shared__ float sq[];  // q[h*d] then weights[h]
  const int64_t ti = blockIdx.x;
  for (int64_t i = threadIdx.x; i < h * d; i += blockDim.x) sq[i] = q[ti * h * d + i];
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sq[h * d + i] = w[ti * h + i];
  __syncthreads();
  const int64_t pi = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (pi >= p) return;
  if (pi >= cand[ti]) {
    out[ti * p + pi] = -FLT_MAX;
    return;
  }
  const float* kv = pool + pi * d;
  float acc = 0;
  for (int64_t hh = 0; hh < h; ++hh) {
    const float* qh = sq + hh * d;
    float s = 0;
    for (int64_t x = 0; x < d; ++x) s += qh[x] * kv[x];
    acc += sq[h * d + hh] * fmaxf(0.0f, s * scale);
  }
  out[ti * p + pi] = acc;
}

}  // namespace

void indexer_pool_keys(CudaContext& ctx, Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) {
  check_dev(ctx, "indexer_pool_keys ape", ape, DType::kF32);
  if (ape.dim() != 2) throw StatusError(invalid_argument("indexer_pool_keys: ape must be [kp, D], got " + ape.describe()));
  const int64_t kp = ape.size(0), d = ape.size(1);
  if (kp * d == 0) return;
  const int64_t p = keys.numel() / (kp * d);
  check_dev(ctx, "indexer_pool_keys keys", keys, DType::kF32, p * kp * d);
  check_dev(ctx, "indexer_pool_keys gate", gate, DType::kF32, p * kp * d);
  check_dev(ctx, "indexer_pool_keys out", out, DType::kF32, p * d);
  if (p == 0) return;
  pool_keys_kernel<<<grid_1d(p * d), 256, 0, ctx.stream>>>(out.data<float>(), keys.data<float>(), gate.data<float>(),
                                                            ape.data<float>(), p, kp, d);
  check_launch("indexer_pool_keys");
}

void indexer_scores(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                    const Tensor& candidates, float scale) {
  check_dev(ctx, "indexer_scores pool_keys", pool_keys, DType::kF32);
  check_dev(ctx, "indexer_scores candidates", candidates, DType::kI32);
  const int64_t t = candidates.numel(), d = pool_keys.size(-1), p = d == 0 ? 0 : pool_keys.numel() / d;
  if (t == 0) return;
  const int64_t h = weights.numel() / t;
  check_dev(ctx, "indexer_scores q", q, DType::kF32, t * h * d);
  check_dev(ctx, "indexer_scores weights", weights, DType::kF32, t * h);
  check_dev(ctx, "indexer_scores out", out, DType::kF32, t * p);
  if (p == 0) return;
  const size_t smem = static_cast<size_t>(h * d + h) * sizeof(float);
  if (smem > 48 * 1024)
    throw StatusError(unimplemented("indexer_scores: " + std::to_string(h) + " heads of width " + std::to_string(d) +
                                    " exceed the kernel's shared memory"));
  if ((p + 127) / 128 > 65535) throw StatusError(unimplemented("indexer_scores: too many pools"));
  dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>((p + 127) / 128));
  scores_kernel<<<grid, 128, smem, ctx.stream>>>(out.data<float>(), q.data<float>(), pool_keys.data<float>(),
                                                 weights.data<float>(), candidates.data<int32_t>(), p, h, d, scale);
  check_launch("indexer_scores");
}

namespace {

// One thread per output entry.
__global__ void token_indices_kernel(int32_t* __restrict__ out, const int32_t* __restrict__ sel, int64_t t, int64_t w,
                                     int64_t s, int64_t first, int64_t kp, bool tail) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < t * w; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / w, c = e % w, visible = first + i + 1, complete = visible / kp;
    int32_t v = -1;
    if (c < s * kp) {
      const int64_t p = sel[i * s + c / kp];
      if (p >= 0 && p < complete) v = static_cast<int32_t>(p * kp + c % kp);
    } else if (tail && c - s * kp < visible % kp) {
      v = static_cast<int32_t>(complete * kp + (c - s * kp));
    }
    out[e] = v;
  }
}

}  // namespace

void indexer_token_indices(CudaContext& ctx, Tensor& indices, const Tensor& pools, int64_t first_position,
                           int pool_size, bool tail) {
  check_dev(ctx, "indexer_token_indices pools", pools, DType::kI32);
  check_dev(ctx, "indexer_token_indices indices", indices, DType::kI32);
  const int64_t t = indices.dim() == 0 ? 0 : indices.size(0), w = t == 0 ? 0 : indices.numel() / t;
  const int64_t s = t == 0 ? 0 : pools.numel() / t, kp = pool_size;
  if (kp < 1 || pools.numel() != t * s || w < s * kp + (tail ? kp - 1 : 0) || first_position < 0)
    throw StatusError(invalid_argument("indexer_token_indices: indices " + indices.describe() + ", pools " +
                                       pools.describe() + ", pool size " + std::to_string(kp)));
  if (t * w == 0) return;
  token_indices_kernel<<<grid_1d(t * w), 256, 0, ctx.stream>>>(indices.data<int32_t>(), pools.data<int32_t>(), t, w,
                                                                s, first_position, kp, tail);
  check_launch("indexer_token_indices");
}

}  // namespace tf::cuda
