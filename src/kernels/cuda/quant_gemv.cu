// Quantized-matrix GEMV and dequantization kernels (see quant_gemv.h), and
// cuda::quant_matmul, the backend's Ops::quant_matmul.
//
// Per lane and step: 32 consecutive weights of each of the warp's R output rows. q4:
// 16 bytes = half a 64-group, one f16 scale; fp8: 32 bytes inside one 128-wide scale
// block. The 32
// products are summed per row of x in a fixed order, then multiplied by the
// group's scale (one multiply per 32 weights instead of one per weight), then the
// 32 lanes combine by a fixed butterfly. Nibbles become floats by the exponent
// trick (0x4B000000 | q is 2^23 + q as a float), fp8 pairs by the hardware
// e4m3x2 -> half2 conversion.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/quant_gemv.h"

namespace tf::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kPerLane = 32;              // weights per lane per step
constexpr int kPerWarp = 32 * kPerLane;   // weights per warp per step

__device__ __forceinline__ float nib(uint32_t word, int j) {
  return __uint_as_float(0x4B000000u | ((word >> (4 * j)) & 15u)) - 8388616.0f;  // q - 8
}

__device__ __forceinline__ float2 fp8x2(uint32_t word, int j) {  // bytes 2j, 2j+1 of word
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * j)), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// x[m][c0 .. c0+8) into v, zeros past k (only the last step of a row can be short).
template <int M>
__device__ __forceinline__ void load_x8(float (&v)[M][8], const float* __restrict__ x, int64_t ldx, int64_t c0,
                                        int64_t k, bool vec) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float* p = x + m * ldx + c0;
    if (vec && c0 + 8 <= k) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
      v[m][0] = a.x; v[m][1] = a.y; v[m][2] = a.z; v[m][3] = a.w;
      v[m][4] = b.x; v[m][5] = b.y; v[m][6] = b.z; v[m][7] = b.w;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[m][j] = c0 + j < k ? __ldg(p + j) : 0.0f;
    }
  }
}

// Output channels per warp: R rows of W share each lane's x loads (x is f32: 8x the
// bytes of a q4 weight, so with one row per warp the L1 traffic for x would exceed the
// HBM traffic for W), and R independent weight loads are in flight per step. R x M
// accumulators stay in registers: R = 4 up to 4 rows of x, 2 above.
template <int M>
constexpr int rows_per_warp() { return M <= 4 ? 4 : 2; }

