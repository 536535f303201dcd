// The CPU reference of Ops::sample_rows (kernels/api/sample_rows.h): the host
// sampler's math written as plain loops and sorts, with the same "too close to
// call" checks the CUDA kernel makes, so that both backends report the same
// rows as kUndecided up to their summation order.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/api/sample_rows.h"

namespace tf::cpu {

// One row of `n` logits.
[[nodiscard]] SampleRowResult sample_row(const float* logits, int64_t n, const SampleRowParams& p);

// Every row (packed f32 host tensors of any shape: a row is all of its elements);
// throws StatusError on mismatched spans or a tensor that is not a packed host f32 row.
void sample_rows(std::span<SampleRowResult> out, std::span<const Tensor> rows,
                 std::span<const SampleRowParams> params);

}  // namespace tf::cpu
