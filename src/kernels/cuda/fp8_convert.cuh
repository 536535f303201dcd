// FP8 <-> f32 conversion on the device with the same semantics as
// core/dtype.h (OCP FP8, round to nearest even, saturating to +-max, NaN kept):
// the hardware cvt instructions with .satfinite. Tested exhaustively against the
// host conversions in tests/kernels/fp8_convert_test.
#pragma once

#include "core/status.h"
#include "core/tensor.h"

namespace tf::cuda {

// dst (f32) = src (f8_e4m3 / f8_e5m2 / bf16), elementwise, both contiguous on the same device.
Status convert_to_f32(const Tensor& src, Tensor& dst);
// dst (f8_e4m3 / f8_e5m2 / bf16) = src (f32), saturating.
Status convert_from_f32(const Tensor& src, Tensor& dst);

}  // namespace tf::cuda
