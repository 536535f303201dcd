// MLA sparse attention in the absorbed form over the paged latent cache, and the
// store of new latents into it (f32, bf16, or fp8 e4m3 with a per-token scale),
// on the GPU. The view's pages, scales and page_table are device pointers.
//
// Attention: the split-token kernels of cuda_mla_decode.cu for every shape they take
// (both the one-sequence op, for the few rows the dispatcher sends here, and the
// decode-rows op use them, so a decode row gives the same bits through either op);
// otherwise the kernel below, one block per (query row, head). The block sorts the row's indices
// in shared memory (bitonic), drops out-of-range ones and duplicates (so each
// cached token counts once, as on the CPU) and looks up each token's page once;
// warps score several tokens at a time (loads in flight), then the softmax, then
// each warp sums the weighted latents of its share of the tokens over all channels
// and the warps' partials are added in a fixed order.
//
// The *_rows variants (decode rows of a step, ops.h DecodeRowsView) run the same
// kernels as the one-sequence op with each block reading its row's page table address and position from
// device memory: the launch depends only on the number of rows (capture-safe).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <climits>
#include <cstdint>
#include <type_traits>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/latent_index_sort.cuh"
#include "kernels/cuda/cuda_mla_decode.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 512;       // attention block: 16 warps
constexpr int kTokUnroll = 4;       // tokens a warp scores at once (independent loads in flight)
constexpr int kChanPerLane = 16;    // output channels a lane accumulates per pass
constexpr int kChanBlock = 32 * kChanPerLane;

struct PagesArgs {
  const void* pages;
  const float* scales;
  const int32_t* page_table;
  int64_t page_size, width, page_stride, num_tokens;
};

// Element `i` of the page buffer as float (fp8 before its per-token scale).
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

// Shared memory: toks[padded] int, scores[padded] float, lscale[padded] float,
// poff[padded] int64, q[width] float, red[nwarps][kChanBlock] float.
size_t attention_smem(int padded, int64_t width) {
  return static_cast<size_t>(padded) * (4 + 4 + 4 + 8) + static_cast<size_t>(width) * 4 +
         static_cast<size_t>(kThreads / 32) * kChanBlock * 4;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    mla_kernel(float* __restrict__ out, const float* __restrict__ q, PagesArgs c, const int32_t* __restrict__ indices,
               int64_t w, int64_t heads, int padded, float scale, const int64_t* __restrict__ row_tables,
               const int32_t* __restrict__ row_pos) {
  extern __shared__ __align__(16) unsigned char smem[];
  int64_t* poff = reinterpret_cast<int64_t*>(smem);               // [padded] element offset of the token's row
  int* toks = reinterpret_cast<int*>(poff + padded);              // [padded]
  float* scores = reinterpret_cast<float*>(toks + padded);        // [padded]
  float* lscale = scores + padded;                                // [padded] fp8 scale (1 otherwise)
  float* qs = lscale + padded;                                    // [width]
  float* red = qs + c.width;                                      // [nwarps][kChanBlock]
  __shared__ float scratch[32];
  const int64_t ti = blockIdx.x / heads, hh = blockIdx.x % heads;
  if (row_tables != nullptr) {  // decode rows: each row its own sequence (table, length)
    c.page_table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(row_tables[ti]));
    c.num_tokens = int64_t(row_pos[ti]) + 1;
  }
  const int64_t r = c.width;
  const float* qh = q + (ti * heads + hh) * r;
  for (int64_t x = threadIdx.x; x < r; x += blockDim.x) qs[x] = qh[x];
  for (int j = threadIdx.x; j < padded; j += blockDim.x) {
    int v = INT_MAX;
    if (j < w) {
      const int32_t id = indices[ti * w + j];
      if (id >= 0 && id < c.num_tokens) v = id;
    }
    toks[j] = v;
  }
  __syncthreads();
  // Bitonic sort, ascending (INT_MAX marks "none" and sorts last).
  bitonic_sort_slots(toks, padded);
  // Where each listed token's row lives (poff) and its fp8 scale; empty slots and
  // repeats of a token get poff = -1.
  for (int j = threadIdx.x; j < padded; j += blockDim.x) {
    const int tok = toks[j];
    const bool valid = tok != INT_MAX && (j == 0 || toks[j - 1] != tok);
    int64_t off = 0;
    float s = 1.0f;
    if (valid) {
      const int64_t page = c.page_table[tok / c.page_size], slot = tok % c.page_size;
      off = page * c.page_stride + slot * r;
      if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) s = c.scales[page * c.page_size + slot];
    }
    poff[j] = valid ? off : -1;
    lscale[j] = s;
  }
  __syncthreads();
  // Scores: a warp takes kTokUnroll tokens at a time; lanes stride the channels.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int base = warp * kTokUnroll; base < padded; base += nwarps * kTokUnroll) {
    float acc[kTokUnroll];
    int64_t off[kTokUnroll];
