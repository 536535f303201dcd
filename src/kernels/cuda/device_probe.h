// Measures the two ceilings a roofline needs on one GPU: HBM bandwidth (a large
// device-to-device copy, bytes read + written per second) and the BF16
// tensor-core rate (a cuBLAS 8192^3 GEMM, bf16 in, fp32 accumulate).
//
// Design: a free function with its own buffers and cuBLAS handle, so that
// `tensorfold bench --probe` can call it before (and apart from) the engine;
// nothing here depends on the op backend. Takes ~1-2 s and ~1.5 GiB of GPU memory.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tf::cuda {

struct DeviceProbe {
  std::string name;          // cudaDeviceProp::name
  int64_t total_bytes = 0;   // GPU memory
  double hbm_gbps = 0;       // copy bandwidth, GB/s (1e9 bytes), read + write counted
  double bf16_tflops = 0;    // cuBLAS BF16 GEMM, TFLOP/s
  double copy_bytes = 0;     // bytes per timed copy (read + written)
  int64_t gemm_n = 0;        // n of the n x n x n GEMM
};

// Runs on GPU `device`; the best of several timed repetitions after warm-up.
Expected<DeviceProbe> probe_device(int device = 0);

}  // namespace tf::cuda
