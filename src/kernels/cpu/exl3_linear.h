// The EXL3 linear layer on the CPU: the fp32 reference for x · W over EXL3 weights.
//
//   x1 = zero-extend(x) * suh                       (over the padded k inputs)
//   x2 = FWHT128(x1)                                (blockwise, normalised by 1/sqrt(128))
//   y1 = x2 · W_hat                                 (f32 accumulation, W_hat decoded tile by tile)
//   y  = FWHT128(y1) * svh + bias                   (then cut to the caller's output width)
// which equals x · (diag(suh) · Hb_k · W_hat · Hb_n · diag(svh)) because the
// Sylvester Hadamard is symmetric and orthonormal (/work/shared/spec/exl3.md §3).
// The work is split over 128-column blocks of the output; each output element
// sums over k in a fixed order, so a row's result never depends on the batch.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"

namespace tf::cpu {

// out [T, n_out] f32 = x [T, k_in] f32 · W, with k_in <= k (the rest of the
// padded input is zero) and n_out <= n (padded output columns are dropped).
// Throws StatusError (naming `name`) on bad shapes or a malformed weight.
// (The dense W itself: exl3_dequantize, kernels/api/exl3_decode.h.)
void exl3_matmul(Tensor& out, const Tensor& x, const Exl3Weight& w, const std::string& name = "exl3");

}  // namespace tf::cpu