#pragma unroll
    for (int u = 0; u < kTokUnroll; ++u) {
      acc[u] = 0.0f;
      off[u] = base + u < padded ? poff[base + u] : -1;
    }
    for (int64_t x = lane; x < r; x += 32) {
      const float qx = qs[x];
#pragma unroll
      for (int u = 0; u < kTokUnroll; ++u)
        if (off[u] >= 0) acc[u] += qx * (raw_latent<T>(c.pages, off[u] + x) * lscale[base + u]);
    }
#pragma unroll
    for (int u = 0; u < kTokUnroll; ++u) {
      const float v = warp_reduce(acc[u], SumOp{});
      if (lane == 0 && base + u < padded) scores[base + u] = off[u] >= 0 ? v * scale : -INFINITY;
    }
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < padded; j += blockDim.x) mx = fmaxf(mx, scores[j]);
  mx = block_reduce(mx, MaxOp{}, scratch);
  float* o = out + (ti * heads + hh) * r;
  if (mx == -INFINITY) {  // no token: zeros
    for (int64_t x = threadIdx.x; x < r; x += blockDim.x) o[x] = 0.0f;
    return;
  }
  float sum = 0;
  for (int j = threadIdx.x; j < padded; j += blockDim.x) {
    const float e = poff[j] < 0 ? 0.0f : expf(scores[j] - mx);
    scores[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, SumOp{}, scratch);  // also orders the writes to scores
  // Weighted sum: warp w takes tokens w, w+nwarps, ...; lane owns channels
  // lane + 32 i of the pass; the warps' partial sums are added in warp order.
  for (int64_t c0 = 0; c0 < r; c0 += kChanBlock) {
    float acc[kChanPerLane];
#pragma unroll
    for (int i = 0; i < kChanPerLane; ++i) acc[i] = 0.0f;
    for (int j = warp; j < padded; j += nwarps) {
      const int64_t off = poff[j];
      if (off < 0) continue;
      const float p = scores[j] / sum, s = lscale[j];
#pragma unroll
      for (int i = 0; i < kChanPerLane; ++i) {
        const int64_t x = c0 + lane + 32 * i;
        if (x < r) acc[i] += p * (raw_latent<T>(c.pages, off + x) * s);
      }
    }
#pragma unroll
    for (int i = 0; i < kChanPerLane; ++i) red[warp * kChanBlock + lane + 32 * i] = acc[i];
    __syncthreads();
    for (int xi = threadIdx.x; xi < kChanBlock; xi += blockDim.x) {
      const int64_t x = c0 + xi;
      if (x >= r) continue;
      float total = 0;
      for (int ww = 0; ww < nwarps; ++ww) total += red[ww * kChanBlock + xi];
      o[x] = total;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void store_kernel(void* __restrict__ pages, float* __restrict__ scales, PagesArgs c,
                             const float* __restrict__ latent, int64_t first, const int64_t* __restrict__ row_tables,
                             const int32_t* __restrict__ row_pos) {
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x, r = c.width, tok = row_pos != nullptr ? int64_t(row_pos[i]) : first + i;
  if (row_tables != nullptr) c.page_table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(row_tables[i]));
  const int64_t page = c.page_table[tok / c.page_size], slot = tok % c.page_size;
  const int64_t off = page * c.page_stride + slot * r;
  const float* src = latent + i * r;
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) static_cast<float*>(pages)[off + j] = src[j];
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
      static_cast<__nv_bfloat16*>(pages)[off + j] = __float2bfloat16_rn(src[j]);
  } else {
    // One scale per token maps its largest magnitude to the fp8 maximum (448).
    float amax = 0;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) amax = fmaxf(amax, fabsf(src[j]));
    amax = block_reduce(amax, MaxOp{}, scratch);
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    if (threadIdx.x == 0) scales[page * c.page_size + slot] = s;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
      static_cast<__nv_fp8_storage_t*>(pages)[off + j] = __nv_cvt_float_to_fp8(src[j] / s, __NV_SATFINITE, __NV_E4M3);
  }
}

PagesArgs pages_args(const LatentPagesView& v) {
  return {v.pages, v.scales, v.page_table, v.page_size, v.width, v.page_stride, v.num_tokens};
}

void check_view(const char* op, const LatentPagesView& v) {
  if (v.page_size <= 0 || v.width <= 0 || v.page_table == nullptr || (v.pages == nullptr && v.num_tokens > 0))
    throw StatusError(invalid_argument(std::string(op) + ": latent cache view has no pages, page table or size"));
  if (v.dtype == DType::kF8E4M3 && v.scales == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": fp8 latent cache view without scales"));
  if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kF8E4M3)
    throw StatusError(unimplemented(std::string(op) + ": latent cache dtype " + dtype_name(v.dtype)));
}

}  // namespace

