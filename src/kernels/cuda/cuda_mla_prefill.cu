// MLA sparse attention for many query rows (prefill) on tensor cores: the same
// function as mla_sparse_attention (cuda_attention.cu / the CPU op), organised
// around the fact that all heads of a row attend to the same latents.
//
// One block per query row (16 warps):
//  0. the row's indices are sorted, out-of-range ones and repeats dropped (each cached
//     token counts once, as on the CPU), and the survivors compacted with their page
//     offsets and fp8 scales;
//  1. over tiles of 32 tokens: the latent tile goes to shared memory as f32, scores
//     S [H x 32] = q [H x R] L^T come from wmma TF32 products, and each head's running
//     max and sum of exponentials are updated (a warp per head, a lane per token);
//  2. the same tiles again: P = exp(S - max) / sum (times the fp8 scale), and
//     O [H x R] += P L accumulates in the warps' wmma fragments, which are stored to
//     the output at the end. Recomputing S avoids rescaling O, whose fragment layout
//     wmma does not expose.
// Accuracy: operands are split into a TF32 high and low part (q and P always, the
// latents too when the cache is f32; bf16 and fp8 values are exact in TF32), so the
// products keep about f32 accuracy and the parity tests hold 1e-5.
// Shapes: heads a multiple of 16 with heads * R <= 64 * 512 and R a multiple of 16;
// the caller falls back to the per-head kernel otherwise (mla_prefill_supported).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mla_prefill.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/latent_index_sort.cuh"

namespace tf::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 512;  // 16 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;              // tokens per tile
constexpr int kMaxHeads = 64;
constexpr int kMaxOut = 8;             // output fragments per warp: H/16 * R/16 <= 16 * 8
constexpr int kSLd = kTile + 8;        // row stride of the score / probability tiles

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragBr = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename Frag>
__device__ __forceinline__ void to_tf32(Frag& f) {
#pragma unroll
  for (int t = 0; t < f.num_elements; ++t) f.x[t] = wmma::__float_to_tf32(f.x[t]);
}

template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float v = hi.x[t];
    const float h = wmma::__float_to_tf32(v);
    hi.x[t] = h;
    lo.x[t] = wmma::__float_to_tf32(v - h);
  }
}

// acc += a b: a split in two; b split too when it is not exact in TF32 (f32 cache).
template <bool kSplitB, typename FB>
__device__ __forceinline__ void mma_split(FragC& acc, FragA& a, FB& b) {
  FragA a_lo;
  split_tf32(a, a_lo);
  if constexpr (kSplitB) {
    FB b_lo;
    split_tf32(b, b_lo);
    wmma::mma_sync(acc, a, b_lo, acc);
  } else {
    to_tf32(b);
  }
  wmma::mma_sync(acc, a_lo, b, acc);
  wmma::mma_sync(acc, a, b, acc);
}

template <typename T>
__device__ __forceinline__ float raw_latent(const void* pages, int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return static_cast<const float*>(pages)[i];
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(pages)[i]);
  } else {
    return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(pages)[i]);
  }
}

struct Pages {
  const void* pages;
  const float* scales;
  const int32_t* page_table;
  int64_t page_size, page_stride, num_tokens;
};

