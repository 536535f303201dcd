// Scale vectors and grids read from a checkpoint are checked for inf / NaN when they load:
// one damaged value in an EXL3 linear's suh / svh or an FP8 block scale would turn every
// reply into NaN logits (a server that starts and then fails each request), so a damaged
// file is refused at start, naming the tensor, instead. Scales are ~1/16,000 of the bytes.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

// OK when every value of `t` (f32, f16 or bf16, any strides) is finite; else an error
// "<what>: non-finite value <v> at [i, j] (a damaged file?)". Other dtypes are OK.
Status check_finite_values(const Tensor& t, const std::string& what);

}  // namespace tf
