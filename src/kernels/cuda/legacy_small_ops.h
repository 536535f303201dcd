// A process-wide switch for benchmarks: while set, the decode-size ops that got
// leaner kernels (rms_norm / gated_rms_norm, mhc_coefficients, moe_route) launch
// the kernels they replaced instead, so cuda_smallops_bench can time "before" and
// "after" in one run. The choice is made when an op is enqueued (a captured graph
// keeps the kernels it recorded). Never set outside benchmarks and tests.
#pragma once

#include <atomic>

namespace tf::cuda {

inline std::atomic<bool>& legacy_small_ops() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace tf::cuda
