// EXL3 entry points of the CUDA backend beyond the Ops interface (tests, benchmarks).
#pragma once

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/api/ops.h"

namespace tf {

// W_hat f16 [k, n] decoded on the GPU of `cuda_ops` (made by make_cuda_ops); the weight
// must be on that GPU. Throws StatusError for another backend or a bad weight.
Tensor cuda_exl3_decode_w_hat(Ops& cuda_ops, const Exl3Weight& w);

}  // namespace tf
