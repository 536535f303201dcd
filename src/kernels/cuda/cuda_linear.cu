// Matmul against weights (x · W^T, W f32 or bf16), per-head matmul, embedding
// lookup and row gather/scatter on the GPU.
//
// Up to kCublasMinRows rows (decode, small batches) an own kernel: one warp per
// output column streams the weight row in 16-byte chunks with a fixed lane split
// and a fixed butterfly reduction, each row with its own accumulator, so a row's
// result does not depend on the other rows of the call (nor on their number). Above that, cuBLAS (f32: SGEMM without TF32; bf16
// weights: x rounded to bf16, fp32 accumulation).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kRowTile = 8;
constexpr int kWarpsPerBlock = 8;

// out[h][r, c] (= out + h*o_hs + r*ldo + c) = sum_i x[h][r, i] * w[h][c, i].
// A warp computes NC adjacent columns. Lane l owns the 16-byte chunks l, l+32, ...
// of each weight row (C elements each) and sums them in that order, C products at
// a time; the lanes are then combined by a butterfly. The arithmetic of one output
// is the same for every NC and row count, so NC can follow M without changing bits.
// kVec loads the chunks as 16-byte vectors (needs K % C == 0 and aligned rows);
// otherwise element by element with a zero-padded tail: again the same arithmetic.
template <typename W, bool kVec, int NC>
__global__ void small_gemm_kernel(float* __restrict__ out, int64_t ldo, int64_t o_hs, const float* __restrict__ x,
                                  int64_t ldx, int64_t x_hs, const W* __restrict__ w, int64_t w_hs, int64_t m,
                                  int64_t n, int64_t k, bool accumulate) {
  constexpr int C = 16 / sizeof(W);
  const int lane = threadIdx.x & 31;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * NC;
  if (col0 >= n) return;
  const int64_t h = blockIdx.y;
  x += h * x_hs;
  out += h * o_hs;
  const W* wr = w + h * w_hs + col0 * k;
  for (int64_t r0 = 0; r0 < m; r0 += kRowTile) {
    const int rows = static_cast<int>(m - r0 < kRowTile ? m - r0 : kRowTile);
    float acc[kRowTile][NC];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r)
#pragma unroll
      for (int cc = 0; cc < NC; ++cc) acc[r][cc] = 0.0f;
#pragma unroll 2
    for (int64_t c0 = int64_t(lane) * C; c0 < k; c0 += 32 * C) {
      float wv[NC][C];
#pragma unroll
      for (int cc = 0; cc < NC; ++cc) {
        const bool col_ok = col0 + cc < n;
        const W* wc = wr + cc * k;
        if constexpr (kVec) {
          const uint4 raw = col_ok ? *reinterpret_cast<const uint4*>(wc + c0) : make_uint4(0, 0, 0, 0);
          if constexpr (C == 8) {
            const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 f = __bfloat1622float2(p[e]);
              wv[cc][2 * e] = f.x;
              wv[cc][2 * e + 1] = f.y;
            }
          } else {
            wv[cc][0] = __uint_as_float(raw.x);
            wv[cc][1] = __uint_as_float(raw.y);
            wv[cc][2] = __uint_as_float(raw.z);
            wv[cc][3] = __uint_as_float(raw.w);
          }
        } else {
#pragma unroll
          for (int e = 0; e < C; ++e) wv[cc][e] = col_ok && c0 + e < k ? to_f32(wc[c0 + e]) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        if (r >= rows) break;
        const float* xr = x + (r0 + r) * ldx + c0;
        float xv[C];
        if constexpr (kVec) {
#pragma unroll
          for (int e = 0; e < C; e += 4) {
            const float4 f = *reinterpret_cast<const float4*>(xr + e);
            xv[e] = f.x;
            xv[e + 1] = f.y;
            xv[e + 2] = f.z;
            xv[e + 3] = f.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < C; ++e) xv[e] = c0 + e < k ? xr[e] : 0.0f;
        }
#pragma unroll
        for (int cc = 0; cc < NC; ++cc)
#pragma unroll
          for (int e = 0; e < C; ++e) acc[r][cc] += wv[cc][e] * xv[e];
      }
    }
#pragma unroll
    for (int r = 0; r < kRowTile; ++r)
#pragma unroll
      for (int cc = 0; cc < NC; ++cc) {
        const float v = warp_reduce(acc[r][cc], SumOp{});
        if (lane == 0 && r < rows && col0 + cc < n) {
          float* o = out + (r0 + r) * ldo + col0 + cc;
          *o = accumulate ? *o + v : v;
        }
      }
  }
}

