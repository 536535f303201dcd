// Launch shim for exllamav3's own small-m EXL3 GEMV kernel, for the side-by-side timing
// of issue #8 (scripts/device/exl3_side_by_side.py builds it on the GPU machine with nvcc
// and calls it through ctypes with raw device pointers from torch tensors).
//
// The exllamav3 sources are NOT part of this repository: the script expects the few
// headers the kernel needs in the ignored folder .exl3ref/exllamav3_ext/ (copied from
// turboderp-org/exllamav3, commit in .exl3ref/COMMIT; see the script's header). Only the
// K = 4 instantiations are built (mcg and mul1, m = 1, the "narrow" config that
// exllamav3's heuristic picks at these shapes), launched exactly as its
// exl3_gemv_try_launch does: cooperative, 512 threads, min(n / 32, co-resident blocks).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "util.h"
#include "util.cuh"
#include "quant/exl3_gemv_kernel.cuh"

namespace {

struct Launch {
  void* kernel = nullptr;
  int grid_cap = 0;  // co-resident blocks (occupancy x SMs)
};

Launch prepare(void* kernel) {
  Launch l;
  l.kernel = kernel;
  int per_sm = 0, dev = 0, sms = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 512, 0) != cudaSuccess) return l;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  l.grid_cap = per_sm * sms;
  return l;
}

// m = 1 (MMODE 0), narrow config (CFG 0), shuffle extraction, fp16 output as exllamav3's
// Linear layers produce.
const Launch& kernel_for(int cb) {
  static const Launch mcg = prepare(reinterpret_cast<void*>(exl3_gemv_kernel<4, false, 1, 0, 0, false>));
  static const Launch mul1 = prepare(reinterpret_cast<void*>(exl3_gemv_kernel<4, false, 2, 0, 0, false>));
  return cb == 2 ? mul1 : mcg;
}

}  // namespace

// Returns a cudaError_t (0 = launched). A [1, k] fp16, B [k/16, n/16, 64] int16, C [1, n] fp16,
// A_had [1, k] fp16 scratch, suh [k] / svh [n] fp16, locks: device ints (unused by this kernel).
extern "C" int sbs_exl3_gemv_k4(const void* A, const void* B, void* C, int k, int n, void* locks, const void* suh,
                                void* A_had, const void* svh, int cb, void* stream) {
  const Launch& l = kernel_for(cb);
  if (!l.kernel || l.grid_cap < 1) return static_cast<int>(cudaErrorInvalidConfiguration);
  const half* a_ptr = static_cast<const half*>(A);
  const uint16_t* b_ptr = static_cast<const uint16_t*>(B);
  void* c_ptr = C;
  int size_m = 1, size_k = k, size_n = n;
  int* locks_ptr = static_cast<int*>(locks);
  const half* suh_ptr = static_cast<const half*>(suh);
  half* a_had_ptr = static_cast<half*>(A_had);
  const half* svh_ptr = static_cast<const half*>(svh);
  void* args[] = {&a_ptr, &b_ptr, &c_ptr, &size_m, &size_k, &size_n, &locks_ptr, &suh_ptr, &a_had_ptr, &svh_ptr};
  const int grid = n / 32 < l.grid_cap ? n / 32 : l.grid_cap;
  return static_cast<int>(
      cudaLaunchCooperativeKernel(l.kernel, dim3(grid), dim3(512), args, 0, static_cast<cudaStream_t>(stream)));
}
