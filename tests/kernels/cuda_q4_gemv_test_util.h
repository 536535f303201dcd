// What the q4 decode GEMV tests share (cuda_quant_bop_tests.cc, cuda_quant_ring_tests.cc): a fixture
// with both backends, the quantizer and the upload, the arguments of one call with its workspace, and
// the bench helpers (graph-replayed timing, random q4 matrices for timing only).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/quant_gemv.h"
#include "model/dense_quant.h"

namespace tf::q4test {

class CudaQ4GemvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    ASSERT_GT(count, 0) << "these tests need a CUDA GPU";
    auto g = make_cuda_ops(0, 8);
    ASSERT_TRUE(g) << g.status().to_string();
    gpu_ = std::move(*g);
    cpu_ = make_cpu_ops();
    stream_ = cuda_ops_stream(*gpu_);
    sms_ = cuda::current_sm_count();
  }
  Matrix quantize(const Tensor& w) {
    Expected<Matrix> m = quantize_matrix(w, MatrixFormat::kQ4, "w");
    EXPECT_TRUE(m.has_value()) << m.status().to_string();
    return *m;
  }
  Matrix up(const Matrix& m) { return m.with_storage(gpu_->to_device(m.codes()), gpu_->to_device(m.scales())); }
  // Args of one slice-path call, no kernel chosen (the workspace sized for it in ws_).
  cuda::QuantGemvArgs q4_args(const Matrix& dq, float* out, int64_t ldo, const float* x, int64_t ldx, int64_t m,
                              int blocks_per_sm = 0) {
    cuda::QuantGemvArgs a;
    a.out = out;
    a.ldo = ldo;
    a.x = x;
    a.ldx = ldx;
    a.format = MatrixFormat::kQ4;
    a.codes = dq.codes().raw();
    a.scales = dq.scales().raw();
    a.m = m;
    a.n = dq.size(0);
    a.k = dq.size(1);
    a.sm_count = sms_;
    a.legacy = true;
    a.blocks_per_sm = blocks_per_sm;
    ws_ = gpu_->empty(
        {std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, a.n, a.k, sms_, blocks_per_sm) / 4)});
    a.workspace = ws_.data<float>();
    return a;
  }
  std::unique_ptr<Ops> cpu_, gpu_;
  cudaStream_t stream_ = nullptr;
  int sms_ = 0;
  Tensor ws_;
};

// Seconds per call of fn(i), averaged over `iters` calls after 3 warm-up calls.
template <typename F>
double seconds_per_call(int iters, F&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn(i);
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Seconds per call of `fn` captured `per_graph` times into one CUDA graph and replayed (NAN if the
// capture fails).
template <typename F>
double graph_seconds(cudaStream_t stream, int per_graph, F&& fn) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return NAN;
  for (int i = 0; i < per_graph; ++i) fn(i);
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return NAN;
  }
  const double t = seconds_per_call(5, [&](int) { cudaGraphLaunch(exec, stream); }) / per_graph;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return t;
}

// Random q4 codes, scales 2^-7 (timing only).
inline Matrix random_q4(int64_t n, int64_t k, uint64_t seed) {
  const int64_t g = (k + 63) / 64;
  Tensor codes = Tensor::empty({n, g * 32}, DType::kU8);
  auto* bytes = static_cast<uint8_t*>(codes.raw());
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < codes.nbytes(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    bytes[i] = static_cast<uint8_t>(s >> 24);
  }
  Tensor scales = Tensor::empty({n, g}, DType::kF16);
  for (int64_t i = 0; i < n * g; ++i) scales.data<uint16_t>()[i] = 0x2000;
  return Matrix::q4(codes, scales, k);
}

}  // namespace tf::q4test
