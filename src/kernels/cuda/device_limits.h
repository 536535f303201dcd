// What the GPU running a kernel allows, read once per device: the shared memory one
// block may opt in to, the SM count and the compute capability. Launchers size their
// tiles and pick their kernels from these numbers instead of an H100's, so one source
// tree serves H100 / H200 (sm_90a: 227 KB per block, wgmma), Blackwell datacenter parts
// (sm_100: 227 KB, no wgmma) and the DGX Spark (GB10, sm_121: 99 KB, no wgmma).
//
// TF_SMEM_PER_BLOCK=<bytes> lowers the shared-memory limit (it never raises it): the
// paths a small-shared-memory GPU takes then run, and are tested, on a large one.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace tf::cuda {

struct DeviceLimits {
  int device = 0;
  int cc_major = 0, cc_minor = 0;
  size_t smem_per_block = 0;  // static + dynamic shared memory one block may use (opt-in)
  int sms = 0;
  bool wgmma = false;  // a 9.0 device and sm_90a code in this build (wgmma exists only there)
};

// The current device's limits (read once per device; thread-safe).
const DeviceLimits& device_limits();

// The limits of `device` as read now, TF_SMEM_PER_BLOCK applied (device_limits() caches this).
DeviceLimits read_device_limits(int device);

// Whether `bytes` of dynamic shared memory (beside `static_bytes` of static) fit one
// block on the current device.
bool smem_fits(size_t bytes, size_t static_bytes = 0);

// Lets `kernel` launch with `bytes` of dynamic shared memory: checks the kernel's static
// shared memory plus `bytes` against the device's limit, then raises the kernel's limit
// (cudaFuncAttributeMaxDynamicSharedMemorySize). The error names `what`, the sizes and
// the device's limit.
Status set_dynamic_smem(const void* kernel, size_t bytes, const char* what);

// Whether this build holds kernels `device` can run (kernel_image.cu); the error names the
// GPU, its compute capability and the ones this build was compiled for.
Status check_kernel_image(int device);
// The compute capabilities this build's kernels were compiled for: "9.0", "9.0, 12.1".
std::string built_compute_caps();

template <typename... P>
Status set_dynamic_smem(void (*kernel)(P...), size_t bytes, const char* what) {
  return set_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes, what);
}

}  // namespace tf::cuda
