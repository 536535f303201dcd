// Matmul against weights (x · W^T, W f32 or bf16), per-head matmul, embedding
// lookup and row gather/scatter on the GPU.
//
// Up to kCublasMinRows rows (decode, small batches) small_gemm.cu: weights
// streamed once per call, each output a fixed per-lane FMA sequence and a fixed
// butterfly, so a row's result does not depend on the other rows of the call (nor
// on their number). Above that, cuBLAS (f32: SGEMM without TF32; bf16 weights: x
// rounded to bf16, fp32 accumulation). head_matmul with bf16 weights of K = 256 or 512
// (the absorbed MLA products) has its own decode kernel (head_gemv_kernel).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/pdl.cuh"
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

// ---- head_matmul at decode rows (bf16 weights, K = 256 or 512) ---------------------
// The absorbed MLA products (w_uk_t [H, 512, 256], w_uv [H, 256, 512]) are 16.8 MB that
// small_gemm streams in 8-byte loads, with a 5-shuffle butterfly per output. Here a block
// takes one head, 8 warps x head_gemv_loads(KL) / KL columns and every row: each lane
// first issues all its 16-byte weight loads (head_gemv_loads), then, for each group of
// kHgRows rows, stages the head's x rows in shared memory and
// reduces the columns: a fixed chain of 8 FMAs per load (load order), then columns_sum's
// fixed tree (8 columns in 9 shuffles). A row's bits depend only on that row, the weights
// and K (never on the row count), as small_gemm's contract asks.
constexpr int kHgWarps = 8, kHgRows = 8;
// 16-byte weight loads per lane: 16 at K = 512 (the whole matrix in one wave of 256
// blocks, 108 registers); 8 at K = 256 (16 columns per warp), where 16 would spill.
__host__ __device__ constexpr int head_gemv_loads(int kl) { return kl == 1 ? 8 : 16; }

struct HeadGemvArgs {
  float* out;
  const float* x;
  const __nv_bfloat16* w;
  int64_t m, ldx, ldo;  // rows; x and out row strides (elements)
  int n;                // columns per head (x: head h at h * K, out: at h * n)
  bool early;           // pdl_launch_dependents() first (early_trigger_enabled())
};

