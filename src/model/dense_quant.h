// Load-time re-quantization of dense projection matrices (DENSE=q4 / fp8) into the
// formats of kernels/api/matrix.h.
//
// fp8: per 128x128 block, scale = amax / 448 (f32) and codes = e4m3(w / scale),
//      rounded to nearest even, saturating: the official FP8 release's recipe, so a
//      BF16 checkpoint becomes what that release would hold. A block of zeros gets
//      scale 1 and zero codes.
// q4:  symmetric 4-bit (q in -8..7, w = q * scale, no zero point), groups of 64
//      along K, one f16 scale per group. The scale is searched per group: every
//      candidate amax / D for D in {7, 7.25, ..., 10} (D = 7 maps the largest
//      weight to +-7 exactly; larger D clips it to spend the levels on the bulk
//      of the group) is rounded to f16, the group quantized with it and the squared
//      error summed; the best candidate is then refitted by least squares with its
//      codes fixed (s = sum(w q) / sum(q^2)) and kept when that lowers the error.
//      All candidates are evaluated with the f16-rounded scale the kernels will use.
// Both split the matrix's rows over ThreadPool::global(); the result does not depend
// on the number of threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/matrix.h"

namespace tf {

// W [N, K] (host, f32 or bf16, any strides) -> the quantized Matrix on the host.
// `what` names the tensor in errors (not 2-D, not a float type, non-finite values).
Expected<Matrix> quantize_fp8_block(const Tensor& w, const std::string& what);
Expected<Matrix> quantize_q4(const Tensor& w, const std::string& what);
// kDense returns `w` itself.
Expected<Matrix> quantize_matrix(const Tensor& w, MatrixFormat format, const std::string& what);

// How DENSE names the projection matrices' format: "q4", "fp8" (quantized), "bf16",
// "f32" (dense) -> the quantized format, nullopt for the dense ones or unknown names.
std::optional<MatrixFormat> dense_quant_format(std::string_view dense);

}  // namespace tf
