// The CUDA Ops::sample_rows (kernels/api/sample_rows.h): one thread block per
// row, or many per row for calls of a few rows (cuda_sampling_grid.h); only the
// SampleRowResult array is copied back to the host.
#pragma once

#include <span>

#include "core/tensor.h"
#include "kernels/api/sample_rows.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Synchronises the stream (the results are read on the host). Throws StatusError
// on mismatched spans or a row that is not a packed f32 tensor on this device.
void sample_rows(CudaContext& ctx, std::span<SampleRowResult> out, std::span<const Tensor> rows,
                 std::span<const SampleRowParams> params);

}  // namespace tf::cuda
