// FP8 (e4m3fn / e5m2) weights with block scales -> f32.
//
// Layout (official GLM-5.3-Flash release, glm53-checkpoint-facts.md §1.4/§4, and
// transformers' finegrained_fp8 integration: FP8Linear allocates
// weight_scale_inv [ceil(out/bo), ceil(in/bi)], Fp8Quantize stores 1/scale with
// scale = 448 / block amax, Fp8Dequantize and the triton matmul multiply):
//   w[r, c] = fp8_to_float(code[r, c]) * scale_inv[r / bo, c / bi]
// The last block row / column may be partial (out or in not a multiple of the
// block); it uses its own scale like any other block. Leading dimensions (fused
// experts [E, R, C] with scales [E, ceil(R/bo), ceil(C/bi)]) are batched.
#pragma once

#include <array>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

// Dequantizes rows [row_begin, row_end) of a 2-D FP8 matrix `codes` [R, C]
// (any strides) with its scale grid `scale_inv` [ceil(R/bo), ceil(C/bi)] (f32,
// bf16 or f16) into a new f32 tensor [row_end - row_begin, C]. `what` names the
// tensor in errors (wrong dtype, grid shape or row range).
Expected<Tensor> dequantize_fp8_block_rows(const Tensor& codes, const Tensor& scale_inv,
                                           std::array<int64_t, 2> block, int64_t row_begin, int64_t row_end,
                                           const std::string& what);

// The whole tensor: 2-D, or N-D with leading batch dimensions shared by the scales.
Expected<Tensor> dequantize_fp8_block(const Tensor& codes, const Tensor& scale_inv, std::array<int64_t, 2> block,
                                      const std::string& what);

}  // namespace tf