template <typename W, int NC>
void launch_small_gemm_nc(bool vec, dim3 grid, cudaStream_t stream, float* out, int64_t ldo, int64_t o_hs,
                          const float* x, int64_t ldx, int64_t x_hs, const W* w, int64_t w_hs, int64_t m, int64_t n,
                          int64_t k, bool accumulate) {
  if (vec) {
    small_gemm_kernel<W, true, NC><<<grid, kWarpsPerBlock * 32, 0, stream>>>(out, ldo, o_hs, x, ldx, x_hs, w, w_hs,
                                                                             m, n, k, accumulate);
  } else {
    small_gemm_kernel<W, false, NC><<<grid, kWarpsPerBlock * 32, 0, stream>>>(out, ldo, o_hs, x, ldx, x_hs, w, w_hs,
                                                                              m, n, k, accumulate);
  }
}

template <typename W>
void launch_small_gemm(cudaStream_t stream, float* out, int64_t ldo, int64_t o_hs, const float* x, int64_t ldx,
                       int64_t x_hs, const W* w, int64_t w_hs, int64_t m, int64_t n, int64_t k, int64_t heads,
                       bool accumulate) {
  constexpr int64_t C = 16 / sizeof(W);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = k % C == 0 && w_hs % C == 0 && ldx % 4 == 0 && x_hs % 4 == 0 && aligned(w) && aligned(x);
  // One column per warp for a single row (more warps streaming weights); four
  // when several rows share each weight load (fewer activation loads per FMA).
  const int nc = m == 1 ? 1 : 4;
  const int64_t cols_per_block = kWarpsPerBlock * nc;
  dim3 grid(static_cast<unsigned>((n + cols_per_block - 1) / cols_per_block), static_cast<unsigned>(heads));
  if (nc == 1) {
    launch_small_gemm_nc<W, 1>(vec, grid, stream, out, ldo, o_hs, x, ldx, x_hs, w, w_hs, m, n, k, accumulate);
  } else {
    launch_small_gemm_nc<W, 4>(vec, grid, stream, out, ldo, o_hs, x, ldx, x_hs, w, w_hs, m, n, k, accumulate);
  }
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

void cublas_check(cublasStatus_t s, const char* op) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw StatusError(internal_error(std::string(op) + ": cuBLAS failed with status " + std::to_string(int(s))));
}

// Batched (over heads) out = x · w^T. Shapes: m rows, n cols, k depth; per head
// h the operands start at x + h*x_hs, w + h*w_hs, out + h*o_hs.
void gemm(CudaContext& ctx, const char* op, float* out, int64_t ldo, int64_t o_hs, const float* x, int64_t ldx,
          int64_t x_hs, const Tensor& w, int64_t w_hs, int64_t m, int64_t n, int64_t k, int64_t heads,
          bool accumulate) {
  if (m == 0 || n == 0) return;
  const bool bf16 = w.dtype() == DType::kBF16;
  if (m <= kCublasMinRows || k == 0) {
    if (bf16) {
      launch_small_gemm(ctx.stream, out, ldo, o_hs, x, ldx, x_hs, w.data<__nv_bfloat16>(), w_hs, m, n, k, heads,
                        accumulate);
    } else {
      launch_small_gemm(ctx.stream, out, ldo, o_hs, x, ldx, x_hs, w.data<float>(), w_hs, m, n, k, heads, accumulate);
    }
    check_launch(op);
    return;
  }
  // Column-major view: out^T[n, m] = op_T(w^T[k, n]) · x^T[k, m].
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  if (!bf16) {
    cublas_check(cublasSgemmStridedBatched(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                                           w.data<float>(), int(k), w_hs, x, int(ldx), x_hs, &beta, out, int(ldo),
                                           o_hs, int(heads)),
                 op);
    return;
  }
  // x rows are (m-1)*ldx + heads' extent; convert the whole span to bf16.
  const int64_t span = (m - 1) * ldx + (heads - 1) * x_hs + k;
  Tensor xb = ctx.scratch(span * 2);
  f32_to_bf16_kernel<<<grid_1d(span), 256, 0, ctx.stream>>>(x, xb.data<__nv_bfloat16>(), span);
  check_launch(op);
  cublas_check(cublasGemmStridedBatchedEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha,
                                          w.raw(), CUDA_R_16BF, int(k), w_hs, xb.raw(), CUDA_R_16BF, int(ldx), x_hs,
                                          &beta, out, CUDA_R_32F, int(ldo), o_hs, int(heads), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT),
               op);
}

}  // namespace

void matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& w, bool accumulate) {
  check_dev(ctx, "matmul x", x, DType::kF32);
  check_weight(ctx, "matmul w", w);
  if (w.dim() != 2) throw StatusError(invalid_argument("matmul: weight must be 2-D, got " + w.describe()));
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(invalid_argument("matmul: x " + x.describe() + " does not match weight " + w.describe()));
  const int64_t rows = x.numel() / k;
  check_dev(ctx, "matmul out", out, DType::kF32, rows * n);
  gemm(ctx, "matmul", out.data<float>(), n, 0, x.data<float>(), k, 0, w, 0, rows, n, k, 1, accumulate);
}