void latent_store(CudaContext& ctx, const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent,
                  int64_t first) {
  check_view("latent_store", cache);
  check_dev(ctx, "latent_store latent", latent, DType::kF32);
  const int64_t r = cache.width, t = latent.numel() / r;
  if (latent.numel() % r != 0)
    throw StatusError(invalid_argument("latent_store: latent " + latent.describe() + " is not rows of width " +
                                       std::to_string(r)));
  if (first < 0) throw StatusError(out_of_range("latent_store: negative first token slot"));
  if (t == 0) return;
  if (pages == nullptr || (cache.dtype == DType::kF8E4M3 && scales == nullptr))
    throw StatusError(invalid_argument("latent_store: no pages (or scales) to write"));
  PagesArgs a = pages_args(cache);
  switch (cache.dtype) {
    case DType::kF32: store_kernel<float><<<unsigned(t), 128, 0, ctx.stream>>>(pages, scales, a, latent.data<float>(), first, nullptr, nullptr); break;
    case DType::kBF16:
      store_kernel<__nv_bfloat16><<<unsigned(t), 128, 0, ctx.stream>>>(pages, scales, a, latent.data<float>(), first,
                                                                   nullptr, nullptr);
      break;
    default:
      store_kernel<__nv_fp8_e4m3><<<unsigned(t), 128, 0, ctx.stream>>>(pages, scales, a, latent.data<float>(), first,
                                                                   nullptr, nullptr);
      break;
  }
  check_launch("latent_store");
}

void mla_sparse_attention(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                          const Tensor& indices, float scale) {
  check_view("mla_sparse_attention", cache);
  check_dev(ctx, "mla_sparse_attention q", q, DType::kF32);
  check_dev(ctx, "mla_sparse_attention indices", indices, DType::kI32);
  const int64_t r = cache.width, w = indices.dim() == 0 ? 0 : indices.size(-1);
  if (w == 0) {
    check_dev(ctx, "mla_sparse_attention out", out, DType::kF32, q.numel());
    if (out.nbytes() > 0) {
      const Status s = cuda_status(cudaMemsetAsync(out.raw(), 0, out.nbytes(), ctx.stream), "mla_sparse_attention");
      if (!s.is_ok()) throw StatusError(s);
    }
    return;
  }
  const int64_t t = indices.numel() / w;
  if (t == 0) return;
  if (q.numel() % (t * r) != 0)
    throw StatusError(invalid_argument("mla_sparse_attention: q " + q.describe() + " is not [T, H, " +
                                       std::to_string(r) + "] for " + std::to_string(t) + " rows"));
  const int64_t h = q.numel() / (t * r);
  check_dev(ctx, "mla_sparse_attention out", out, DType::kF32, t * h * r);
  if (h == 0) return;
  const MlaSplitPages split{cache.pages, cache.scales, cache.dtype, cache.page_table, cache.page_size,
                            cache.width,  cache.page_stride, cache.num_tokens, nullptr, nullptr};
  if (mla_split_supported(h, split, w)) {
    mla_split_attention(ctx, out.data<float>(), q.data<float>(), split, indices.data<int32_t>(), t, w, h, scale);
    return;
  }
  int padded = 1;
  while (padded < w) padded <<= 1;
  const size_t smem = attention_smem(padded, r);
  if (!smem_fits(smem, 1024))
    throw StatusError(unimplemented("mla_sparse_attention: " + std::to_string(w) + " indices of width " +
                                    std::to_string(r) + " exceed the kernel's shared memory"));
  PagesArgs a = pages_args(cache);
  const unsigned blocks = static_cast<unsigned>(t * h);
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) {
      const Status s = set_dynamic_smem(kernel, smem, "mla_sparse_attention shared memory");
      if (!s.is_ok()) throw StatusError(s);
    }
    kernel<<<blocks, kThreads, smem, ctx.stream>>>(out.data<float>(), q.data<float>(), a, indices.data<int32_t>(), w, h,
                                                   padded, scale, nullptr, nullptr);
  };
  switch (cache.dtype) {
    case DType::kF32: launch(mla_kernel<float>); break;
    case DType::kBF16: launch(mla_kernel<__nv_bfloat16>); break;
    default: launch(mla_kernel<__nv_fp8_e4m3>); break;
  }
  check_launch("mla_sparse_attention");
}

