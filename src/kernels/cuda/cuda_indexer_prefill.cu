// DSA indexer pool scores for a prefill span on BF16 tensor cores (Ops::indexer_scores).
//
// out[t, p] = sum_h w[t, h] relu(scale q[t, h]·k[p]) is, per head, a GEMM of the rows'
// q [T, D] with the pooled keys [P, D]^T followed by an elementwise epilogue, summed
// over the heads. One block computes a tile of 64 (or 32) rows x 128 pools: the key tile is
// staged once (split into bf16 hi/lo), then for each head the rows' q tile is staged
// (the next head's q is loaded into registers while the current one multiplies), the
// head scores come from mma.m16n8k16 (8 or 4 warps, 32x32 each) and are folded into
// the output accumulators: acc += w[t, h] relu(scale s), heads in order as on the CPU.
// Tiles whose pools are past every row's candidate count (the causal upper triangle of
// a prompt) only write the "not a candidate" value.
//
// Precision: q and the keys are split in two bf16 parts; the three significant partial
// products (mma_bf16.cuh) give each q·k to ~2^-16 of |q||k|: measured on the H200 at
// <= 5.5e-6 of the largest score, inside the op's parity tolerance (1e-5). The order of the D-sum differs from the CPU's,
// so scores differ in the last bits and a top-k over them can pick differently only
// between pools whose scores agree to that precision (the tests check exactly that).
#include "kernels/cuda/cuda_indexer_prefill.h"

#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/mma_bf16.cuh"

