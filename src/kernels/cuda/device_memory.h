// Device memory for the CUDA backend: Storage objects whose deleter frees
// with cudaFree, and host<->device copies of whole tensors.
// Allocation happens at load/start time only (weights, cache pool, arenas);
// nothing in a decode step allocates.
#pragma once

#include <memory>

#include "core/status.h"
#include "core/tensor.h"

namespace tf::cuda {

int device_count();  // 0 when no driver or no GPU
// Free memory on GPU `device` now (cudaMemGetInfo), in bytes.
Expected<int64_t> free_bytes(int device);
Expected<std::shared_ptr<Storage>> allocate_device(size_t bytes, int device);
// A contiguous copy of `host` on the device.
Expected<Tensor> to_device(const Tensor& host, int device);
// A contiguous host copy of a device tensor.
Expected<Tensor> to_host(const Tensor& device_tensor);

}  // namespace tf::cuda
