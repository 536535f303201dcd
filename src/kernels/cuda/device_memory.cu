#include "kernels/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

Expected<int64_t> free_bytes(int device) {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free = 0, total = 0;
  TF_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

Expected<std::shared_ptr<Storage>> allocate_device(size_t bytes, int device) {
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  if (bytes > 0) {
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return resource_exhausted("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device) +
                                " failed: " + cudaGetErrorString(err));
    }
  }
  return std::make_shared<Storage>(p, bytes, Device::cuda(device), [](void* q) {
    if (q) cudaFree(q);
  });
}

Expected<Tensor> to_device(const Tensor& host, int device) {
  if (!host.device().is_cpu()) return invalid_argument("to_device: " + host.describe() + " is not on the host");
  const Tensor packed = host.is_contiguous() ? host : host.contiguous();
  TF_ASSIGN_OR_RETURN(auto storage, allocate_device(packed.nbytes(), device));
  TF_CUDA_RETURN_IF_ERROR(cudaMemcpy(storage->data(), packed.raw(), packed.nbytes(), cudaMemcpyHostToDevice));
  return Tensor::on_storage(std::move(storage), 0, packed.shape(), packed.dtype());
}

Expected<Tensor> to_host(const Tensor& t) {
  if (t.device().kind != DeviceKind::kCuda || !t.is_contiguous()) {
    return invalid_argument("to_host: " + t.describe() + " is not a contiguous device tensor");
  }
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(t.device().index));
  TF_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.raw(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace tf::cuda
