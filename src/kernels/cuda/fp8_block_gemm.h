// Our own FP8 block-scaled tensor-core GEMM for prefill (sm_89+ mma.sync e4m3):
//
//   out[m, n] (+)= sum_kb  sx[m, kb] * sw[n/128, kb] * sum_{k in block kb} xq[m, k] * wq[n, k]
//
// where wq / sw are an fp8 block-scaled Matrix as stored (kernels/api/matrix.h: e4m3
// codes [N, K] row-major, f32 scales [ceil(N/128), ceil(K/128)]) and xq / sx are the
// activations quantized per (row, 128-wide K block) to e4m3 with scale = amax / 448.
// That is the exact block-scaled product: the f32 partial sum of each 128-K block is
// taken from the tensor cores, scaled by both blocks' scales and added to an f32
// accumulator, so no scale is ever folded into the fp8 operands.
//
// The kernels tile 128 x 128 outputs per 256-thread block with a 128-byte K step (= one
// scale block, so one weight scale per step and block) and a 4-stage cp.async pipeline
// into 128-byte-swizzled shared memory; the MMAs are wgmma m64n128k32 e4m3 (2
// warpgroups, operands read from shared memory through descriptors) or, as a
// cross-check, ldmatrix + mma.sync.m16n8k32.e4m3 (8 warps of 64 x 32). M, N and K may
// be anything: rows past M / N and K bytes past K load as zeros. The weight rows must be
// 16-byte multiples and 16-byte aligned for the direct path; otherwise the codes are
// first copied into a padded scratch (rare; real checkpoints have K % 128 == 0).
//
// A row's result does not depend on the other rows here either (each output is one
// thread's fixed-order sum), though prefill does not require it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/api/matrix.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// The two kernels: wgmma (sm_90a's native FP8 tensor-core path, the default there) and
// mma.sync m16n8k32 (FP8 natively on sm_89 / sm_120 / sm_121, the only kernel where
// wgmma is missing; on sm_90 ptxas lowers it to f16 MMAs, so it is slower there and
// kept as an independent cross-check). kWgmma asks for wgmma where it exists.
enum class Fp8GemmKernel { kWgmma, kMmaSync };

// Raw operands of one block-scaled GEMM (device pointers).
struct Fp8BlockGemmArgs {
  float* out = nullptr;  // [m, ldo] f32
  int64_t ldo = 0;
  const uint8_t* xq = nullptr;  // [m, ldx] e4m3; ldx % 16 == 0, bytes [k, ldx) are zero
  int64_t ldx = 0;
  const float* sx = nullptr;    // [m, ceil(k/128)] f32
  const uint8_t* wq = nullptr;  // [n, ldw] e4m3; ldw % 16 == 0, bytes [k, ldw) are zero
  int64_t ldw = 0;
  const float* sw = nullptr;  // [ceil(n/128), ceil(k/128)] f32
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;  // out += instead of out =
  Fp8GemmKernel kernel = Fp8GemmKernel::kWgmma;
};

// Enqueues the GEMM; throws StatusError on a bad argument (alignment, strides).
void fp8_block_gemm_launch(cudaStream_t stream, const Fp8BlockGemmArgs& a);

// x [m, k] f32 (row stride ldx_f32) -> xq [m, ldq] e4m3 (zeros in [k, ldq)) and sx
// [m, ceil(k/128)]: per row and 128 block, scale = amax / 448 (1 for an all-zero
// block) and code = e4m3(x / scale), saturating.
void fp8_quantize_activations(cudaStream_t stream, uint8_t* xq, int64_t ldq, float* sx, const float* x,
                              int64_t ldx_f32, int64_t m, int64_t k);

// Row stride of the quantized activations for a given k: k rounded up to 16.
inline int64_t fp8_activation_stride(int64_t k) { return (k + 15) / 16 * 16; }

// out (+)= x · W^T for an fp8 block-scaled W on the GPU: quantizes x into scratch,
// pads W into scratch if its rows are not 16-byte multiples, runs the GEMM. x, out f32.
void fp8_block_gemm_mma(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate);

// The kernel fp8_block_gemm_mma uses: wgmma, or mma.sync with TF_FP8_KERNEL=mmasync.
Fp8GemmKernel default_fp8_gemm_kernel();

// Calls fp8_block_gemm_mma has taken so far in this process (tests).
int64_t fp8_block_gemm_mma_count();

// Which path quant_matmul takes for fp8 prefill (TF_FP8_PREFILL): "mma" (ours, the
// default), "dequant" (W -> bf16 + cuBLAS) or "lt" (cuBLASLt, fp8_gemm.h).
enum class Fp8PrefillPath { kMma, kDequant, kLt };
Fp8PrefillPath fp8_prefill_path();

}  // namespace tf::cuda