namespace {

void rows_throw(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

void check_rows_view(const char* op, const DecodeRowsView& v) {
  if (v.rows < 0 || (v.rows > 0 && (v.positions == nullptr || v.page_tables == nullptr || v.pages == nullptr ||
                                    v.page_size <= 0 || v.width <= 0)))
    throw StatusError(invalid_argument(std::string(op) + ": decode rows without positions, page tables or pages"));
  if (v.dtype == DType::kF8E4M3 && v.scales == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": fp8 latent pages without scales"));
  if (v.dtype != DType::kF32 && v.dtype != DType::kBF16 && v.dtype != DType::kF8E4M3)
    throw StatusError(unimplemented(std::string(op) + ": latent cache dtype " + dtype_name(v.dtype)));
}

PagesArgs rows_args(const DecodeRowsView& v) {
  return {v.pages, v.scales, nullptr, v.page_size, v.width, v.page_stride, 0};
}

}  // namespace

void latent_store_rows(CudaContext& ctx, const DecodeRowsView& rows, const Tensor& latent) {
  check_rows_view("latent_store_rows", rows);
  check_dev(ctx, "latent_store_rows latent", latent, DType::kF32, rows.rows * rows.width);
  if (rows.rows == 0) return;
  const PagesArgs a = rows_args(rows);
  const unsigned b = static_cast<unsigned>(rows.rows);
  const float* x = latent.data<float>();
  switch (rows.dtype) {
    case DType::kF32:
      store_kernel<float><<<b, 128, 0, ctx.stream>>>(rows.pages, rows.scales, a, x, 0, rows.page_tables, rows.positions);
      break;
    case DType::kBF16:
      store_kernel<__nv_bfloat16><<<b, 128, 0, ctx.stream>>>(rows.pages, rows.scales, a, x, 0, rows.page_tables,
                                                             rows.positions);
      break;
    default:
      store_kernel<__nv_fp8_e4m3><<<b, 128, 0, ctx.stream>>>(rows.pages, rows.scales, a, x, 0, rows.page_tables,
                                                             rows.positions);
      break;
  }
  check_launch("latent_store_rows");
}

void mla_sparse_attention_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const DecodeRowsView& rows,
                               const Tensor& indices, float scale) {
  check_rows_view("mla_sparse_attention_rows", rows);
  check_dev(ctx, "mla_sparse_attention_rows q", q, DType::kF32);
  check_dev(ctx, "mla_sparse_attention_rows indices", indices, DType::kI32);
  const int64_t t = rows.rows, r = rows.width;
  if (t == 0) return;
  if (indices.dim() == 0 || indices.size(0) != t || q.numel() % (t * r) != 0)
    throw StatusError(invalid_argument("mla_sparse_attention_rows: q " + q.describe() + ", indices " +
                                       indices.describe() + " for " + std::to_string(t) + " rows of width " +
                                       std::to_string(r)));
  const int64_t w = indices.numel() / t, h = q.numel() / (t * r);
  check_dev(ctx, "mla_sparse_attention_rows out", out, DType::kF32, t * h * r);
  if (h == 0) return;
  if (w == 0) {
    rows_throw(cuda_status(cudaMemsetAsync(out.raw(), 0, out.nbytes(), ctx.stream), "mla_sparse_attention_rows"));
    return;
  }
  const MlaSplitPages split{rows.pages, rows.scales, rows.dtype, nullptr, rows.page_size, r, rows.page_stride, 0,
                            rows.page_tables, rows.positions};
  if (mla_split_supported(h, split, w)) {
    mla_split_attention(ctx, out.data<float>(), q.data<float>(), split, indices.data<int32_t>(), t, w, h, scale);
    return;
  }
  int padded = 1;
  while (padded < w) padded <<= 1;
  const size_t smem = attention_smem(padded, r);
  if (!smem_fits(smem, 1024))
    throw StatusError(unimplemented("mla_sparse_attention_rows: " + std::to_string(w) + " indices of width " +
                                    std::to_string(r) + " exceed the kernel's shared memory"));
  const PagesArgs a = rows_args(rows);
  const unsigned blocks = static_cast<unsigned>(t * h);
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      rows_throw(set_dynamic_smem(kernel, smem, "mla_sparse_attention_rows shared memory"));
    kernel<<<blocks, kThreads, smem, ctx.stream>>>(out.data<float>(), q.data<float>(), a, indices.data<int32_t>(), w, h,
                                                   padded, scale, rows.page_tables, rows.positions);
  };
  switch (rows.dtype) {
    case DType::kF32: launch(mla_kernel<float>); break;
    case DType::kBF16: launch(mla_kernel<__nv_bfloat16>); break;
    default: launch(mla_kernel<__nv_fp8_e4m3>); break;
  }
  check_launch("mla_sparse_attention_rows");
}

}  // namespace tf::cuda