template <MatrixFormat F, int M>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    quant_gemv_kernel(float* __restrict__ out, int64_t ldo, const float* __restrict__ x, int64_t ldx,
                      const uint8_t* __restrict__ codes, const void* __restrict__ scales, int64_t n, int64_t k,
                      bool accumulate, bool vec) {
  constexpr int R = rows_per_warp<M>();
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * R;
  if (row0 >= n) return;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  if constexpr (F == MatrixFormat::kQ4) {
    const int64_t groups = (k + 63) / 64;
    for (int64_t c = int64_t(lane) * kPerLane; c < groups * 64; c += kPerWarp) {
      uint32_t words[R][4];
      float s[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (row0 + r < n) {
          const uint4 w = __ldg(reinterpret_cast<const uint4*>(codes + (row0 + r) * groups * 32 + c / 2));
          words[r][0] = w.x; words[r][1] = w.y; words[r][2] = w.z; words[r][3] = w.w;
          s[r] = __half2float(static_cast<const __half*>(scales)[(row0 + r) * groups + c / 64]);
        } else {
          words[r][0] = words[r][1] = words[r][2] = words[r][3] = 0x88888888u;
          s[r] = 0.0f;
        }
      }
      float part[R][M];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) part[r][m] = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float xv[M][8];
        load_x8<M>(xv, x, ldx, c + 8 * q, k, vec);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float wj = nib(words[r][q], j);
#pragma unroll
            for (int m = 0; m < M; ++m) part[r][m] = fmaf(wj, xv[m][j], part[r][m]);
          }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = fmaf(s[r], part[r][m], acc[r][m]);
    }
  } else {
    const int64_t gc = (k + 127) / 128;
    // Rows are k bytes apart: 16-byte loads only when every row start is aligned.
    const bool wvec = (k % 16) == 0;
    for (int64_t c = int64_t(lane) * kPerLane; c < k; c += kPerWarp) {
      uint32_t words[R][8];
      float s[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint8_t* crow = codes + (row0 + r) * k;
        if (row0 + r >= n) {
#pragma unroll
          for (int q = 0; q < 8; ++q) words[r][q] = 0;
          s[r] = 0.0f;
          continue;
        }
        s[r] = static_cast<const float*>(scales)[((row0 + r) / 128) * gc + c / 128];
        if (wvec && c + 32 <= k) {
          const uint4 a = __ldg(reinterpret_cast<const uint4*>(crow + c));
          const uint4 b = __ldg(reinterpret_cast<const uint4*>(crow + c) + 1);
          words[r][0] = a.x; words[r][1] = a.y; words[r][2] = a.z; words[r][3] = a.w;
          words[r][4] = b.x; words[r][5] = b.y; words[r][6] = b.z; words[r][7] = b.w;
        } else {
#pragma unroll
          for (int q = 0; q < 8; ++q) {
            uint32_t v = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
              if (c + 4 * q + b < k) v |= uint32_t(crow[c + 4 * q + b]) << (8 * b);
            words[r][q] = v;
          }
        }
      }
      float part[R][M];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) part[r][m] = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float xv[M][8];
        load_x8<M>(xv, x, ldx, c + 8 * q, k, vec);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const float2 w2 = fp8x2(words[r][2 * q + h], j);
#pragma unroll
              for (int m = 0; m < M; ++m) {
                part[r][m] = fmaf(w2.x, xv[m][4 * h + 2 * j], part[r][m]);
                part[r][m] = fmaf(w2.y, xv[m][4 * h + 2 * j + 1], part[r][m]);
              }
            }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) acc[r][m] = fmaf(s[r], part[r][m], acc[r][m]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float v = warp_reduce(acc[r][m], SumOp());
      if (lane == 0 && row0 + r < n) {
        float* o = out + m * ldo + row0 + r;
        *o = accumulate ? *o + v : v;
      }
    }
}

template <MatrixFormat F>
void launch_gemv(cudaStream_t stream, const QuantGemvArgs& a, int64_t r0, int rows, bool vec) {
  float* out = a.out + r0 * a.ldo;
  const float* x = a.x + r0 * a.ldx;
  const auto* c = static_cast<const uint8_t*>(a.codes);
#define TF_QUANT_GEMV_CASE(M)                                                                                       \
  case M: {                                                                                                         \
    const int64_t per_block = int64_t{kWarpsPerBlock} * rows_per_warp<M>();                                        \
    const unsigned blocks = static_cast<unsigned>((a.n + per_block - 1) / per_block);                              \
    quant_gemv_kernel<F, M><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(out, a.ldo, x, a.ldx, c, a.scales, a.n, a.k, \
                                                                         a.accumulate, vec);                        \
    break;                                                                                                          \
  }
  switch (rows) {
    TF_QUANT_GEMV_CASE(1)
    TF_QUANT_GEMV_CASE(2)
    TF_QUANT_GEMV_CASE(3)
    TF_QUANT_GEMV_CASE(4)
    TF_QUANT_GEMV_CASE(5)
    TF_QUANT_GEMV_CASE(6)
    TF_QUANT_GEMV_CASE(7)
    TF_QUANT_GEMV_CASE(8)
    default: break;
  }
#undef TF_QUANT_GEMV_CASE
}

__global__ void dequant_q4_bf16_kernel(__nv_bfloat16* __restrict__ dst, const uint8_t* __restrict__ codes,
                                       const __half* __restrict__ scales, int64_t n, int64_t k) {
  const int64_t groups = (k + 63) / 64, total = n * groups * 32;  // one thread per code byte
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (groups * 32), byte = i % (groups * 32), c = byte * 2;
    const float s = __half2float(scales[r * groups + byte / 32]);
    const uint32_t b = codes[i];
    if (c < k) dst[r * k + c] = __float2bfloat16_rn(nib(b, 0) * s);
    if (c + 1 < k) dst[r * k + c + 1] = __float2bfloat16_rn(nib(b, 1) * s);
  }
}

__global__ void dequant_fp8_bf16_kernel(__nv_bfloat16* __restrict__ dst, const uint8_t* __restrict__ codes,
                                        const float* __restrict__ scales, int64_t n, int64_t k) {
  const int64_t gc = (k + 127) / 128, total = n * k;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(codes[i]), __NV_E4M3);
    dst[i] = __float2bfloat16_rn(__half2float(__half(h)) * scales[(r / 128) * gc + c / 128]);
  }
}