namespace tf::cuda {
namespace {

constexpr int kBN = 128;   // pools per block
// Rows per block: 64 (8 warps as 2 x 4, each 32 rows x 32 pools), or 32 (4 warps as 1 x 4)
// where 64 rows' tiles do not fit the GPU's shared memory (D = 128 on a 99 KB sm_120 /
// sm_121 GPU). Every score is the same thread-local sum either way: the same bits.
constexpr int kBigRows = 64, kSmallRows = 32;
template <int BM>
constexpr int threads_of() {
  return BM / 32 * 4 * 32;
}
constexpr int kMaxHeads = 64;

template <int kD, int BM>
constexpr size_t smem_bytes(int heads) {
  return static_cast<size_t>(2 * (kBN + BM) * (kD + 8)) * 2 + static_cast<size_t>(BM * heads) * 4 + 16;
}

// Four f32 values split into bf16 hi/lo, stored as 4 consecutive elements of each.
__device__ __forceinline__ void store_split4(__nv_bfloat16* hi, __nv_bfloat16* lo, float4 v) {
  const Bf16Split a = split_bf16(v.x), b = split_bf16(v.y), c = split_bf16(v.z), d = split_bf16(v.w);
  *reinterpret_cast<uint2*>(hi) = make_uint2(pack_bf16(a.hi, b.hi), pack_bf16(c.hi, d.hi));
  *reinterpret_cast<uint2*>(lo) = make_uint2(pack_bf16(a.lo, b.lo), pack_bf16(c.lo, d.lo));
}

template <int kD, int BM>
__global__ void __launch_bounds__(threads_of<BM>(), 2)
    scores_mma_kernel(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ keys,
                      const float* __restrict__ w, const int32_t* __restrict__ cand, int64_t t, int64_t p, int heads,
                      float scale) {
  constexpr int kThreads = threads_of<BM>();
  constexpr int ld = kD + 8;  // row stride in elements: 16-byte rows, ldmatrix conflict-free
  constexpr int kVec = kD / 4;
  constexpr int kQPer = BM * kVec / kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* kh = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* kl = kh + kBN * ld;
  __nv_bfloat16* qh = kl + kBN * ld;
  __nv_bfloat16* ql = qh + BM * ld;
  float* ws = reinterpret_cast<float*>(ql + BM * ld);  // [BM][heads]
  int* smax = reinterpret_cast<int*>(ws + BM * heads);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
  const int64_t t0 = int64_t(blockIdx.y) * BM, p0 = int64_t(blockIdx.x) * kBN;

  if (tid == 0) *smax = 0;
  __syncthreads();
  if (tid < BM && t0 + tid < t) atomicMax(smax, cand[t0 + tid]);
  __syncthreads();
  if (p0 >= *smax) {  // no row of the tile has any of these pools as a candidate
    for (int e = tid; e < BM * kBN; e += kThreads) {
      const int64_t r = t0 + e / kBN, c = p0 + e % kBN;
      if (r < t && c < p) out[r * p + c] = -FLT_MAX;
    }
    return;
  }

  for (int e = tid; e < kBN * kVec; e += kThreads) {
    const int r = e / kVec, c = (e % kVec) * 4;
    const float4 v = p0 + r < p ? *reinterpret_cast<const float4*>(keys + (p0 + r) * kD + c) : make_float4(0, 0, 0, 0);
    store_split4(kh + r * ld + c, kl + r * ld + c, v);
  }
  for (int e = tid; e < BM * heads; e += kThreads) {
    const int r = e / heads;
    ws[e] = t0 + r < t ? w[(t0 + r) * heads + e % heads] : 0.0f;
  }
  float4 qr[kQPer];
  auto load_q = [&](int hh) {
#pragma unroll
    for (int i = 0; i < kQPer; ++i) {
      const int e = tid + i * kThreads, r = e / kVec, c = (e % kVec) * 4;
      qr[i] = t0 + r < t ? __ldg(reinterpret_cast<const float4*>(q + ((t0 + r) * heads + hh) * kD + c))
                         : make_float4(0, 0, 0, 0);
    }
  };
  load_q(0);

  float acc[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mi][ni][c] = 0.0f;
  const int g = lane >> 2, tq = lane & 3;

  for (int hh = 0; hh < heads; ++hh) {
    __syncthreads();  // the previous head's fragments are read
#pragma unroll
    for (int i = 0; i < kQPer; ++i) {
      const int e = tid + i * kThreads, r = e / kVec, c = (e % kVec) * 4;
      store_split4(qh + r * ld + c, ql + r * ld + c, qr[i]);
    }
    __syncthreads();
    if (hh + 1 < heads) load_q(hh + 1);  // in flight while this head multiplies

    float s[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mi][ni][c] = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16) {
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        load_a_frag(ah[mi], qh + (wm * 32 + mi * 16) * ld + k0, ld, lane);
        load_a_frag(al[mi], ql + (wm * 32 + mi * 16) * ld + k0, ld, lane);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t bh[4], bl[4];
        load_b_frags_nk(bh, kh + (wn * 32 + nj * 16) * ld + k0, ld, lane);
        load_b_frags_nk(bl, kl + (wn * 32 + nj * 16) * ld + k0, ld, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            float(&c)[4] = s[mi][nj * 2 + half];
            mma_bf16_16816(c, al[mi], bh[2 * half], bh[2 * half + 1]);
            mma_bf16_16816(c, ah[mi], bl[2 * half], bl[2 * half + 1]);
            mma_bf16_16816(c, ah[mi], bh[2 * half], bh[2 * half + 1]);
          }
      }
    }
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int ra = wm * 32 + mi * 16 + g;
      const float wa = ws[ra * heads + hh], wb = ws[(ra + 8) * heads + hh];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        acc[mi][ni][0] += wa * fmaxf(0.0f, s[mi][ni][0] * scale);
        acc[mi][ni][1] += wa * fmaxf(0.0f, s[mi][ni][1] * scale);
        acc[mi][ni][2] += wb * fmaxf(0.0f, s[mi][ni][2] * scale);
        acc[mi][ni][3] += wb * fmaxf(0.0f, s[mi][ni][3] * scale);
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = t0 + wm * 32 + mi * 16 + g + half * 8;
      if (row >= t) continue;
      const int64_t nc = cand[row];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int64_t col = p0 + wn * 32 + ni * 8 + 2 * tq + j;
          if (col < p) out[row * p + col] = col < nc ? acc[mi][ni][half * 2 + j] : -FLT_MAX;
        }
    }
}

