// Quantized dense matrices on the GPU (kernels/cuda/quant_gemv.cu) against the CPU
// reference (kernels/cpu/cpu_quant_linear.cc), and their speed. Part `quant` of
// scripts/device/gpu_tests.sh; label gpu (CI compiles it only).
//
// Parity: fp8 and q4 matrices over awkward shapes (K not a multiple of 64/128 or
// of 4, N not of 8, 1 output row, K = 1), every GEMV row count 1..8 (EXACT_ROWS 8),
// the prefill path (bf16 dequantize + cuBLAS) at 9 and 70 rows, accumulate; the
// GEMV's two-pass case (9..16 rows with EXACT_ROWS 64) in the bench's m = 64.
// GEMV tolerance vs the CPU: 2e-5 of the largest reference magnitude (f32 sums in a
// different order); prefill 2e-2 (x rounded to bf16, as for BF16 weights).
// Row independence: a row alone and inside 2..8-row calls gives the same bits.
// Bench ("[quant-bench]" lines): GEMV GB/s on model shapes at m = 1, 4, 8, 64
// beside the measured HBM copy bandwidth (matrices rotated through > 4x the L2 so
// every call streams from HBM), and the fp8 / q4 prefill path's TFLOP/s.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_probe.h"
#include "model/dense_quant.h"
#include "test_tensors.h"

namespace tf {
namespace {

double max_rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  if (a.size() != b.size()) return INFINITY;
  double worst = 0, scale = 1e-30;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

class CudaQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    ASSERT_GT(count, 0) << "these tests need a CUDA GPU";
    auto g = make_cuda_ops(0, 8);
    ASSERT_TRUE(g) << g.status().to_string();
    gpu_ = std::move(*g);
    cpu_ = make_cpu_ops();
  }
  Matrix quantize(const Tensor& w, MatrixFormat f) {
    Expected<Matrix> m = quantize_matrix(w, f, "w");
    EXPECT_TRUE(m.has_value()) << m.status().to_string();
    return *m;
  }
  Matrix up(const Matrix& m) { return m.with_storage(gpu_->to_device(m.codes()), gpu_->to_device(m.scales())); }
  std::unique_ptr<Ops> cpu_, gpu_;
};

TEST_F(CudaQuant, MatchesTheCpuOverAwkwardShapes) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},    {7, 63},   {33, 65},  {129, 130},
                                                           {64, 256}, {45, 300}, {13, 1030}, {200, 2050}};
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    double worst_gemv = 0, worst_prefill = 0;
    for (auto [n, k] : shapes) {
      const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n + 31 * k), 0.05f), f);
      const Matrix dq = up(q);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
        const bool acc = m % 3 == 0;
        const Tensor x = randn({m, k}, static_cast<uint32_t>(m * 7 + k));
        const Tensor init = randn({m, n}, static_cast<uint32_t>(m + 5));
        Tensor ref = init.contiguous();
        cpu_->matmul(ref, x, q, acc);
        Tensor out = gpu_->to_device(init);
        gpu_->matmul(out, gpu_->to_device(x), dq, acc);
        const double e = max_rel_err(ref, gpu_->to_host(out));
        const double tol = m > 8 ? 2e-2 : 2e-5;  // EXACT_ROWS 8: 9 and 70 rows take the prefill path
        double& worst = m > 8 ? worst_prefill : worst_gemv;
        worst = std::max(worst, e);
        EXPECT_LE(e, tol) << matrix_format_name(f) << " M=" << m << " N=" << n << " K=" << k << (acc ? " acc" : "");
      }
    }
    std::printf("[quant] parity %-3s gemv (M 1..8) max rel err %.3g (tol 2e-05), prefill (M 9, 70) %.3g (tol 2e-02)\n",
                matrix_format_name(f), worst_gemv, worst_prefill);
  }
}

