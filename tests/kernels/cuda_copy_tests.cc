// Device-to-device copies on CUDA (copy / copy_many, cuda_copy.cu): every byte of packed and
// row-strided tensors of 1-, 2-, 4- and 8-byte types, odd widths and offsets (so each unit
// width of the kernel runs), more pairs than one launch takes, inside a graph capture, and
// the mismatch errors; the host side of each pair made with the CPU backend's copy.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_copy.h"
#include "cpu_cuda_test.h"

namespace tf {
namespace {

// A host tensor of `dtype` filled with random bytes.
Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& host) {
  const auto* p = static_cast<const uint8_t*>(host.raw());
  return std::vector<uint8_t>(p, p + host.nbytes());
}

using CudaCopy = CpuCudaTest;

TEST_F(CudaCopy, ManyPairsOfEveryWidthAndStrideMatchTheHostCopies) {
  const DType types[] = {DType::kU8, DType::kBF16, DType::kF32, DType::kI64};
  // (rows, cols of the destination's parent, column block [c0, c0 + w)) per pair: packed,
  // odd widths and odd column offsets (1-byte units), more pairs than kMaxCopyRowsJobs.
  struct Case {
    int64_t rows, parent_cols, c0, w;
  };
  const Case cases[] = {{1, 7, 0, 7},   {3, 9, 1, 5},     {5, 64, 0, 64}, {2, 33, 3, 29}, {64, 1024, 0, 1024},
                        {17, 40, 8, 24}, {4, 4096, 0, 4096}, {1, 1, 0, 1},  {6, 130, 2, 127}};
  std::vector<Tensor> dev_dst_parents, dev_dst, dev_src, host_dst_parents, host_dst, host_src;
  uint32_t seed = 1;
  for (DType dt : types)
    for (const Case& c : cases) {
      Tensor src = random_bytes({c.rows, c.w}, dt, seed++);
      Tensor parent = random_bytes({c.rows, c.parent_cols}, dt, seed++);
      host_src.push_back(src);
      Tensor hp = Tensor::empty(parent.shape(), dt);
      hp.copy_from(parent);
      host_dst_parents.push_back(hp);
      dev_src.push_back(up(src));
      dev_dst_parents.push_back(up(parent));
    }
  const size_t n = host_src.size();
  ASSERT_GT(n, static_cast<size_t>(cuda::kMaxCopyRowsJobs));
  std::vector<Tensor*> dsts, hdsts;
  std::vector<const Tensor*> srcs, hsrcs;
  dev_dst.reserve(n);
  host_dst.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Case& c = cases[i % (sizeof(cases) / sizeof(cases[0]))];
    dev_dst.push_back(dev_dst_parents[i].slice(1, c.c0, c.c0 + c.w));
    host_dst.push_back(host_dst_parents[i].slice(1, c.c0, c.c0 + c.w));
    dsts.push_back(&dev_dst[i]);
    srcs.push_back(&dev_src[i]);
    hdsts.push_back(&host_dst[i]);
    hsrcs.push_back(&host_src[i]);
  }
  gpu_->copy_many(dsts, srcs);
  cpu_->copy_many(hdsts, hsrcs);
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(bytes_of(down(dev_dst_parents[i])), bytes_of(host_dst_parents[i]))
        << "pair " << i << " " << host_dst[i].describe();
  // A single copy() takes the same path.
  Tensor one = gpu_->empty(dev_src[3].shape(), dev_src[3].dtype());
  gpu_->copy(one, dev_src[3]);
  EXPECT_EQ(bytes_of(down(one)), bytes_of(host_src[3]));
}

TEST_F(CudaCopy, CapturedCopyManyCopiesOnEveryReplay) {
  Tensor a = up(random_bytes({8, 100}, DType::kF32, 7)), b = up(random_bytes({3, 5}, DType::kBF16, 8));
  Tensor da = gpu_->zeros({8, 100}, DType::kF32), db = gpu_->zeros({3, 5}, DType::kBF16);
  auto g = gpu_->capture([&] { gpu_->copy_many({&da, &db}, {&a, &b}); });
  ASSERT_TRUE(g) << g.status().to_string();
  EXPECT_NE(bytes_of(down(da)), bytes_of(down(a)));  // captured, not run
  for (int rep = 0; rep < 2; ++rep) {
    const Tensor na = random_bytes({8, 100}, DType::kF32, 20 + rep), nb = random_bytes({3, 5}, DType::kBF16, 30 + rep);
    gpu_->copy(a, na);
    gpu_->copy(b, nb);
    ASSERT_TRUE(gpu_->replay(**g).is_ok());
    EXPECT_EQ(bytes_of(down(da)), bytes_of(na));
    EXPECT_EQ(bytes_of(down(db)), bytes_of(nb));
  }
}

TEST_F(CudaCopy, MismatchesAreErrors) {
  Tensor a = gpu_->zeros({2, 3}, DType::kF32), b = gpu_->zeros({3, 2}, DType::kF32);
  EXPECT_THROW(gpu_->copy_many({&a}, {&b}), StatusError);
  EXPECT_THROW(gpu_->copy_many({&a, &b}, {&a}), StatusError);
  Tensor c = gpu_->zeros({2, 3}, DType::kI32);
  EXPECT_THROW(gpu_->copy(c, a), StatusError);
}

}  // namespace
}  // namespace tf
