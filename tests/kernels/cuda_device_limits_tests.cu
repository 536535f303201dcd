// What the launchers read of the GPU (kernels/cuda/device_limits.h): the shared memory a
// block may use, lowered by TF_SMEM_PER_BLOCK for tests, and set_dynamic_smem's checks.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_memory.h"

namespace tf {
namespace {

__global__ void touch_shared_kernel(int* out, int n) {
  extern __shared__ int sh[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) sh[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) *out = sh[n - 1];
}

// Sets TF_SMEM_PER_BLOCK for one scope and puts the old value back.
class ScopedCap {
 public:
  explicit ScopedCap(const char* value) {
    const char* old = std::getenv("TF_SMEM_PER_BLOCK");
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv("TF_SMEM_PER_BLOCK", value, 1);
  }
  ~ScopedCap() {
    if (had_) setenv("TF_SMEM_PER_BLOCK", old_.c_str(), 1);
    else unsetenv("TF_SMEM_PER_BLOCK");
  }

 private:
  bool had_ = false;
  std::string old_;
};

class CudaDeviceLimits : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU"; }
};

TEST_F(CudaDeviceLimits, ReadsTheDevice) {
  int optin = 0, major = 0, sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  ScopedCap none("");
  const cuda::DeviceLimits l = cuda::read_device_limits(0);
  EXPECT_EQ(l.smem_per_block, static_cast<size_t>(optin));
  EXPECT_EQ(l.cc_major, major);
  EXPECT_EQ(l.sms, sms);
  if (l.wgmma) EXPECT_EQ(l.cc_major * 10 + l.cc_minor, 90);
}

TEST_F(CudaDeviceLimits, TheEnvironmentLowersTheLimitButNeverRaisesIt) {
  int optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  {
    ScopedCap cap("60000");
    EXPECT_EQ(cuda::read_device_limits(0).smem_per_block, 60000u);
  }
  {
    ScopedCap cap("1000000000");
    EXPECT_EQ(cuda::read_device_limits(0).smem_per_block, static_cast<size_t>(optin));
  }
  {
    ScopedCap cap("lots");  // not a number: ignored
    EXPECT_EQ(cuda::read_device_limits(0).smem_per_block, static_cast<size_t>(optin));
  }
}

TEST_F(CudaDeviceLimits, SetDynamicSmemRefusesWhatDoesNotFitAndNamesTheKernel) {
  const size_t limit = cuda::device_limits().smem_per_block;
  const Status too_big = cuda::set_dynamic_smem(touch_shared_kernel, limit + 16, "the probe kernel");
  ASSERT_FALSE(too_big.is_ok());
  EXPECT_EQ(too_big.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.message().find("the probe kernel"), std::string::npos) << too_big.message();
  EXPECT_NE(too_big.message().find("allows " + std::to_string(limit)), std::string::npos) << too_big.message();
  EXPECT_FALSE(cuda::smem_fits(limit + 16));
  EXPECT_TRUE(cuda::smem_fits(limit));

  // Above the 48 KB default and within the limit: raised, and a launch of that size runs.
  const size_t bytes = std::min<size_t>(limit, 64 * 1024);
  ASSERT_TRUE(cuda::set_dynamic_smem(touch_shared_kernel, bytes, "the probe kernel").is_ok());
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  const int n = static_cast<int>(bytes / sizeof(int));
  touch_shared_kernel<<<1, 256, bytes>>>(d, n);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int h = 0;
  ASSERT_EQ(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, n - 1);
  cudaFree(d);
}

// The build's kernels run on this GPU (make_cuda_ops checks this first, so a binary built
// for another GPU fails with a message instead of "no kernel image" at its first launch).
TEST(DeviceLimits, ThisBuildHasKernelsForThisGpu) {
  const cuda::DeviceLimits& l = cuda::device_limits();
  const Status s = cuda::check_kernel_image(l.device);
  EXPECT_TRUE(s.is_ok()) << s.message();
  const std::string caps = cuda::built_compute_caps();
  EXPECT_NE(caps.find(std::to_string(l.cc_major) + "." + std::to_string(l.cc_minor)), std::string::npos) << caps;
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  const Status none = cuda::check_kernel_image(n);  // past the last device
  EXPECT_FALSE(none.is_ok());
  EXPECT_NE(none.message().find("no CUDA device"), std::string::npos) << none.message();
  int cur = -1;
  ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
  EXPECT_EQ(cur, l.device);  // the current device is put back
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // and no error left behind
}

}  // namespace
}  // namespace tf