void head_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& w) {
  check_dev(ctx, "head_matmul x", x, DType::kF32);
  check_weight(ctx, "head_matmul w", w);
  if (w.dim() != 3) throw StatusError(invalid_argument("head_matmul: weight must be [H, N, K], got " + w.describe()));
  const int64_t h = w.size(0), n = w.size(1), k = w.size(2);
  if (h * k == 0 || x.numel() % (h * k) != 0)
    throw StatusError(invalid_argument("head_matmul: x " + x.describe() + " does not match " + w.describe()));
  const int64_t rows = x.numel() / (h * k);
  check_dev(ctx, "head_matmul out", out, DType::kF32, rows * h * n);
  gemm(ctx, "head_matmul", out.data<float>(), h * n, n, x.data<float>(), h * k, k, w, n * k, rows, n, k, h, false);
}

namespace {

template <typename T>
__global__ void embedding_kernel(float* __restrict__ out, const T* __restrict__ table, const int32_t* __restrict__ ids,
                                 int64_t n, int64_t d, int64_t vocab, unsigned* err) {
  const int64_t total = n * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, c = e % d;
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      out[e] = 0.0f;
      if (c == 0) atomicOr(err, kErrEmbeddingId);
    } else {
      out[e] = to_f32(table[id * d + c]);
    }
  }
}

__global__ void gather_kernel(float* __restrict__ out, const float* __restrict__ x, const int32_t* __restrict__ idx,
                              int64_t n, int64_t d, int64_t xrows, unsigned* err) {
  const int64_t total = n * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / d, c = e % d;
    const int32_t r = idx[i];
    if (r < 0 || r >= xrows) {
      out[e] = 0.0f;
      if (c == 0) atomicOr(err, kErrGatherIndex);
    } else {
      out[e] = x[r * d + c];
    }
  }
}

// One thread per column walks the n source rows in order, so rows sharing an
// index are summed in the given order (as on the CPU), without atomics.
__global__ void scatter_add_kernel(float* __restrict__ out, const float* __restrict__ x,
                                   const int32_t* __restrict__ idx, const float* __restrict__ scale, int64_t n,
                                   int64_t d, int64_t orows, unsigned* err) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < d; c += int64_t(gridDim.x) * blockDim.x) {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t r = idx[i];
      if (r < 0 || r >= orows) {
        if (c == 0) atomicOr(err, kErrGatherIndex);
        continue;
      }
      out[r * d + c] += scale[i] * x[i * d + c];
    }
  }
}

}  // namespace

void embedding(CudaContext& ctx, Tensor& out, const Tensor& table, const Tensor& ids) {
  check_weight(ctx, "embedding table", table);
  check_dev(ctx, "embedding ids", ids, DType::kI32);
  if (table.dim() != 2) throw StatusError(invalid_argument("embedding: table must be 2-D, got " + table.describe()));
  const int64_t vocab = table.size(0), d = table.size(1), n = ids.numel();
  check_dev(ctx, "embedding out", out, DType::kF32, n * d);
  if (n * d == 0) return;
  if (table.dtype() == DType::kBF16) {
    embedding_kernel<<<grid_1d(n * d), 256, 0, ctx.stream>>>(out.data<float>(), table.data<__nv_bfloat16>(),
                                                              ids.data<int32_t>(), n, d, vocab, ctx.error_word);
  } else {
    embedding_kernel<<<grid_1d(n * d), 256, 0, ctx.stream>>>(out.data<float>(), table.data<float>(),
                                                              ids.data<int32_t>(), n, d, vocab, ctx.error_word);
  }
  check_launch("embedding");
}

void gather_rows(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& idx) {
  check_dev(ctx, "gather_rows x", x, DType::kF32);
  check_dev(ctx, "gather_rows idx", idx, DType::kI32);
  const int64_t d = x.size(-1), n = idx.numel();
  check_dev(ctx, "gather_rows out", out, DType::kF32, n * d);
  if (n * d == 0) return;
  gather_kernel<<<grid_1d(n * d), 256, 0, ctx.stream>>>(out.data<float>(), x.data<float>(), idx.data<int32_t>(), n, d,
                                                         x.numel() / d, ctx.error_word);
  check_launch("gather_rows");
}

void scatter_add_rows(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& scale) {
  check_dev(ctx, "scatter_add_rows out", out, DType::kF32);
  check_dev(ctx, "scatter_add_rows idx", idx, DType::kI32);
  const int64_t d = out.size(-1), n = idx.numel();
  check_dev(ctx, "scatter_add_rows x", x, DType::kF32, n * d);
  check_dev(ctx, "scatter_add_rows scale", scale, DType::kF32, n);
  if (n * d == 0) return;
  scatter_add_kernel<<<grid_1d(d, 128), 128, 0, ctx.stream>>>(out.data<float>(), x.data<float>(), idx.data<int32_t>(),
                                                               scale.data<float>(), n, d, out.numel() / d,
                                                               ctx.error_word);
  check_launch("scatter_add_rows");
}

}  // namespace tf::cuda
