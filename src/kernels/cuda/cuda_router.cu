// The MoE router on the GPU: one block per token. Sigmoid scores and the biased
// choice scores live in shared memory; group scores (sum of a group's two best)
// are one thread per group; the kept groups and the k experts are picked by
// repeated block arg-max with ties to the lower index, which is what the CPU
// reference's stable sorts pick. Weights are summed in ascending expert order.
// Without group limiting (n_group 1, GLM-5.3's 1/1) and up to 512 experts and
// top-32, route_warp_kernel does the same with one warp per token: each lane
// holds its experts' scores in registers (lane l: experts l, l+32, ...), sorted
// best first once, and the k picks are warp arg-max butterflies over the lanes'
// heads; no shared memory, no block barriers.
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/legacy_small_ops.h"

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

constexpr int kWarpMaxPer = 16;  // experts per lane: up to 512 experts
constexpr int kWarpMaxK = 32;
constexpr int kWarpsPerBlock = 4;

// One warp per token (n_group 1): route_kernel's choice without the group step.
template <int kPer>
__global__ void route_warp_kernel(float* __restrict__ weights, int32_t* __restrict__ ids,
                                  const float* __restrict__ logits, const float* __restrict__ bias, int64_t tokens,
                                  int e, int k, bool norm, float scaling) {
  const int lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
  if (t >= tokens) return;  // whole warp
  const float* l = logits + t * e;
  float s[kPer], choice[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane + 32 * j;
    s[j] = i < e ? 1.0f / (1.0f + expf(-l[i])) : 0.0f;
    choice[j] = i < e ? s[j] + bias[i] : 0.0f;
  }
  // The lane's candidates sorted best first (odd-even transposition: fixed register
  // indices), so a round's lane candidate is its head: the k rounds are k warp
  // arg-max butterflies, and the winning lane drops its head.
  float sc[kPer];  // sigmoid score of candidate j
  Best cand[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane + 32 * j;
    cand[j] = Best{choice[j], i < e ? i : -1};
    sc[j] = s[j];
  }
#pragma unroll
  for (int pass = 0; pass < kPer; ++pass) {
#pragma unroll
    for (int j = pass & 1; j + 1 < kPer; j += 2) {
      const Best a = cand[j], c = cand[j + 1];
      const bool swap = better(a, c).i != a.i;  // c ranks first (a none: c)
      const float sa = sc[j], sb = sc[j + 1];
      cand[j] = swap ? c : a;
      cand[j + 1] = swap ? a : c;
      sc[j] = swap ? sb : sa;
      sc[j + 1] = swap ? sa : sb;
    }
  }
  int my_pick = -1;    // lane p < k holds the p-th pick's expert id ...
  float my_score = 0;  // ... and its sigmoid score
  for (int it = 0; it < k; ++it) {
    Best b = cand[0];
    float bs = sc[0];
    for (int o = 16; o > 0; o >>= 1) {
      const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
      const float other_s = __shfl_xor_sync(0xffffffffu, bs, o);
      const Best c = better(b, other);
      if (c.i != b.i) bs = other_s;
      b = c;
    }
    if (b.i >= 0 && (b.i & 31) == lane) {  // the winner was this lane's head
#pragma unroll
      for (int j = 0; j + 1 < kPer; ++j) {
        cand[j] = cand[j + 1];
        sc[j] = sc[j + 1];
      }
      cand[kPer - 1] = Best{0.0f, -1};
    }
    if (lane == it) {
      my_pick = b.i;
      my_score = bs;
    }
  }
  // Ascending expert id: pick p goes to position (number of picks below it).
  int pos = 0;
  float sum = 0;
  for (int p = 0; p < k; ++p) {
    const int id = __shfl_sync(0xffffffffu, my_pick, p);
    if (lane < k && id < my_pick) ++pos;
  }
  // Sum of the picks' scores in ascending id order: walk positions 0..k-1.
  for (int q = 0; q < k; ++q) {
    const unsigned at = __ballot_sync(0xffffffffu, lane < k && pos == q);
    sum += __shfl_sync(0xffffffffu, my_score, at ? __ffs(at) - 1 : 0);
  }
  if (lane < k) {
    float wv = my_score;
    if (norm) wv /= (sum + 1e-20f);
    weights[t * k + pos] = wv * scaling;
    ids[t * k + pos] = my_pick;
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
  if (n_group == 1 && topk_group >= 1 && e <= 32 * kWarpMaxPer && k <= kWarpMaxK && !legacy_small_ops()) {
    const auto blocks = static_cast<unsigned>((t + kWarpsPerBlock - 1) / kWarpsPerBlock);
    const int per = static_cast<int>((e + 31) / 32);
    auto* wp = weights.data<float>();
    auto* ip = ids.data<int32_t>();
    const float* lp = logits.data<float>();
    const float* bp = bias.data<float>();
    const int ei = static_cast<int>(e);
    if (per <= 1) {
      route_warp_kernel<1><<<blocks, 32 * kWarpsPerBlock, 0, ctx.stream>>>(wp, ip, lp, bp, t, ei, k, norm, scaling);
    } else if (per <= 4) {
      route_warp_kernel<4><<<blocks, 32 * kWarpsPerBlock, 0, ctx.stream>>>(wp, ip, lp, bp, t, ei, k, norm, scaling);
    } else if (per <= 9) {
      route_warp_kernel<9><<<blocks, 32 * kWarpsPerBlock, 0, ctx.stream>>>(wp, ip, lp, bp, t, ei, k, norm, scaling);
    } else {
      route_warp_kernel<kWarpMaxPer>
          <<<blocks, 32 * kWarpsPerBlock, 0, ctx.stream>>>(wp, ip, lp, bp, t, ei, k, norm, scaling);
    }
    check_launch("moe_route");
    return;
  }
  const size_t smem = static_cast<size_t>(2 * e + n_group) * sizeof(float) + static_cast<size_t>(std::max<int64_t>(e, n_group));
  if (smem > 48 * 1024) throw StatusError(unimplemented("moe_route: too many experts for the kernel"));
  route_kernel<<<static_cast<unsigned>(t), kThreads, smem, ctx.stream>>>(
      weights.data<float>(), ids.data<int32_t>(), logits.data<float>(), bias.data<float>(), static_cast<int>(e),
      n_group, topk_group, k, norm, scaling);
  check_launch("moe_route");
}

}  // namespace tf::cuda
