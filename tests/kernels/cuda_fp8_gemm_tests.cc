// Our FP8 block-scaled tensor-core GEMM (kernels/cuda/fp8_block_gemm.h). Part `fp8gemm`
// of scripts/device/gpu_tests.sh; label gpu (CI compiles it only).
//
// Exactness: the GPU quantizes x; its codes and scales are read back and the product of
// exactly those operands (and the weight's own codes and scales) is formed on the host
// in float64. The kernel differs from it only by how the tensor cores and the f32
// accumulator round: the error of one output is bounded by (number of roundings) x
// (unit roundoff) x sum_k |term_k|, so it is measured against sum_k |term_k| ("err /
// sum|terms|"), tolerance 1e-3: f32 accumulation over K <= 4096 terms in 32-term mma
// chains and 128-term blocks stays below 1e-5 there, and Hopper's FP8 tensor cores
// (which keep ~14 mantissa bits inside an mma chain) below ~5e-4; a wrong scale,
// fragment or tile edge gives errors of order 1.
// Model level: against the CPU (f32 x · dequantized W) and against the bf16 dequant
// path, both within 5e-2 of the largest output (the activations' e4m3 rounding, 2^-4
// relative per element, is the whole difference; it measures ~2-3e-2).
// Shapes: M = 1 .. 300 (partial row tiles), N, K not multiples of 128, K not of 16
// (padded-codes path), accumulate; a row's bits do not depend on the other rows.
// Bench ("[fp8gemm-bench]" lines): TFLOP/s at M = 1024, 8192 for N x K in {4096x4096,
// 8192x4096, 4096x8192, 24576x4096}, ours next to the bf16 dequant + cuBLAS path in the
// same run, with their outputs compared (max rel err) so the timed calls are checked too.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_block_gemm.h"
#include "model/dense_quant.h"
#include "test_tensors.h"

namespace tf {
namespace {

// Sets TF_FP8_PREFILL for a scope.
struct PrefillPath {
  explicit PrefillPath(const char* v) { ::setenv("TF_FP8_PREFILL", v, 1); }
  ~PrefillPath() { ::unsetenv("TF_FP8_PREFILL"); }
};

class Fp8Gemm : public ::testing::Test {
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
  }
  // W [n, k] with block magnitudes varying by (row block, column block), so that a
  // misplaced weight scale shows.
  Matrix make_weight(int64_t n, int64_t k, uint32_t seed) {
    Tensor w = randn({n, k}, seed, 0.05f);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        w.data<float>()[r * k + c] *= 1.0f + 7.0f * static_cast<float>((r / 128 + 2 * (c / 128)) % 5);
    Expected<Matrix> q = quantize_matrix(w, MatrixFormat::kFp8Block, "w");
    EXPECT_TRUE(q.has_value()) << q.status().to_string();
    return *q;
  }
  // x [m, k] with magnitudes varying by (row, column block): a misplaced activation
  // scale shows.
  Tensor make_x(int64_t m, int64_t k, uint32_t seed) {
    Tensor x = randn({m, k}, seed);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c)
        x.data<float>()[r * k + c] *= 1.0f + 3.0f * static_cast<float>((r + 3 * (c / 128)) % 4);
    return x;
  }
  Matrix up(const Matrix& m) {
    return m.with_storage(gpu_->to_device(m.codes()), gpu_->to_device(m.scales()));
  }
  void check_exact(cuda::Fp8GemmKernel kernel);
  std::unique_ptr<Ops> cpu_, gpu_;
  cudaStream_t stream_ = nullptr;
};

