// Matmul against weights (x · W^T, W f32 or bf16), per-head matmul, embedding
// lookup and row gather/scatter on the GPU.
//
// Up to kCublasMinRows rows (decode, small batches) small_gemm.cu: weights
// streamed once per call, each output a fixed per-lane FMA sequence and a fixed
// butterfly, so a row's result does not depend on the other rows of the call (nor
// on their number). Above that, cuBLAS (f32: SGEMM without TF32; bf16 weights: x
// rounded to bf16, fp32 accumulation).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/small_gemm.h"

namespace tf::cuda {
namespace {

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
  if (m <= ctx.exact_rows || k == 0) {
    SmallGemmArgs a;
    a.out = out;
    a.ldo = ldo;
    a.o_hs = o_hs;
    a.x = x;
    a.ldx = ldx;
    a.x_hs = x_hs;
    a.w = w.raw();
    a.w_dtype = bf16 ? DType::kBF16 : DType::kF32;
    a.w_hs = w_hs;
    a.m = m;
    a.n = n;
    a.k = k;
    a.heads = heads;
    a.accumulate = accumulate;
    try {
      small_gemm(ctx.stream, a);
    } catch (const StatusError& e) {
      throw StatusError(Status(e.status().code(), std::string(op) + ": " + e.status().message()));
    }
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