__global__ void f32_to_bf16(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

}  // namespace

void quant_gemv(cudaStream_t stream, const QuantGemvArgs& a) {
  if (a.format == MatrixFormat::kDense)
    throw StatusError(invalid_argument("quant_gemv: the matrix is dense (use matmul)"));
  if (a.m < 0 || a.n < 0 || a.k <= 0 || a.ldx < a.k || a.ldo < a.n)
    throw StatusError(invalid_argument("quant_gemv: bad sizes m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) +
                                       " k=" + std::to_string(a.k)));
  if (a.m == 0 || a.n == 0) return;
  const bool vec = (reinterpret_cast<uintptr_t>(a.x) % 16) == 0 && (a.ldx % 4) == 0;
  for (int64_t r0 = 0; r0 < a.m; r0 += kQuantGemvRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kQuantGemvRows, a.m - r0));
    if (a.format == MatrixFormat::kQ4) {
      launch_gemv<MatrixFormat::kQ4>(stream, a, r0, rows, vec);
    } else {
      launch_gemv<MatrixFormat::kFp8Block>(stream, a, r0, rows, vec);
    }
  }
  check_launch("quant_gemv");
}

void quant_dequantize_bf16(cudaStream_t stream, const Matrix& w, void* dst) {
  const int64_t n = w.size(0), k = w.size(1);
  if (n * k == 0) return;
  auto* d = static_cast<__nv_bfloat16*>(dst);
  if (w.format() == MatrixFormat::kQ4) {
    dequant_q4_bf16_kernel<<<grid_1d(n * ((k + 63) / 64) * 32), 256, 0, stream>>>(
        d, w.codes().data<uint8_t>(), w.scales().data<__half>(), n, k);
  } else if (w.format() == MatrixFormat::kFp8Block) {
    dequant_fp8_bf16_kernel<<<grid_1d(n * k), 256, 0, stream>>>(d, w.codes().data<uint8_t>(),
                                                                 w.scales().data<float>(), n, k);
  } else {
    throw StatusError(invalid_argument("quant_dequantize_bf16: " + w.describe() + " is dense"));
  }
  check_launch("quant_dequantize_bf16");
}

void quant_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) {
  if (Status s = check_matrix(w, "quant_matmul w"); !s.is_ok()) throw StatusError(s);
  if (w.device() != Device::cuda(ctx.device))
    throw StatusError(invalid_argument("quant_matmul: " + w.describe() + " is not on this GPU"));
  check_dev(ctx, "quant_matmul x", x, DType::kF32);
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(invalid_argument("quant_matmul: x " + x.describe() + " does not match weight " + w.describe()));
  const int64_t m = x.numel() / k;
  check_dev(ctx, "quant_matmul out", out, DType::kF32, m * n);
  if (m == 0 || n == 0) return;
  if (m <= ctx.exact_rows) {
    QuantGemvArgs a;
    a.out = out.data<float>();
    a.ldo = n;
    a.x = x.data<float>();
    a.ldx = k;
    a.format = w.format();
    a.codes = w.codes().raw();
    a.scales = w.scales().raw();
    a.m = m;
    a.n = n;
    a.k = k;
    a.accumulate = accumulate;
    quant_gemv(ctx.stream, a);
    return;
  }
  // Prefill: W -> bf16 scratch, x -> bf16, cuBLAS with fp32 accumulation.
  Tensor wb = ctx.scratch(n * k * 2);
  quant_dequantize_bf16(ctx.stream, w, wb.raw());
  Tensor xb = ctx.scratch(m * k * 2);
  f32_to_bf16<<<grid_1d(m * k), 256, 0, ctx.stream>>>(x.data<float>(), xb.data<__nv_bfloat16>(), m * k);
  check_launch("quant_matmul x to bf16");
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st = cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, wb.raw(),
                                         CUDA_R_16BF, int(k), xb.raw(), CUDA_R_16BF, int(k), &beta, out.raw(),
                                         CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw StatusError(internal_error("quant_matmul: cuBLAS failed with status " + std::to_string(int(st))));
}

}  // namespace tf::cuda