// Runs `kernel` on each case against the float64 product of the quantized operands.
void Fp8Gemm::check_exact(cuda::Fp8GemmKernel kernel) {
  const bool wg = kernel == cuda::Fp8GemmKernel::kWgmma;
  struct Case {
    int64_t m, n, k;
    bool acc;
  };
  const std::vector<Case> cases = {{1, 128, 128, false},    {48, 384, 640, false},  {130, 257, 400, true},
                                   {3, 100, 1000, false},   {200, 300, 1000, true}, {129, 1031, 2048, false},
                                   {300, 136, 4096, false}, {64, 4096, 4096, true}};
  double worst = 0, worst_max = 0;
  for (const Case& c : cases) {
    const Matrix q = make_weight(c.n, c.k, static_cast<uint32_t>(c.n * 7 + c.k));
    const Matrix dq = up(q);
    const Tensor x = make_x(c.m, c.k, static_cast<uint32_t>(c.m + c.k));
    const Tensor init = randn({c.m, c.n}, static_cast<uint32_t>(c.m * 5 + 1));
    const int64_t ldq = cuda::fp8_activation_stride(c.k), kb = (c.k + 127) / 128;
    const Tensor xd = gpu_->to_device(x);
    Tensor xq = gpu_->empty({(c.m * ldq + 3) / 4});
    Tensor sx = gpu_->empty({c.m * kb});
    cuda::fp8_quantize_activations(stream_, static_cast<uint8_t*>(xq.raw()), ldq, sx.data<float>(),
                                   xd.data<float>(), c.k, c.m, c.k);
    // W through a padded copy when its rows are not 16-byte multiples (as the dispatch does).
    const int64_t ldw = ldq;
    std::vector<uint8_t> wpad(static_cast<size_t>(c.n * ldw), 0);
    const auto* wcodes = static_cast<const uint8_t*>(q.codes().raw());
    for (int64_t r = 0; r < c.n; ++r) std::memcpy(&wpad[r * ldw], wcodes + r * c.k, c.k);
    Tensor wpad_host = Tensor::empty({(c.n * ldw + 3) / 4}, DType::kF32);
    std::memcpy(wpad_host.raw(), wpad.data(), wpad.size());
    const Tensor wd = gpu_->to_device(wpad_host);
    const Tensor xq_h = gpu_->to_host(xq), sx_h = gpu_->to_host(sx);
    const auto* xb = static_cast<const uint8_t*>(xq_h.raw());
    const float* xs = sx_h.data<float>();
    const float* ws = q.scales().data<float>();
    // The codes past k must be zero (the kernel reads them).
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = c.k; i < ldq; ++i) ASSERT_EQ(xb[r * ldq + i], 0) << "padding of row " << r;
    std::vector<float> wdec(static_cast<size_t>(c.n * c.k)), xdec(static_cast<size_t>(c.m * c.k));
    for (int64_t i = 0; i < c.n * c.k; ++i) wdec[i] = fp8_e4m3_to_float(wcodes[i]);
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t i = 0; i < c.k; ++i) xdec[r * c.k + i] = fp8_e4m3_to_float(xb[r * ldq + i]);
    double ref_max = 0;
    std::vector<double> ref(static_cast<size_t>(c.m * c.n)), mag(ref.size());
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t col = 0; col < c.n; ++col) {
        double sum = c.acc ? init.data<float>()[r * c.n + col] : 0.0, abs_sum = std::fabs(sum);
        for (int64_t b = 0; b < kb; ++b) {
          double block = 0, block_abs = 0;
          for (int64_t i = b * 128; i < std::min(c.k, b * 128 + 128); ++i) {
            const double p = double(xdec[r * c.k + i]) * wdec[col * c.k + i];
            block += p;
            block_abs += std::fabs(p);
          }
          const double s = double(xs[r * kb + b]) * ws[(col / 128) * kb + b];
          sum += block * s;
          abs_sum += block_abs * s;
        }
        ref[r * c.n + col] = sum;
        mag[r * c.n + col] = abs_sum;
        ref_max = std::max(ref_max, std::fabs(sum));
      }
    {
      Tensor out = gpu_->to_device(init);
      cuda::Fp8BlockGemmArgs a;
      a.out = out.data<float>();
      a.ldo = c.n;
      a.xq = static_cast<const uint8_t*>(xq.raw());
      a.ldx = ldq;
      a.sx = sx.data<float>();
      a.wq = static_cast<const uint8_t*>(wd.raw());
      a.ldw = ldw;
      a.sw = dq.scales().data<float>();
      a.m = c.m;
      a.n = c.n;
      a.k = c.k;
      a.accumulate = c.acc;
      a.kernel = kernel;
      cuda::fp8_block_gemm_launch(stream_, a);
      const Tensor got = gpu_->to_host(out);
      double case_err = 0, case_max = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double g = got.data<float>()[i];
        const double d = std::isfinite(g) ? std::fabs(g - ref[i]) : INFINITY;
        case_err = std::max(case_err, d / std::max(mag[i], 1e-30));
        case_max = std::max(case_max, d);
      }
      case_max /= std::max(ref_max, 1e-30);
      worst = std::max(worst, case_err);
      worst_max = std::max(worst_max, case_max);
      EXPECT_LE(case_err, 1e-3) << (wg ? "wgmma" : "mma.sync") << " M=" << c.m << " N=" << c.n << " K=" << c.k
                                << (c.acc ? " acc" : "");
      std::printf(
          "[fp8gemm] exact %-8s M=%-4lld N=%-5lld K=%-5lld%s err/sum|terms| %.3g, err/max|ref| %.3g\n",
          wg ? "wgmma" : "mma.sync", static_cast<long long>(c.m), static_cast<long long>(c.n),
          static_cast<long long>(c.k), c.acc ? " acc" : "    ", case_err, case_max);
    }
  }
  std::printf("[fp8gemm] exact operands %-8s: worst err/sum|terms| %.3g (tol 1e-3), err/max|ref| %.3g\n",
              wg ? "wgmma" : "mma.sync", worst, worst_max);
}

