// Programmatic dependent launch (sm_90) in device code, for kernels launched with the attribute
// (launch_kernel_ex.cuh): pdl_launch_dependents() lets the kernel after this one launch now (its
// blocks may run their prologue, e.g. issue weight loads, while this grid finishes); pdl_wait()
// blocks until the kernel before has finished and its writes are visible. Both are no-ops for a
// kernel launched without the attribute.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tf::cuda {

// Whether small kernels launched in stream order (no PDL attribute) that often precede a weight-heavy
// kernel (the norms, SwiGLU, the MLA head GEMV) call pdl_launch_dependents() as they start, so that
// a PDL successor (the q4 GEMV's x kernel, hence the GEMV) launches and streams its weights while
// they run. Safe by the PDL contract: a successor reads nothing of its predecessor before its
// wait, and everything older than a kernel launched in order is complete when that kernel starts.
// TF_EARLY_TRIGGER=0: they let it launch only when they end (A/B).
inline bool early_trigger_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TF_EARLY_TRIGGER");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

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
