// Whether this build holds kernels the GPU can run. The kernels are compiled to machine
// code for the gencode list only (TF_CUDA_GENCODE, no PTX to JIT from), so a binary built
// for an H100 / H200 (sm_90a) has nothing a DGX Spark (sm_121) can run: without this check
// the first launch fails with "no kernel image is available", far from the cause.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/device_limits.h"

namespace tf::cuda {
namespace {

__global__ void kernel_image_probe() {}

}  // namespace

std::string built_compute_caps() {
  std::string out;
#ifdef __CUDA_ARCH_LIST__
  for (const int arch : {__CUDA_ARCH_LIST__}) {  // e.g. 900, 1210
    if (!out.empty()) out += ", ";
    out += std::to_string(arch / 100) + "." + std::to_string(arch / 10 % 10);
  }
#endif
  return out.empty() ? "unknown" : out;
}

Status check_kernel_image(int device) {
  int prev = 0;
  (void)cudaGetDevice(&prev);
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable("no CUDA device " + std::to_string(device));
  }
  cudaFuncAttributes fa{};
  const cudaError_t e = cudaFuncGetAttributes(&fa, kernel_image_probe);
  (void)cudaGetLastError();  // clear it: later calls must not see this error
  (void)cudaSetDevice(prev);
  if (e == cudaSuccess) return Status::ok();
  cudaDeviceProp p{};
  const bool named = cudaGetDeviceProperties(&p, device) == cudaSuccess;
  return unimplemented(
      "GPU " + std::to_string(device) + (named ? std::string(" (") + p.name + ", compute capability " +
                                                     std::to_string(p.major) + "." + std::to_string(p.minor) + ")"
                                               : std::string()) +
      " cannot run this build's CUDA kernels, compiled for compute capability " + built_compute_caps() + " (" +
      cudaGetErrorString(e) + "). Rebuild on a machine with this GPU (scripts/prepare.sh --rebuild: "
      "TF_CUDA_GENCODE=auto compiles for the GPUs it finds), or configure with "
      "-DTF_CUDA_GENCODE=\"-gencode=arch=compute_" + (named ? std::to_string(p.major) + std::to_string(p.minor) : "XY") +
      ",code=sm_" + (named ? std::to_string(p.major) + std::to_string(p.minor) : "XY") + "\".");
}

}  // namespace tf::cuda
