// Device-to-device copies of row-strided tensors as one kernel launch (copy_rows).
//
// Why a kernel and not cudaMemcpy2DAsync: inside a CUDA graph a memcpy becomes a copy-engine
// node, and a chain of them costs ~1.7 us each between two kernels (H200 kernel trace run1s11:
// the ~10 output copies that end every captured decode segment left the GPU idle ~17 us per
// layer, ~0.7 ms per 45-layer token). One kernel copies every pair at once.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_copy.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocksPerJob = 1024;

struct CopyJobs {
  CopyRowsJob job[kMaxCopyRowsJobs];
};

// Widest unit (16, 8, 4, 2 or 1 bytes) that divides every address and length of the job.
__device__ __forceinline__ int unit_bytes(const CopyRowsJob& j) {
  const uint64_t bits = reinterpret_cast<uint64_t>(j.dst) | reinterpret_cast<uint64_t>(j.src) |
                        static_cast<uint64_t>(j.row_bytes) | static_cast<uint64_t>(j.dst_pitch) |
                        static_cast<uint64_t>(j.src_pitch);
  return (bits & 15) == 0 ? 16 : (bits & 7) == 0 ? 8 : (bits & 3) == 0 ? 4 : (bits & 1) == 0 ? 2 : 1;
}

template <typename U>
__device__ __forceinline__ void copy_units(const CopyRowsJob& j) {
  const int64_t per_row = j.row_bytes / static_cast<int64_t>(sizeof(U));
  const int64_t total = per_row * j.rows;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / per_row, c = e - r * per_row;
    reinterpret_cast<U*>(j.dst + r * j.dst_pitch)[c] = reinterpret_cast<const U*>(j.src + r * j.src_pitch)[c];
  }
}

// blockIdx.y picks the job; the blocks of x stride over its units.
__global__ void copy_rows_kernel(CopyJobs jobs) {
  const CopyRowsJob& j = jobs.job[blockIdx.y];
  switch (unit_bytes(j)) {
    case 16: copy_units<uint4>(j); break;
    case 8: copy_units<uint2>(j); break;
    case 4: copy_units<uint32_t>(j); break;
    case 2: copy_units<uint16_t>(j); break;
    default: copy_units<uint8_t>(j); break;
  }
}

}  // namespace

bool copy_kernel_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TF_COPY_KERNEL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

void copy_rows(CudaContext& ctx, const CopyRowsJob* jobs, int n) {
  for (int first = 0; first < n; first += kMaxCopyRowsJobs) {
    const int count = std::min(kMaxCopyRowsJobs, n - first);
    CopyJobs p{};
    unsigned blocks = 1;
    for (int i = 0; i < count; ++i) {
      const CopyRowsJob& j = jobs[first + i];
      if (j.rows < 0 || j.row_bytes < 0 || j.dst_pitch < j.row_bytes || j.src_pitch < j.row_bytes)
        throw StatusError(internal_error("copy_rows: a job with rows " + std::to_string(j.rows) + ", row bytes " +
                                         std::to_string(j.row_bytes) + " and pitches " + std::to_string(j.dst_pitch) +
                                         "/" + std::to_string(j.src_pitch)));
      p.job[i] = j;
      const int64_t units = (j.rows * j.row_bytes + 15) / 16;
      blocks = std::max(blocks, static_cast<unsigned>(std::min<int64_t>((units + kThreads - 1) / kThreads, kMaxBlocksPerJob)));
    }
    copy_rows_kernel<<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, ctx.stream>>>(p);
    check_launch("copy");
  }
}

}  // namespace tf::cuda
