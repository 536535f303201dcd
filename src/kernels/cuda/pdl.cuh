// Programmatic dependent launch (sm_90) in device code, for kernels launched with the attribute
// (launch_kernel_ex.cuh): pdl_launch_dependents() lets the kernel after this one launch now (its
// blocks may run their prologue, e.g. issue weight loads, while this grid finishes); pdl_wait()
// blocks until the kernel before has finished and its writes are visible. Both are no-ops for a
// kernel launched without the attribute.
#pragma once

namespace tf::cuda {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace tf::cuda
