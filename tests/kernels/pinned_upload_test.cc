// Large host -> device copies through pinned staging (kernels/cuda/pinned_upload.h):
// the bytes arrive unchanged whatever the size (0, odd, one piece, many pieces per
// lane), the lane count and the alignment of the source; CudaOps::to_device takes that
// path for packed tensors from 4 MB on (weights at load) and still returns them bit for
// bit; a copy waits for work queued on the `after` stream (a kernel still writing the
// destination must not overwrite it). "[upload]" lines print GB/s from pageable memory.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/pinned_upload.h"

namespace tf {
namespace {

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(4, n - i));
  }
  return v;
}

std::vector<unsigned char> read_back(const void* dev, size_t n) {
  std::vector<unsigned char> v(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(v.data(), dev, n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return v;
}

TEST(PinnedUpload, BytesArriveUnchanged) {
  ASSERT_GT(cuda::device_count(), 0) << "this test needs a CUDA GPU";
  for (unsigned lanes : {1u, 3u, 8u}) {
    auto up = cuda::PinnedUploader::create(0, lanes, size_t{1} << 20);
    ASSERT_TRUE(up.has_value()) << up.status().to_string();
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{1} << 20, (size_t{1} << 20) + 3, size_t{37} << 20}) {
      for (size_t skew : {size_t{0}, size_t{3}}) {  // an unaligned source too
        const std::vector<unsigned char> src = random_bytes(n + skew, static_cast<uint32_t>(n + lanes));
        void* dst = nullptr;
        ASSERT_EQ(cudaMalloc(&dst, n + 1), cudaSuccess);
        const Status st = (*up)->copy(dst, src.data() + skew, n, s);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        const std::vector<unsigned char> got = read_back(dst, n);
        EXPECT_TRUE(n == 0 || std::memcmp(got.data(), src.data() + skew, n) == 0)
            << n << " bytes, " << lanes << " lanes, skew " << skew;
        cudaFree(dst);
      }
    }
    cudaStreamDestroy(s);
  }
}

TEST(PinnedUpload, WaitsForWorkQueuedBefore) {
  ASSERT_GT(cuda::device_count(), 0) << "this test needs a CUDA GPU";
  auto up = cuda::PinnedUploader::create(0, 4, size_t{1} << 20);
  ASSERT_TRUE(up.has_value()) << up.status().to_string();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const size_t n = size_t{64} << 20;
  void *dst = nullptr, *big = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&big, size_t{1} << 30), cudaSuccess);
  const std::vector<unsigned char> src = random_bytes(n, 5);
  // Queued on `s` before the upload: a slow memset of a large buffer, then one of dst.
  // Without the wait the memset of dst would land after (over) the uploaded bytes.
  for (int i = 0; i < 8; ++i) ASSERT_EQ(cudaMemsetAsync(big, i, size_t{1} << 30, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(dst, 0xab, n, s), cudaSuccess);
  const Status st = (*up)->copy(dst, src.data(), n, s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<unsigned char> got = read_back(dst, n);
  EXPECT_EQ(0, std::memcmp(got.data(), src.data(), n));
  cudaFree(dst);
  cudaFree(big);
  cudaStreamDestroy(s);
}

TEST(PinnedUpload, OpsToDeviceKeepsEveryBit) {
  ASSERT_GT(cuda::device_count(), 0) << "this test needs a CUDA GPU";
  auto ops = make_cuda_ops(0);
  ASSERT_TRUE(ops) << ops.status().to_string();
  for (int64_t rows : {int64_t{3}, int64_t{1024}, int64_t{12289}}) {  // 24 KB (staged), 8 MB, 96 MB
    const int64_t cols = 4096;
    const std::vector<unsigned char> bytes = random_bytes(static_cast<size_t>(rows * cols * 2), 11);
    Tensor host = Tensor::empty({rows, cols}, DType::kBF16);
    std::memcpy(host.raw(), bytes.data(), bytes.size());
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor dev = (*ops)->to_device(host);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(dev.dtype(), DType::kBF16);
    ASSERT_EQ(dev.shape(), host.shape());
    const Tensor back = (*ops)->to_host(dev);
    EXPECT_EQ(0, std::memcmp(back.raw(), host.raw(), host.nbytes())) << rows << " rows";
    std::printf("[upload] to_device bf16 [%lld, %lld] %.1f MB: %.2f GB/s\n", static_cast<long long>(rows),
                static_cast<long long>(cols), host.nbytes() / 1e6, host.nbytes() / 1e9 / secs);
  }
  // A large pageable buffer, twice (the second finds the pinned buffers made).
  const size_t n = size_t{1} << 30;
  Tensor host = Tensor::empty({static_cast<int64_t>(n / 2)}, DType::kBF16);
  std::memset(host.raw(), 0x3c, n);
  for (int rep = 0; rep < 2; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor dev = (*ops)->to_device(host);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[upload] to_device 1 GiB from pageable memory: %.2f GB/s\n", n / 1e9 / secs);
    const Tensor back = (*ops)->to_host(dev);
    EXPECT_EQ(0, std::memcmp(back.raw(), host.raw(), n));
  }
}

}  // namespace
}  // namespace tf