template <int kD, int BM>
void launch_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& keys, const Tensor& w, const Tensor& cand,
            int64_t t, int64_t p, int heads, float scale) {
  const size_t smem = smem_bytes<kD, BM>(heads);
  const Status s = set_dynamic_smem(scores_mma_kernel<kD, BM>, smem, "indexer_scores (tensor cores)");
  if (!s.is_ok()) throw StatusError(s);
  const dim3 grid(static_cast<unsigned>((p + kBN - 1) / kBN), static_cast<unsigned>((t + BM - 1) / BM));
  scores_mma_kernel<kD, BM><<<grid, threads_of<BM>(), smem, ctx.stream>>>(out.data<float>(), q.data<float>(), keys.data<float>(),
                                                              w.data<float>(), cand.data<int32_t>(), t, p, heads,
                                                              scale);
}

// The 64-row blocks where they fit, else the 32-row ones.
template <int kD>
bool big_rows_fit(int heads) {
  return smem_fits(smem_bytes<kD, kBigRows>(heads), 1024);
}
template <int kD>
void launch(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& keys, const Tensor& w, const Tensor& cand,
            int64_t t, int64_t p, int heads, float scale) {
  if (big_rows_fit<kD>(heads))
    launch_rows<kD, kBigRows>(ctx, out, q, keys, w, cand, t, p, heads, scale);
  else
    launch_rows<kD, kSmallRows>(ctx, out, q, keys, w, cand, t, p, heads, scale);
}

}  // namespace

bool indexer_scores_mma_supported(int64_t heads, int64_t width) {
  if (heads < 1 || heads > kMaxHeads || (width != 64 && width != 128)) return false;
  // The smaller blocks fit 99 KB (sm_120 / sm_121) at every width and head count covered;
  // below that the f32 kernel runs.
  const int h = static_cast<int>(heads);
  return smem_fits(width == 64 ? smem_bytes<64, kSmallRows>(h) : smem_bytes<128, kSmallRows>(h), 1024);
}

bool indexer_scores_mma_applies(const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                                const Tensor& candidates) {
  const int64_t t = candidates.numel(), d = pool_keys.dim() == 0 ? 0 : pool_keys.size(-1);
  if (t == 0 || d == 0 || q.dtype() != DType::kF32 || pool_keys.dtype() != DType::kF32) return false;
  const auto aligned = [](const Tensor& x) { return reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0; };
  return indexer_scores_mma_supported(weights.numel() / t, d) && aligned(q) && aligned(pool_keys);
}

void indexer_scores_mma(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                        const Tensor& candidates, float scale) {
  const char* op = "indexer_scores (tensor cores)";
  check_dev(ctx, op, pool_keys, DType::kF32);
  check_dev(ctx, op, candidates, DType::kI32);
  const int64_t t = candidates.numel(), d = pool_keys.size(-1), p = d == 0 ? 0 : pool_keys.numel() / d;
  if (t == 0) return;
  const int64_t h = weights.numel() / t;
  check_dev(ctx, op, q, DType::kF32, t * h * d);
  check_dev(ctx, op, weights, DType::kF32, t * h);
  check_dev(ctx, op, out, DType::kF32, t * p);
  if (p == 0) return;
  if (!indexer_scores_mma_supported(h, d) || reinterpret_cast<uintptr_t>(q.raw()) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(pool_keys.raw()) % 16 != 0)
    throw StatusError(unimplemented(std::string(op) + ": " + std::to_string(h) + " heads of width " +
                                    std::to_string(d)));
  if ((t + kSmallRows - 1) / kSmallRows > 65535) throw StatusError(unimplemented(std::string(op) + ": too many rows"));
  if (d == 128)
    launch<128>(ctx, out, q, pool_keys, weights, candidates, t, p, static_cast<int>(h), scale);
  else
    launch<64>(ctx, out, q, pool_keys, weights, candidates, t, p, static_cast<int>(h), scale);
  check_launch(op);
}

}  // namespace tf::cuda