bool use_head_gemv() {
  static const bool on = [] {
    const char* e = std::getenv("TF_HEAD_MATMUL_GEMV");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

// The warp sum of kN columns at once (kN a power of two, 2..32; v[c] = this lane's part of
// column c): each exchange halves the columns a lane keeps (it sends the half its partner
// keeps and adds what it receives), then a butterfly over the lanes left on the same
// column. kN - 1 + log2(32 / kN) shuffles instead of 5 kN; every column's sum is a fixed
// tree over the lanes. Returns the total of column column_of_lane<kN>(lane).
template <int kN>
__device__ __forceinline__ int column_of_lane(int lane) {
  int c = 0;
#pragma unroll
  for (int w = kN, bit = 16; w > 1; w >>= 1, bit >>= 1) c += (lane & bit) ? w / 2 : 0;
  return c;
}

template <int kN>
__device__ __forceinline__ float columns_sum(float (&v)[kN], int lane) {
  int bit = 16;
#pragma unroll
  for (int w = kN; w > 1; w >>= 1, bit >>= 1) {
    const bool up = (lane & bit) != 0;
#pragma unroll
    for (int i = 0; i < w / 2; ++i) {
      const float send = up ? v[i] : v[i + w / 2];
      const float keep = up ? v[i + w / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, bit);
    }
  }
  float t = v[0];
  for (; bit > 0; bit >>= 1) t += __shfl_xor_sync(0xffffffffu, t, bit);
  return t;
}

template <int KL>  // 16-byte loads per lane per column: K = 256 KL
__global__ void __launch_bounds__(kHgWarps * 32, 2) head_gemv_kernel(HeadGemvArgs a) {
  if (a.early) pdl_launch_dependents();
  constexpr int kK = 256 * KL, kCols = head_gemv_loads(KL) / KL;
  __shared__ float4 xs[kHgRows * kK / 4];
  const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c0 = (int(blockIdx.x) * kHgWarps + warp) * kCols;
  const uint4* wp = reinterpret_cast<const uint4*>(a.w + (int64_t(h) * a.n + c0) * kK) + lane;
  uint4 wv[kCols][KL];
#pragma unroll
  for (int c = 0; c < kCols; ++c)
#pragma unroll
    for (int j = 0; j < KL; ++j) wv[c][j] = __ldcs(wp + c * (kK / 8) + j * 32);
  // The rows in groups of kHgRows against the weights held in registers.
  for (int64_t r0 = 0; r0 < a.m; r0 += kHgRows) {
    const int rows = a.m - r0 < kHgRows ? int(a.m - r0) : kHgRows;
    if (r0 > 0) __syncthreads();  // the previous group's reads of xs
    for (int i = threadIdx.x; i < rows * (kK / 4); i += kHgWarps * 32) {
      const int rr = i / (kK / 4), e = i % (kK / 4);
      xs[i] = *reinterpret_cast<const float4*>(a.x + (r0 + rr) * a.ldx + int64_t(h) * kK + 4 * e);
    }
    __syncthreads();
    constexpr int kSum = kCols < 8 ? kCols : 8;  // columns reduced together (bounds the registers)
    const int col = c0 + column_of_lane<kSum>(lane);
#pragma unroll 1
    for (int rr = 0; rr < rows; ++rr) {
#pragma unroll
      for (int c8 = 0; c8 < kCols; c8 += kSum) {
        float part[kSum];  // this lane's share of each column: a fixed chain of FMAs
#pragma unroll
        for (int c = 0; c < kSum; ++c) {
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < KL; ++j) {
            const float4 xa = xs[rr * (kK / 4) + (j * 32 + lane) * 2], xb = xs[rr * (kK / 4) + (j * 32 + lane) * 2 + 1];
            uint4 u = wv[c8 + c][j];
            // K = 512: opaque per row, which keeps the conversions below in the row loop
            // (hoisted, their floats would not fit in the registers next to the weights).
            if constexpr (KL == 2) asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
            const float2 w0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
            const float2 w1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
            const float2 w2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.z));
            const float2 w3 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.w));
            s = fmaf(w0.x, xa.x, s);
            s = fmaf(w0.y, xa.y, s);
            s = fmaf(w1.x, xa.z, s);
            s = fmaf(w1.y, xa.w, s);
            s = fmaf(w2.x, xb.x, s);
            s = fmaf(w2.y, xb.y, s);
            s = fmaf(w3.x, xb.z, s);
            s = fmaf(w3.y, xb.w, s);
          }
          part[c] = s;
        }
        const float total = columns_sum<kSum>(part, lane);
        if ((lane & (32 / kSum - 1)) == 0) a.out[(r0 + rr) * a.ldo + int64_t(h) * a.n + c8 + col] = total;
      }
    }
  }
}

// Launches head_gemv_kernel when the shapes fit it; false otherwise (small_gemm runs).
bool head_gemv(CudaContext& ctx, float* out, const float* x, const Tensor& w, int64_t m, int64_t n, int64_t k,
               int64_t heads) {
  if (!use_head_gemv() || w.dtype() != DType::kBF16 || (k != 256 && k != 512) || heads > 65535) return false;
  const int kl = static_cast<int>(k / 256), cols_per_block = kHgWarps * head_gemv_loads(kl) / kl;
  if (n % cols_per_block != 0 || n > (int64_t{1} << 30)) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w.raw()) % 16 != 0) return false;
  const HeadGemvArgs a{out, x, w.data<__nv_bfloat16>(), m, heads * k, heads * n, static_cast<int>(n),
                       early_trigger_enabled()};
  const dim3 grid(static_cast<unsigned>(n / cols_per_block), static_cast<unsigned>(heads));
  if (kl == 1) {
    head_gemv_kernel<1><<<grid, kHgWarps * 32, 0, ctx.stream>>>(a);
  } else {
    head_gemv_kernel<2><<<grid, kHgWarps * 32, 0, ctx.stream>>>(a);
  }
  check_launch("head_matmul");
  return true;
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
  // Decode rows (the same kernel for every row count up to exact_rows, so a row's bits
  // never depend on the batch): the one-wave GEMV where the shapes allow.
  if (rows > 0 && rows <= ctx.exact_rows && head_gemv(ctx, out.data<float>(), x.data<float>(), w, rows, n, k, h)) return;
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