// mma.sync first: should the wgmma kernel fault, the cross-check's verdict is already out.
TEST_F(Fp8Gemm, MmaSyncMatchesTheExactProductOfItsQuantizedOperands) {
  check_exact(cuda::Fp8GemmKernel::kMmaSync);
}
TEST_F(Fp8Gemm, WgmmaMatchesTheExactProductOfItsQuantizedOperands) {
  check_exact(cuda::Fp8GemmKernel::kWgmma);
}

TEST_F(Fp8Gemm, MatchesTheCpuAndTheDequantPath) {
  double worst_cpu = 0, worst_deq = 0;
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {48, 384, 640}, {9, 200, 2050}, {130, 257, 1000}, {256, 1536, 4096}}) {
    const Matrix q = make_weight(n, k, static_cast<uint32_t>(n + 3 * k));
    const Matrix dq = up(q);
    const Tensor x = make_x(m, k, static_cast<uint32_t>(m * 11 + k));
    const Tensor xd = gpu_->to_device(x);
    for (bool acc : {false, true}) {
      const Tensor init = randn({m, n}, static_cast<uint32_t>(m + n));
      Tensor want = init.contiguous();
      cpu_->matmul(want, x, q, acc);
      Tensor deq = gpu_->to_device(init);
      const int64_t calls = cuda::fp8_block_gemm_mma_count();
      {
        PrefillPath p("dequant");
        gpu_->matmul(deq, xd, dq, acc);
      }
      EXPECT_EQ(cuda::fp8_block_gemm_mma_count(), calls) << "TF_FP8_PREFILL=dequant took our kernel";
      const Tensor deq_h = gpu_->to_host(deq);
      for (const char* kernel : {"wgmma", "mmasync"}) {
        Tensor mine = gpu_->to_device(init);
        const int64_t c0 = cuda::fp8_block_gemm_mma_count();
        {
          PrefillPath p("mma");
          ::setenv("TF_FP8_KERNEL", kernel, 1);
          gpu_->matmul(mine, xd, dq, acc);
          ::unsetenv("TF_FP8_KERNEL");
        }
        EXPECT_EQ(cuda::fp8_block_gemm_mma_count(), c0 + 1) << "TF_FP8_PREFILL=mma did not take our kernel";
        const Tensor got = gpu_->to_host(mine);
        const double e_cpu = rel_err_to_max_ref(want, got), e_deq = rel_err_to_max_ref(deq_h, got);
        worst_cpu = std::max(worst_cpu, e_cpu);
        worst_deq = std::max(worst_deq, e_deq);
        EXPECT_LE(e_cpu, 5e-2) << kernel << " vs cpu M=" << m << " N=" << n << " K=" << k
                               << (acc ? " acc" : "");
        EXPECT_LE(e_deq, 5e-2) << kernel << " vs dequant M=" << m << " N=" << n << " K=" << k
                               << (acc ? " acc" : "");
      }
    }
  }
  std::printf("[fp8gemm] model path: max rel err vs cpu %.3g, vs bf16 dequant path %.3g (tol 5e-2)\n",
              worst_cpu, worst_deq);
}

TEST_F(Fp8Gemm, RowBitsDoNotDependOnTheOtherRows) {
  const int64_t n = 300, k = 700;
  const Matrix dq = up(make_weight(n, k, 5));
  const Tensor row = make_x(1, k, 6);
  PrefillPath p("mma");
  Tensor want;
  for (int64_t m : {9, 200}) {
    Tensor x = make_x(m, k, static_cast<uint32_t>(7 + m));
    const int64_t at = m - 2;
    std::copy_n(row.data<float>(), k, x.data<float>() + at * k);
    Tensor out = gpu_->empty({m, n});
    gpu_->matmul(out, gpu_->to_device(x), dq);
    const Tensor got = gpu_->to_host(out).slice(0, at, at + 1).contiguous();
    if (want.is_null()) {
      want = got;
    } else {
      EXPECT_TRUE(same_bits(got, want)) << "row " << at << " of " << m;
    }
  }
}