// Shared memory layout (bytes), for `padded` (a power of two >= W) and width r.
struct Smem {
  size_t poff, lscale, toks, lat, s2, p, stats, total;
};
__host__ __device__ inline Smem smem_layout(int padded, int r) {
  Smem m{};
  size_t at = 0;
  m.poff = at;
  at += static_cast<size_t>(padded) * 8;
  m.lscale = at;
  at += static_cast<size_t>(padded) * 4;
  m.toks = at;
  at += static_cast<size_t>(padded) * 4;
  at = (at + 127) / 128 * 128;
  m.lat = at;
  at += static_cast<size_t>(kTile) * (r + 8) * 4;
  m.s2 = at;
  at += static_cast<size_t>(2) * kMaxHeads * kSLd * 4;
  m.p = at;
  at += static_cast<size_t>(kMaxHeads) * kSLd * 4;
  m.stats = at;
  at += static_cast<size_t>(2) * kMaxHeads * 4 + 32 * 4 + 16;
  m.total = at;
  return m;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    mla_prefill_kernel(float* __restrict__ out, const float* __restrict__ q, Pages c, const int32_t* __restrict__ indices,
                       int w, int heads, int r, int padded, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Smem L = smem_layout(padded, r);
  int64_t* poff = reinterpret_cast<int64_t*>(smem + L.poff);  // compacted: offset of each valid token's row
  float* lscale = reinterpret_cast<float*>(smem + L.lscale);  // compacted: its fp8 scale (1 otherwise)
  int* toks = reinterpret_cast<int*>(smem + L.toks);
  float* lat = reinterpret_cast<float*>(smem + L.lat);        // [kTile][r + 8]
  float* s2 = reinterpret_cast<float*>(smem + L.s2);          // [2][kMaxHeads][kSLd] score halves
  float* pt = reinterpret_cast<float*>(smem + L.p);           // [kMaxHeads][kSLd] probabilities
  float* mrow = reinterpret_cast<float*>(smem + L.stats);     // [kMaxHeads] running max
  float* lrow = mrow + kMaxHeads;                             // [kMaxHeads] running sum
  int* counts = reinterpret_cast<int*>(lrow + kMaxHeads);     // [32] warp totals, then [32] = valid count
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x;
  const int rl = r + 8;

  // 0. Sort the indices (INT_MAX = none, last), drop repeats, compact.
  sort_row_tokens(toks, indices + row * w, w, c.num_tokens, padded);  // blockDim.x == kThreads
  // Each thread owns a contiguous run of `per` slots; block scan of the valid counts.
  const int per = (padded + kThreads - 1) / kThreads, j0 = tid * per;
  int mine = 0;
  for (int j = j0; j < j0 + per && j < padded; ++j) mine += first_of_token(toks, j);
  int nv;
  int before = block_exclusive_sum(mine, counts, nv);
  for (int j = j0; j < j0 + per && j < padded; ++j) {
    if (!first_of_token(toks, j)) continue;
    const int tok = toks[j];
    const int64_t page = c.page_table[tok / c.page_size], slot = tok % c.page_size;
    poff[before] = page * c.page_stride + slot * r;
    lscale[before] = std::is_same_v<T, __nv_fp8_e4m3> ? c.scales[page * c.page_size + slot] : 1.0f;
    ++before;
  }
  if (tid < kMaxHeads) {
    mrow[tid] = -INFINITY;
    lrow[tid] = 0.0f;
  }
  __syncthreads();

  const float* qrow = q + row * heads * r;
  const int htiles = heads / 16, score_jobs = htiles * 2 * 2;  // (head tile, token half, K half)
  // Latent tile j0..j0+31 into shared memory (rows past the valid count are 0).
  auto load_tile = [&](int t0) {
    for (int e = tid; e < kTile * r; e += kThreads) {
      const int j = e / r, x = e % r;
      lat[j * rl + x] = t0 + j < nv ? raw_latent<T>(c.pages, poff[t0 + j] + x) : 0.0f;
    }
  };
  // S halves: job -> (head tile, token half, K half); s2[kh] holds the K half's sum.
  auto scores = [&]() {
    for (int job = warp; job < score_jobs; job += kWarps) {
      const int hi = job >> 2, th = (job >> 1) & 1, kh = job & 1;
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      const int k0 = kh * (r / 2), k1 = k0 + r / 2;
      for (int k = k0; k < k1; k += 8) {
        FragA fa;
        FragBc fb;  // L^T: element (x, j) = lat[j][x]
        wmma::load_matrix_sync(fa, qrow + hi * 16 * r + k, r);
        wmma::load_matrix_sync(fb, lat + th * 16 * rl + k, rl);
        mma_split<std::is_same_v<T, float>>(acc, fa, fb);
      }
      wmma::store_matrix_sync(s2 + kh * kMaxHeads * kSLd + hi * 16 * kSLd + th * 16, acc, kSLd, wmma::mem_row_major);
    }
  };

  // 1. Running max and sum per head.
  for (int t0 = 0; t0 < nv; t0 += kTile) {
    load_tile(t0);
    __syncthreads();
    scores();
    __syncthreads();
    for (int h = warp; h < heads; h += kWarps) {
      const bool ok = t0 + lane < nv;
      const float s = ok ? (s2[h * kSLd + lane] + s2[kMaxHeads * kSLd + h * kSLd + lane]) * scale * lscale[t0 + lane]
                         : -INFINITY;
      const float mt = warp_reduce(s, MaxOp{});
      const float m_old = mrow[h], m_new = fmaxf(m_old, mt);
      const float e = ok ? expf(s - m_new) : 0.0f;
      const float sum = warp_reduce(e, SumOp{});
      if (lane == 0) {
        lrow[h] = lrow[h] * expf(m_old - m_new) + sum;
        mrow[h] = m_new;
      }
    }
    __syncthreads();
  }

  // 2. O = P L, fragments (head tile, 16 channels) spread over the warps.
  const int otiles = htiles * (r / 16);
  FragC oacc[kMaxOut];
#pragma unroll
  for (int i = 0; i < kMaxOut; ++i) wmma::fill_fragment(oacc[i], 0.0f);
  for (int t0 = 0; t0 < nv; t0 += kTile) {
    load_tile(t0);
    __syncthreads();
    scores();
    __syncthreads();
    for (int h = warp; h < heads; h += kWarps) {
      const bool ok = t0 + lane < nv;
      float p = 0.0f;
      if (ok) {
        const float s = (s2[h * kSLd + lane] + s2[kMaxHeads * kSLd + h * kSLd + lane]) * scale * lscale[t0 + lane];
        p = expf(s - mrow[h]) / lrow[h] * lscale[t0 + lane];
      }
      pt[h * kSLd + lane] = p;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxOut; ++i) {
      const int tile = warp + i * kWarps;
      if (tile < otiles) {
        const int hi = tile / (r / 16), xi = tile % (r / 16);
        for (int k = 0; k < kTile; k += 8) {
          FragA fa;
          FragBr fb;
          wmma::load_matrix_sync(fa, pt + hi * 16 * kSLd + k, kSLd);
          wmma::load_matrix_sync(fb, lat + k * rl + xi * 16, rl);
          mma_split<std::is_same_v<T, float>>(oacc[i], fa, fb);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kMaxOut; ++i) {
    const int tile = warp + i * kWarps;
    if (tile < otiles) {
      const int hi = tile / (r / 16), xi = tile % (r / 16);
      wmma::store_matrix_sync(out + (row * heads + hi * 16) * r + xi * 16, oacc[i], r, wmma::mem_row_major);
    }
  }
}

int padded_width(int64_t w) {
  int padded = 32;
  while (padded < w) padded <<= 1;
  return padded;
}

}  // namespace

bool mla_prefill_supported(int64_t heads, int64_t width, int64_t indices_per_row, DType cache_dtype) {
  if (mla_prefill_mma_supported(heads, width, indices_per_row, cache_dtype)) return true;
  if (heads <= 0 || heads % 16 != 0 || heads > kMaxHeads || width <= 0 || width % 16 != 0) return false;
  if ((heads / 16) * (width / 16) > kMaxOut * kWarps) return false;
  if (cache_dtype != DType::kF32 && cache_dtype != DType::kBF16 && cache_dtype != DType::kF8E4M3) return false;
  if (indices_per_row <= 0 || indices_per_row > (int64_t{1} << 14)) return false;
  return smem_layout(padded_width(indices_per_row), static_cast<int>(width)).total <=
         std::min<size_t>(220 * 1024, device_limits().smem_per_block - 1024);
}

void mla_sparse_attention_prefill(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                                  const Tensor& indices, float scale) {
  if (mla_sparse_attention_mma(ctx, out, q, cache, indices, scale)) return;
  const char* op = "mla_sparse_attention (prefill)";
  check_dev(ctx, op, q, DType::kF32);
  check_dev(ctx, op, indices, DType::kI32);
  const int64_t r = cache.width, w = indices.dim() == 0 ? 0 : indices.size(-1);
  const int64_t t = w == 0 ? 0 : indices.numel() / w;
  if (t == 0 || r == 0) throw StatusError(invalid_argument(std::string(op) + ": no rows or no indices"));
  const int64_t h = q.numel() / (t * r);
  check_dev(ctx, op, q, DType::kF32, t * h * r);
  check_dev(ctx, op, out, DType::kF32, t * h * r);
  if (!mla_prefill_supported(h, r, w, cache.dtype))
    throw StatusError(unimplemented(std::string(op) + ": " + std::to_string(h) + " heads of width " +
                                    std::to_string(r) + " with " + std::to_string(w) + " indices per row"));
  if (cache.dtype == DType::kF8E4M3 && cache.scales == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": an fp8 cache needs its scales"));
  const int padded = padded_width(w);
  const size_t smem = smem_layout(padded, static_cast<int>(r)).total;
  const Pages pg{cache.pages, cache.scales, cache.page_table, cache.page_size, cache.page_stride, cache.num_tokens};
  auto launch = [&](auto kernel) {
    if (const Status s = set_dynamic_smem(kernel, smem, op); !s.is_ok()) throw StatusError(s);
    kernel<<<static_cast<unsigned>(t), kThreads, smem, ctx.stream>>>(out.data<float>(), q.data<float>(), pg,
                                                                    indices.data<int32_t>(), static_cast<int>(w),
                                                                    static_cast<int>(h), static_cast<int>(r), padded,
                                                                    scale);
  };
  switch (cache.dtype) {
    case DType::kF32: launch(mla_prefill_kernel<float>); break;
    case DType::kBF16: launch(mla_prefill_kernel<__nv_bfloat16>); break;
    default: launch(mla_prefill_kernel<__nv_fp8_e4m3>); break;
  }
  check_launch(op);
}

}  // namespace tf::cuda
