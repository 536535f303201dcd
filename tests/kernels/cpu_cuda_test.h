// CpuCudaTest: the fixture of the CUDA parity tests. The CPU backend is the
// reference; the CUDA backend runs on GPU 0 (the tests fail, not skip, without one).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"

namespace tf {

class CpuCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU";
    auto g = make_cuda_ops(0);
    ASSERT_TRUE(g) << g.status().to_string();
    gpu_ = std::move(*g);
    cpu_ = make_cpu_ops();
  }
  Tensor up(const Tensor& h) { return gpu_->to_device(h); }
  Tensor down(const Tensor& d) { return gpu_->to_host(d); }

  std::unique_ptr<Ops> cpu_, gpu_;
};

}  // namespace tf
