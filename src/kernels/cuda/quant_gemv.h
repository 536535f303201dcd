// Matmul against quantized matrices (fp8 block-scaled, q4; kernels/api/matrix.h)
// on the GPU, host side.
//
// Decode (rows <= ctx.exact_rows): quant_gemv, one warp per 2-4 output channels, each
// lane streaming 32 weights of each per step (q4: one 16-byte load, fp8: two) and
// dequantizing them in registers; f32 activations, f32 accumulation, a fixed
// butterfly over the warp. A row's result therefore depends only on that row of x
// (the contract of kernels/cuda/small_gemm.h), and the weights are read once per
// call for up to kQuantGemvRows rows (more rows: one pass per 8).
// Prefill (more rows): the matrix is dequantized to BF16 in device scratch and
// multiplied by cuBLAS (x rounded to bf16, fp32 accumulation), as for BF16 weights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/api/matrix.h"

namespace tf::cuda {

inline constexpr int kQuantGemvRows = 8;  // rows per weight pass

struct QuantGemvArgs {
  float* out = nullptr;  // [m, ldo]
  int64_t ldo = 0;
  const float* x = nullptr;  // [m, ldx]
  int64_t ldx = 0;
  MatrixFormat format = MatrixFormat::kQ4;
  const void* codes = nullptr;   // device, layout of matrix.h
  const void* scales = nullptr;  // device
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;
};

// Enqueues out = x · W^T (or +=) on `stream`; throws StatusError on bad arguments.
void quant_gemv(cudaStream_t stream, const QuantGemvArgs& a);

// Dequantizes the whole matrix into `dst` (device bf16 [n, k]) on `stream`.
void quant_dequantize_bf16(cudaStream_t stream, const Matrix& w, void* dst);

}  // namespace tf::cuda