TEST_F(Fp8Gemm, RefusesBadStrides) {
  cuda::Fp8BlockGemmArgs a;
  Tensor buf = gpu_->empty({4096});
  a.out = buf.data<float>();
  a.xq = a.wq = static_cast<const uint8_t*>(buf.raw());
  a.sx = a.sw = buf.data<float>();
  a.m = a.n = 4;
  a.k = 40;
  a.ldo = 4;
  a.ldx = 40;  // not a multiple of 16
  a.ldw = 48;
  EXPECT_THROW(cuda::fp8_block_gemm_launch(stream_, a), StatusError);
  a.ldx = 32;  // shorter than k
  EXPECT_THROW(cuda::fp8_block_gemm_launch(stream_, a), StatusError);
  a.ldx = 48;
  a.ldo = 3;
  EXPECT_THROW(cuda::fp8_block_gemm_launch(stream_, a), StatusError);
}

// Seconds per call, averaged over `iters` calls after 2 warm-up calls.
template <typename F>
double seconds_per_call(int iters, F&& fn) {
  for (int i = 0; i < 2; ++i) fn();
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Random codes (no NaN) and 1e-3 scales: quantizing 100M weights on the host would be slow.
Matrix random_fp8(int64_t n, int64_t k, uint64_t seed) {
  Tensor codes = Tensor::empty({n, k}, DType::kF8E4M3);
  auto* bytes = static_cast<uint8_t*>(codes.raw());
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < codes.nbytes(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    bytes[i] = static_cast<uint8_t>(s >> 24);
    if ((bytes[i] & 0x7F) == 0x7F) bytes[i] ^= 1;
  }
  Tensor scales = Tensor::empty({(n + 127) / 128, (k + 127) / 128}, DType::kF32);
  for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = 1e-3f;
  return Matrix::fp8_block(codes, scales);
}

TEST_F(Fp8Gemm, Bench) {
  for (auto [n, k] :
       std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}, {8192, 4096}, {4096, 8192}, {24576, 4096}}) {
    const Matrix w = random_fp8(n, k, static_cast<uint64_t>(n + k));
    const Matrix dq = up(w);
    for (int64_t m : {1024, 8192}) {
      const Tensor x = gpu_->to_device(randn({m, k}, static_cast<uint32_t>(m)));
      Tensor mine = gpu_->empty({m, n}), deq = gpu_->empty({m, n}), sync = gpu_->empty({m, n});
      const int iters = m * n * k > int64_t{1} << 38 ? 5 : 20;
      double t_mine = 0, t_deq = 0, t_sync = 0;
      {
        PrefillPath p("mma");
        t_mine = seconds_per_call(iters, [&] { gpu_->matmul(mine, x, dq); });
        ::setenv("TF_FP8_KERNEL", "mmasync", 1);
        t_sync = seconds_per_call(iters, [&] { gpu_->matmul(sync, x, dq); });
        ::unsetenv("TF_FP8_KERNEL");
      }
      {
        PrefillPath p("dequant");
        t_deq = seconds_per_call(iters, [&] { gpu_->matmul(deq, x, dq); });
      }
      const Tensor deq_h = gpu_->to_host(deq), mine_h = gpu_->to_host(mine);
      const double flop = 2.0 * m * n * k, e = rel_err_to_max_ref(deq_h, mine_h);
      const double e_sync = rel_err_to_max_ref(mine_h, gpu_->to_host(sync));
      std::printf(
          "[fp8gemm-bench] M=%-5lld N=%-5lld K=%-5lld wgmma %7.3f ms %5.0f TFLOP/s | bf16 dequant+cuBLAS "
          "%7.3f ms %5.0f TFLOP/s | speedup %.2fx | mma.sync %5.0f TFLOP/s | max rel diff vs dequant %.3g, "
          "wgmma vs mma.sync %.3g\n",
          static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), t_mine * 1e3,
          flop / t_mine / 1e12, t_deq * 1e3, flop / t_deq / 1e12, t_deq / t_mine, flop / t_sync / 1e12, e,
          e_sync);
      EXPECT_LE(e, 5e-2) << "M=" << m << " N=" << n << " K=" << k;
      EXPECT_LE(e_sync, 1e-3) << "M=" << m << " N=" << n << " K=" << k;
    }
  }
}

}  // namespace
}  // namespace tf
