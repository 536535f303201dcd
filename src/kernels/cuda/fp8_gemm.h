// Prefill matmul against an fp8 block-scaled Matrix (kernels/api/matrix.h) on FP8
// tensor cores: cuBLASLt's FP8 GEMM with a 128x128 block scale per weight block
// (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, the checkpoint's own scales) and a
// 1x128 scale per activation block (VEC128_32F). The activations are quantized to
// e4m3 on the fly by a small kernel: per row and 128-wide block, scale = amax / 448.
// Host side of fp8_gemm.cu.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/api/matrix.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// out[m, n] (+)= x[m, k] · W^T on the FP8 tensor cores. Returns false (and enqueues
// nothing) when cuBLASLt cannot take the call (no heuristic for the shape, k or n not
// a multiple of 128 or 16, an older library): the caller then uses its BF16 path.
// Throws StatusError when cuBLASLt fails after accepting the call.
// NOT YET CONFIRMED: on the H200 (CUDA 13.0) cuBLASLt accepts the call and runs at
// 700-900 TFLOP/s, but with 384 x 640 weights (3 x 5 scale blocks) its results did not
// match the CPU under any of the four scale orders (max rel err 0.84-1.1), while with
// 512 x 512 (4 x 4 blocks) layout 1 (the checkpoint's order, activations [kb, m]) matched
// (2.5e-2, the e4m3 activations' error). The scale rows are now padded to multiples of
// 4 floats; until a GPU run confirms that, it stays opt-in (TF_FP8_PREFILL=lt); fp8
// prefill otherwise takes fp8_block_gemm.h's kernel or dequantize + cuBLAS.
bool fp8_block_gemm(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate);
bool fp8_block_gemm_enabled();  // TF_FP8_PREFILL=lt

// Calls fp8_block_gemm has taken so far in this process (tests, benchmarks).
int64_t fp8_block_gemm_count();
// Whether the last call wrote f32 directly (else bf16 + an f32 add).
bool fp8_block_gemm_f32_output();

// The order of the two scale tensors handed to cuBLASLt: for the weight's [n/128, k/128]
// blocks and the activations' [m, k/128] ones, whether the block index along k is the
// fastest (else the other dimension's is).
struct Fp8ScaleLayout {
  bool weight_k_fastest = true;  // the checkpoint's own order (no transpose)
  bool act_k_fastest = false;
};
// The default, or TF_FP8_SCALE_LAYOUT=0..3 (bit 0: weight k fastest, bit 1: activations).
Fp8ScaleLayout default_fp8_scale_layout();
// fp8_block_gemm with a given scale layout (tests check every layout against the CPU).
bool fp8_block_gemm_with(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate,
                         const Fp8ScaleLayout& layout);

}  // namespace tf::cuda
