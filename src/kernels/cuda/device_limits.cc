#include "kernels/cuda/device_limits.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {
namespace {

// TF_SMEM_PER_BLOCK: a lower limit for tests (0 or unset: none).
size_t smem_cap_from_env() {
  const char* e = std::getenv("TF_SMEM_PER_BLOCK");
  if (e == nullptr || *e == '\0') return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<size_t>(v) : 0;
}

}  // namespace

DeviceLimits read_device_limits(int device) {
  DeviceLimits l;
  l.device = device;
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess) l.cc_major = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess) l.cc_minor = v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess)
    l.smem_per_block = static_cast<size_t>(v);
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) == cudaSuccess) l.sms = v;
  if (const size_t cap = smem_cap_from_env(); cap > 0) l.smem_per_block = std::min(l.smem_per_block, cap);
#if defined(TF_CUDA_SM90A)
  l.wgmma = l.cc_major == 9 && l.cc_minor == 0;
#endif
  return l;
}

const DeviceLimits& device_limits() {
  static std::mutex mu;
  static std::map<int, DeviceLimits> cache;  // node-based: references stay valid
  int device = 0;
  (void)cudaGetDevice(&device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it == cache.end()) it = cache.emplace(device, read_device_limits(device)).first;
  return it->second;
}

bool smem_fits(size_t bytes, size_t static_bytes) { return bytes + static_bytes <= device_limits().smem_per_block; }

Status set_dynamic_smem(const void* kernel, size_t bytes, const char* what) {
  // Per (device, kernel): its static shared memory and the dynamic size it was raised to,
  // so a launch below that costs a map lookup, not two runtime calls.
  struct Raised {
    size_t static_bytes = 0, dynamic = 0;
  };
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, Raised> raised;
  const DeviceLimits& l = device_limits();
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(l.device, kernel);
  auto it = raised.find(key);
  if (it != raised.end() && bytes <= it->second.dynamic) return Status::ok();
  cudaFuncAttributes fa{};
  TF_RETURN_IF_ERROR(cuda_status(cudaFuncGetAttributes(&fa, kernel), what));
  if (bytes + fa.sharedSizeBytes > l.smem_per_block)
    return resource_exhausted(std::string(what) + ": needs " + std::to_string(bytes) + " bytes of dynamic + " +
                              std::to_string(fa.sharedSizeBytes) + " of static shared memory per block; GPU " +
                              std::to_string(l.device) + " (compute " + std::to_string(l.cc_major) + "." +
                              std::to_string(l.cc_minor) + ") allows " + std::to_string(l.smem_per_block));
  TF_RETURN_IF_ERROR(cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what));
  raised[key] = Raised{fa.sharedSizeBytes, bytes};
  return Status::ok();
}

}  // namespace tf::cuda