TEST_F(CudaQuant, RowBitsDoNotDependOnTheBatch) {
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    const int64_t n = 97, k = 390;
    const Matrix dq = up(quantize(randn({n, k}, 9, 0.05f), f));
    const Tensor row = randn({1, k}, 10);
    Tensor alone = gpu_->empty({1, n});
    gpu_->matmul(alone, gpu_->to_device(row), dq);
    const Tensor want = gpu_->to_host(alone);
    for (int64_t m = 2; m <= 8; ++m) {
      Tensor x = randn({m, k}, static_cast<uint32_t>(20 + m));
      const int64_t at = m / 2;
      std::copy_n(row.data<float>(), k, x.data<float>() + at * k);
      Tensor out = gpu_->empty({m, n});
      gpu_->matmul(out, gpu_->to_device(x), dq);
      const Tensor got = gpu_->to_host(out).slice(0, at, at + 1).contiguous();
      EXPECT_TRUE(same_bits(got, want)) << matrix_format_name(f) << " row at " << at << " of " << m;
    }
  }
}

TEST_F(CudaQuant, RefusesHostMatrices) {
  const Matrix q = quantize(randn({8, 64}, 1), MatrixFormat::kQ4);
  Tensor out = gpu_->empty({1, 8});
  EXPECT_THROW(gpu_->matmul(out, gpu_->to_device(randn({1, 64}, 2)), q), StatusError);
}

// Seconds per call, averaged over `iters` calls after 3 warm-up calls.
template <typename F>
double seconds_per_call(int iters, F&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn(i);
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

TEST_F(CudaQuant, Bench) {
  auto g64 = make_cuda_ops(0, 64);  // m = 64 through the GEMV (8 passes of 8 rows)
  ASSERT_TRUE(g64) << g64.status().to_string();
  Ops& gemv_ops = **g64;
  auto probe = cuda::probe_device(0);
  ASSERT_TRUE(probe) << probe.status().to_string();
  const double hbm = probe->hbm_gbps;
  std::printf("[quant-bench] %s: measured HBM copy %.0f GB/s, cuBLAS BF16 %.0f TFLOP/s\n", probe->name.c_str(), hbm,
              probe->bf16_tflops);
  struct Shape2 { int64_t n, k; const char* what; };
  const Shape2 shapes[] = {{4096, 12288, "dense down 4096x12288"}, {24576, 4096, "dense gate_up 24576x4096"},
                           {4096, 4096, "o_proj-like 4096x4096"}, {12288, 4096, "q/k/v-like 12288x4096"}};
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (const Shape2& s : shapes) {
      // Random codes are fine for timing; quantize one host matrix, replicate it on the device.
      const Matrix q = quantize(randn({s.n, s.k}, 3, 0.02f), f);
      const int64_t bytes = q.nbytes();
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / bytes + 1));
      std::vector<Matrix> dev;
      for (int i = 0; i < copies; ++i) dev.push_back(up(q));
      for (int64_t m : {1, 4, 8, 64}) {
        const Tensor x = gpu_->to_device(randn({m, s.k}, 4));
        Tensor out = gpu_->empty({m, s.n});
        const double t = seconds_per_call(40, [&](int i) { gemv_ops.matmul(out, x, dev[i % copies]); });
        const double gbps = bytes / t / 1e9;
        std::printf("[quant-bench] gemv %-3s %-26s m=%-3lld %8.1f us  %7.0f GB/s  %5.1f%% of HBM\n",
                    matrix_format_name(f), s.what, static_cast<long long>(m), t * 1e6, gbps, 100 * gbps / hbm);
      }
    }
  }
  // Prefill path: dequantize to bf16 + cuBLAS, at model shapes.
  for (MatrixFormat f : {MatrixFormat::kFp8Block, MatrixFormat::kQ4}) {
    const int64_t n = 12288, k = 4096;
    const Matrix dq = up(quantize(randn({n, k}, 5, 0.02f), f));
    for (int64_t m : {64, 2048, 8192}) {
      const Tensor x = gpu_->to_device(randn({m, k}, 6));
      Tensor out = gpu_->empty({m, n});
      const double t = seconds_per_call(10, [&](int) { gpu_->matmul(out, x, dq); });
      std::printf("[quant-bench] prefill %-3s M=%lld N=%lld K=%lld: %.2f ms, %.0f TFLOP/s (dequant bf16 + cuBLAS)\n",
                  matrix_format_name(f), static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k), t * 1e3, 2.0 * m * n * k / t / 1e12);
    }
  }
}

}  // namespace
}  // namespace tf
