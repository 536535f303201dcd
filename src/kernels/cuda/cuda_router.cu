// The MoE router on the GPU: one block per token. Sigmoid scores and the biased
// choice scores live in shared memory; group scores (sum of a group's two best)
// are one thread per group; the kept groups and the k experts are picked by
// repeated block arg-max with ties to the lower index, which is what the CPU
// reference's stable sorts pick. Weights are summed in ascending expert order.
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxK = 64;

struct Best {
  float v;
  int i;
};

// Larger value wins; equal values: lower index. Index -1 means "none".
__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  if (a.v > b.v || (a.v == b.v && a.i < b.i)) return a;
  return b;
}

__device__ Best block_argmax(Best b, Best* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = b;
  __syncthreads();
  Best r = scratch[0];
  for (int i = 1; i < nw; ++i) r = better(r, scratch[i]);
  return r;
}

__global__ void route_kernel(float* __restrict__ weights, int32_t* __restrict__ ids, const float* __restrict__ logits,
                             const float* __restrict__ bias, int e, int n_group, int topk_group, int k, bool norm,
                             float scaling) {
  extern __shared__ float sh[];
  float* s = sh;                 // [e]
  float* choice = s + e;         // [e]
  float* gscore = choice + e;    // [n_group]
  unsigned char* taken = reinterpret_cast<unsigned char*>(gscore + n_group);  // [max(e, n_group)]
  __shared__ Best scratch[32];
  __shared__ int chosen[kMaxK];
  const int64_t t = blockIdx.x;
  const float* l = logits + t * e;
  const int per = e / n_group;
  for (int i = threadIdx.x; i < e; i += blockDim.x) {
    s[i] = 1.0f / (1.0f + expf(-l[i]));
    choice[i] = s[i] + bias[i];
  }
  __syncthreads();
  for (int g = threadIdx.x; g < n_group; g += blockDim.x) {
    float b1 = -INFINITY, b2 = -INFINITY;
    for (int i = g * per; i < (g + 1) * per; ++i) {
      if (choice[i] > b1) {
        b2 = b1;
        b1 = choice[i];
      } else if (choice[i] > b2) {
        b2 = choice[i];
      }
    }
    gscore[g] = per >= 2 ? b1 + b2 : b1;
    taken[g] = 0;
  }
  __syncthreads();
  // Keep the topk_group best groups (ties: lower group index).
  for (int it = 0; it < topk_group; ++it) {
    Best b{0.0f, -1};
    for (int g = threadIdx.x; g < n_group; g += blockDim.x)
      if (!taken[g]) b = better(b, Best{gscore[g], g});
    b = block_argmax(b, scratch);
    if (threadIdx.x == 0 && b.i >= 0) taken[b.i] = 1;
    __syncthreads();
  }
  for (int i = threadIdx.x; i < e; i += blockDim.x)
    if (!taken[i / per]) choice[i] = -INFINITY;
  __syncthreads();
  for (int i = threadIdx.x; i < e; i += blockDim.x) taken[i] = 0;
  __syncthreads();
  for (int it = 0; it < k; ++it) {
    Best b{0.0f, -1};
    for (int i = threadIdx.x; i < e; i += blockDim.x)
      if (!taken[i]) b = better(b, Best{choice[i], i});
    b = block_argmax(b, scratch);
    if (threadIdx.x == 0) {
      taken[b.i] = 1;
      chosen[it] = b.i;
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  for (int i = 1; i < k; ++i)  // ascending expert id
    for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) {
      const int tmp = chosen[j];
      chosen[j] = chosen[j - 1];
      chosen[j - 1] = tmp;
    }
  float sum = 0;
  for (int i = 0; i < k; ++i) sum += s[chosen[i]];
  for (int i = 0; i < k; ++i) {
    float wv = s[chosen[i]];
    if (norm) wv /= (sum + 1e-20f);
    weights[t * k + i] = wv * scaling;
    ids[t * k + i] = chosen[i];
  }
}

}  // namespace

void moe_route(CudaContext& ctx, Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group,
               int topk_group, int k, bool norm, float scaling) {
  check_dev(ctx, "moe_route logits", logits, DType::kF32);
  const int64_t e = logits.size(-1), t = e == 0 ? 0 : logits.numel() / e;
  check_dev(ctx, "moe_route bias", bias, DType::kF32, e);
  check_dev(ctx, "moe_route weights", weights, DType::kF32, t * k);
  check_dev(ctx, "moe_route ids", ids, DType::kI32, t * k);
  if (n_group <= 0 || e % n_group != 0 || topk_group > n_group || topk_group < 0 || k < 0 || k > e)
    throw StatusError(invalid_argument("moe_route: bad grouping (n_group " + std::to_string(n_group) +
                                       ", topk_group " + std::to_string(topk_group) + ", k " + std::to_string(k) +
                                       ") for " + std::to_string(e) + " experts"));
  if (k > kMaxK) throw StatusError(unimplemented("moe_route: k above " + std::to_string(kMaxK)));
  if (t == 0 || k == 0) return;
  const size_t smem = static_cast<size_t>(2 * e + n_group) * sizeof(float) + static_cast<size_t>(std::max<int64_t>(e, n_group));
  if (smem > 48 * 1024) throw StatusError(unimplemented("moe_route: too many experts for the kernel"));
  route_kernel<<<static_cast<unsigned>(t), kThreads, smem, ctx.stream>>>(
      weights.data<float>(), ids.data<int32_t>(), logits.data<float>(), bias.data<float>(), static_cast<int>(e),
      n_group, topk_group, k, norm, scaling);
  check_launch("moe_route");
}

}  // namespace tf::cuda
