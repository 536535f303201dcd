// Device-to-device copies of row-strided byte blocks, many in one kernel (cuda_copy.cu):
// what the CUDA backend's copy / copy_many run when both sides are on its GPU.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// rows rows of row_bytes bytes; row r at dst + r * dst_pitch and src + r * src_pitch.
struct CopyRowsJob {
  char* dst = nullptr;
  const char* src = nullptr;
  int64_t rows = 0, row_bytes = 0, dst_pitch = 0, src_pitch = 0;
};

// Jobs per kernel launch (more are split into several launches).
constexpr int kMaxCopyRowsJobs = 16;

// Whether device-to-device copies run as copy_rows kernels (default) or as cudaMemcpy2DAsync
// (TF_COPY_KERNEL=0: the copy-engine path, for before/after measurements). Read once.
bool copy_kernel_enabled();

// Copies every job on ctx.stream (one launch per kMaxCopyRowsJobs jobs); the jobs must not
// overlap. Throws StatusError on a malformed job or a failed launch.
void copy_rows(CudaContext& ctx, const CopyRowsJob* jobs, int n);

}  // namespace tf::cuda
