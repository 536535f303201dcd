// Turning CUDA runtime errors into Status values that say what failed where.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace tf::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  return internal_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace tf::cuda

#define TF_CUDA_RETURN_IF_ERROR(call) TF_RETURN_IF_ERROR(::tf::cuda::cuda_status((call), #call))
