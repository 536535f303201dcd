// Ops::sample_rows on a grid of blocks per row (cuda_sampling_grid.cu): for calls of
// few rows, where one block per row (cuda_sampling.cu) would leave most SMs idle while
// its passes run one after another on a single SM.
#pragma once

#include <span>

#include "kernels/api/sample_rows.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_sampling_row.cuh"

namespace tf::cuda {

// Queues the grid kernel for `jobs` (dev_jobs: the same jobs on the device) and returns
// true, or returns false and queues nothing when the call is not for it: a row asks
// for logprobs, no row is sampled (greedy only), or there are more than 16 rows (or too
// many to give each several blocks), where the one-block kernels are faster. Throws
// StatusError when the launch fails.
bool sample_rows_grid(CudaContext& ctx, std::span<const sampling::RowJob> jobs, const sampling::RowJob* dev_jobs,
                      SampleRowResult* dev_out);

}  // namespace tf::cuda
