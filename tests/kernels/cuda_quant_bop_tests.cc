// The q4 decode GEMV with the weights as the MMA's B operand (kernels/cuda/quant_gemv_bop.cuh,
// QuantGemvArgs::b_operand; issue #8) against the CPU reference and the slice kernel, and its
// speed. Linked into cuda_quant_tests (part `quant` of scripts/device/gpu_tests.sh).
//
// Parity: q4 over awkward shapes (K not a multiple of 64 or of 128: odd chunk counts take the
// scales' plain-load path; N not a multiple of 8 or 128), m = 1..8, accumulate, x and out with
// row strides; max relative error to the largest reference magnitude <= 5e-6 (x as f16 hi + lo
// of x * 2^e per (row, chunk), 22 significant bits; the slice kernel measures ~1e-6). Every
// chunks-in-flight setting and slice-sum path (second kernel, fused, cluster) gives the same
// bits; a row alone and inside 2..8-row calls gives the same bits; quant_gemv_many gives each
// matrix the bits of a call on it alone.
// Bench ("[quant-bench] bop" lines, graph-replayed, matrices rotated through > 400 MB so every
// call streams from HBM): the model's q4 shapes at m = 1, 2, 4, 8, the slice kernel vs the
// B-operand kernel (us, % of the measured HBM copy bandwidth), its chunks in flight swept at
// m = 1, and quant_gemv_many over the KDA q/k/v shape.
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
#include "kernels/cuda/quant_gemv.h"
#include "model/dense_quant.h"
#include "cuda_q4_gemv_test_util.h"
#include "test_tensors.h"

namespace tf {
namespace {

// The B-operand kernel's calls: the shared fixture's args with b_operand = 1.
class CudaQuantBop : public q4test::CudaQ4GemvTest {
 protected:
  cuda::QuantGemvArgs args(const Matrix& dq, float* out, int64_t ldo, const float* x, int64_t ldx, int64_t m,
                           int blocks_per_sm = 0) {
    cuda::QuantGemvArgs a = q4_args(dq, out, ldo, x, ldx, m, blocks_per_sm);
    a.b_operand = 1;
    return a;
  }
};

TEST_F(CudaQuantBop, MatchesTheCpuAndEveryVariantGivesTheSameBits) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},      {7, 63},     {33, 65},     {129, 130},  {64, 256},   {45, 300},   {13, 1030},
      {200, 2050}, {300, 4096}, {136, 12288}, {1000, 4100}, {5000, 1100}, {12300, 300}, {250, 1536}};
  double worst = 0;
  int variants = 0;
  for (auto [n, k] : shapes) {
    const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n + 29 * k), 0.05f));
    const Matrix dq = up(q);
    for (int64_t m : {1, 2, 3, 5, 8}) {
      const bool acc = m % 2 == 0;
      const int64_t ldx = k + (m == 3 ? 5 : 0), ldo = n + (m == 5 ? 3 : 0);
      const Tensor xs = randn({m, ldx}, static_cast<uint32_t>(m * 13 + k));
      Tensor x = Tensor::empty({m, k}, DType::kF32);
      for (int64_t r = 0; r < m; ++r) std::copy_n(xs.data<float>() + r * ldx, k, x.data<float>() + r * k);
      const Tensor init = randn({m, ldo}, static_cast<uint32_t>(m + 3));
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      for (int64_t r = 0; r < m; ++r)
        std::copy_n(init.data<float>() + r * ldo, n, ref.data<float>() + r * n);
      cpu_->matmul(ref, x, q, acc);
      const Tensor xd = gpu_->to_device(xs);
      std::vector<Tensor> got;
      for (int inflight : {0, 2, 4, 8})
        for (int sum_mode : {0, 1, 2}) {  // second kernel, fused, cluster
          if (inflight != 0 && sum_mode != 0 && inflight != 4) continue;
          Tensor out = gpu_->to_device(init);
          cuda::QuantGemvArgs a = args(dq, out.data<float>(), ldo, xd.data<float>(), ldx, m);
          a.accumulate = acc;
          a.inflight = inflight;
          a.fused_sum = sum_mode == 1;
          a.cluster_sum = sum_mode == 2 ? 1 : 0;
          a.slice_pdl = inflight == 2 ? 0 : -1;
          cuda::quant_gemv(stream_, a);
          got.push_back(gpu_->to_host(out).slice(1, 0, n).contiguous());
        }
      const double e = rel_err_to_max_ref(ref, got[0]);
      worst = std::max(worst, e);
      EXPECT_LE(e, 5e-6) << "N=" << n << " K=" << k << " M=" << m << (acc ? " acc" : "");
      // Other plans (more or fewer K slices: other bits) match the CPU too.
      for (int bpsm : {2, 3, 8}) {
        Tensor out = gpu_->to_device(init);
        cuda::QuantGemvArgs a = args(dq, out.data<float>(), ldo, xd.data<float>(), ldx, m, bpsm);
        a.accumulate = acc;
        cuda::quant_gemv(stream_, a);
        const double eb = rel_err_to_max_ref(ref, gpu_->to_host(out).slice(1, 0, n).contiguous());
        worst = std::max(worst, eb);
        EXPECT_LE(eb, 5e-6) << "N=" << n << " K=" << k << " M=" << m << " blocks per SM " << bpsm;
      }
      for (size_t i = 1; i < got.size(); ++i) {
        EXPECT_TRUE(same_bits(got[i], got[0])) << "N=" << n << " K=" << k << " M=" << m << " variant " << i;
        ++variants;
      }
      // The padding columns of out (ldo > n) are untouched.
      if (ldo > n) {
        Tensor out = gpu_->to_device(init);
        cuda::QuantGemvArgs a = args(dq, out.data<float>(), ldo, xd.data<float>(), ldx, m);
        a.accumulate = acc;
        cuda::quant_gemv(stream_, a);
        const Tensor h = gpu_->to_host(out);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = n; c < ldo; ++c)
            EXPECT_EQ(h.data<float>()[r * ldo + c], init.data<float>()[r * ldo + c]) << "padding written";
      }
    }
  }
  std::printf("[quant] bop parity q4 gemv (M 1..8, %zu shapes) max rel err %.3g (tol 5e-06); %d variants equal bit for "
              "bit\n",
              shapes.size(), worst, variants);
}

TEST_F(CudaQuantBop, RowBitsDoNotDependOnTheBatch) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{97, 390}, {300, 2050}, {1000, 4096}}) {
    const Matrix dq = up(quantize(randn({n, k}, 9, 0.05f)));
    const Tensor row = randn({1, k}, 10);
    Tensor alone = gpu_->empty({1, n});
    const Tensor rd = gpu_->to_device(row);
    cuda::quant_gemv(stream_, args(dq, alone.data<float>(), n, rd.data<float>(), k, 1));
    const Tensor want = gpu_->to_host(alone);
    for (int64_t m = 2; m <= 8; ++m) {
      Tensor x = randn({m, k}, static_cast<uint32_t>(20 + m), m == 8 ? 1e4f : 1.0f);  // other rows' magnitudes differ
      const int64_t at = (m * 3) / 4;
      std::copy_n(row.data<float>(), k, x.data<float>() + at * k);
      Tensor out = gpu_->empty({m, n});
      const Tensor xd = gpu_->to_device(x);
      cuda::quant_gemv(stream_, args(dq, out.data<float>(), n, xd.data<float>(), k, m));
      const Tensor got = gpu_->to_host(out).slice(0, at, at + 1).contiguous();
      EXPECT_TRUE(same_bits(got, want)) << "N=" << n << " K=" << k << " row at " << at << " of " << m;
    }
  }
}

TEST_F(CudaQuantBop, ManySegmentsEqualSeparateCalls) {
  uint32_t seed = 4321;
  auto next = [&] { seed = seed * 1664525u + 1013904223u; return seed >> 8; };
  int cases = 0;
  for (int64_t k : {int64_t{300}, int64_t{2048}, int64_t{4100}}) {
    const int count = 1 + static_cast<int>(next() % cuda::kQuantGemvMaxSegments);
    std::vector<Matrix> mats;
    for (int i = 0; i < count; ++i) mats.push_back(up(quantize(randn({1 + int64_t(next() % 1500), k}, next(), 0.05f))));
    for (int64_t m : {1, 4, 8}) {
      const Tensor xd = gpu_->to_device(randn({m, k}, next()));
      cuda::QuantGemvArgs common = args(mats[0], nullptr, 0, xd.data<float>(), k, m);
      std::vector<cuda::QuantGemvSegment> segs(static_cast<size_t>(count));
      std::vector<Tensor> together, alone;
      for (int i = 0; i < count; ++i) {
        const int64_t n = mats[i].size(0), ldo = n + (i % 2) * 3;
        const Tensor init = randn({m, ldo}, next());
        together.push_back(gpu_->to_device(init));
        alone.push_back(gpu_->to_device(init));
        segs[i] = {together.back().data<float>(), ldo, mats[i].codes().raw(), mats[i].scales().raw(), n};
      }
      common.accumulate = m == 4;
      Tensor ws = gpu_->empty(
          {std::max<int64_t>(1, cuda::quant_gemv_many_workspace_bytes(m, segs.data(), count, k, sms_) / 4)});
      common.workspace = ws.data<float>();
      cuda::quant_gemv_many(stream_, common, segs.data(), count);
      for (int i = 0; i < count; ++i) {
        cuda::QuantGemvArgs a = args(mats[i], alone[i].data<float>(), segs[i].ldo, xd.data<float>(), k, m);
        a.accumulate = common.accumulate;
        cuda::quant_gemv(stream_, a);
        EXPECT_TRUE(same_bits(gpu_->to_host(together[i]), gpu_->to_host(alone[i])))
            << "K=" << k << " M=" << m << " segment " << i << " of " << count;
        ++cases;
      }
    }
  }
  std::printf("[quant] bop quant_gemv_many: %d segments equal separate calls bit for bit\n", cases);
}

using q4test::graph_seconds;
using q4test::random_q4;

TEST_F(CudaQuantBop, Bench) {
  auto probe = cuda::probe_device(0);
  ASSERT_TRUE(probe) << probe.status().to_string();
  const double hbm = probe->hbm_gbps;
  std::printf("[quant-bench] bop columns: graph-replayed us and %% of HBM (%.0f GB/s measured): slice kernel -> "
              "B-operand kernel (default: inflight 2); m=1, 8 also inflight 4 and 8, cluster sum (c), blocks per SM 2/3/6 (b2..)\n", hbm);
  struct Shape { int64_t n, k; const char* what; };
  const Shape shapes[] = {{8192, 4096, "4096->8192"}, {4096, 8192, "8192->4096"},  {2048, 4096, "4096->2048"},
                          {4096, 2048, "2048->4096"}, {16384, 1536, "1536->16384"}, {4096, 16384, "16384->4096"},
                          {24576, 4096, "4096->24576"}};
  for (const Shape& s : shapes) {
    const Matrix q = random_q4(s.n, s.k, static_cast<uint64_t>(s.n * 3 + s.k));
    const double bytes = static_cast<double>(q.nbytes());
    const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / q.nbytes() + 1));
    std::vector<Matrix> dev;
    for (int i = 0; i < copies; ++i) dev.push_back(up(q));
    for (int64_t m : {1, 2, 4, 8}) {
      const Tensor x = gpu_->to_device(randn({m, s.k}, 4));
      Tensor out = gpu_->empty({m, s.n});
      auto time_it = [&](int bop, int inflight, int cluster = 0, int bpsm = 0) {
        cuda::QuantGemvArgs a = args(dev[0], out.data<float>(), s.n, x.data<float>(), s.k, m, bpsm);
        a.b_operand = bop;
        a.inflight = inflight;
        a.cluster_sum = cluster;
        return graph_seconds(stream_, 40, [&](int i) {
          a.codes = dev[i % copies].codes().raw();
          a.scales = dev[i % copies].scales().raw();
          cuda::quant_gemv(stream_, a);
        });
      };
      const double ts = time_it(0, 0), tb = time_it(1, 0);
      std::string sweep;
      if (m == 1 || m == 8) {
        // inflight 4; the cluster slice sum (c, when the plan has 2..8 slices); blocks per SM 2, 3, 6 (other plans).
        auto add = [&](const char* what, double t) {
          char buf[64];
          std::snprintf(buf, sizeof buf, " %s: %.1f us %.1f%%", what, t * 1e6, 100 * bytes / t / 1e9 / hbm);
          sweep += buf;
        };
        add("4", time_it(1, 4));
        add("8", time_it(1, 8));
        const int64_t slices = cuda::quant_gemv_plan(s.n, s.k, sms_).slices;
        if (slices >= 2 && slices <= 8) add("c", time_it(1, 0, 1));
        add("b2", time_it(1, 0, 0, 2));
        add("b3", time_it(1, 0, 0, 3));
        add("b6", time_it(1, 0, 0, 6));
      }
      std::printf("[quant-bench] bop q4 %-12s m=%lld slice %6.1f us %5.1f%% -> bop %6.1f us %5.1f%% (%.2fx)%s%s\n", s.what,
                  static_cast<long long>(m), ts * 1e6, 100 * bytes / ts / 1e9 / hbm, tb * 1e6,
                  100 * bytes / tb / 1e9 / hbm, ts / tb, sweep.empty() ? "" : ";", sweep.c_str());
    }
  }
  // quant_gemv_many: 3 x 4096->8192 (KDA q/k/v) in one launch, slice vs B-operand kernel.
  const int64_t n = 8192, k = 4096;
  const Matrix q = random_q4(n, k, 12);
  const int copies = static_cast<int>(std::max<int64_t>(3, 3 * ((int64_t{400} << 20) / (3 * q.nbytes()) + 1)));
  std::vector<Matrix> dev;
  for (int i = 0; i < copies; ++i) dev.push_back(up(q));
  for (int64_t m : {1, 8}) {
    const Tensor x = gpu_->to_device(randn({m, k}, 4));
    std::vector<Tensor> outs;
    cuda::QuantGemvSegment segs[3];
    for (int i = 0; i < 3; ++i) {
      outs.push_back(gpu_->empty({m, n}));
      segs[i].out = outs[i].data<float>();
      segs[i].ldo = n;
      segs[i].n = n;
    }
    Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_many_workspace_bytes(m, segs, 3, k, sms_) / 4)});
    double t[2];
    for (int bop = 0; bop < 2; ++bop) {
      cuda::QuantGemvArgs common = args(dev[0], nullptr, 0, x.data<float>(), k, m);
      common.workspace = ws.data<float>();
      common.b_operand = bop;
      t[bop] = graph_seconds(stream_, 20, [&](int i) {
        for (int j = 0; j < 3; ++j) {
          segs[j].codes = dev[(3 * i + j) % copies].codes().raw();
          segs[j].scales = dev[(3 * i + j) % copies].scales().raw();
        }
        cuda::quant_gemv_many(stream_, common, segs, 3);
      });
    }
    const double bytes = 3.0 * static_cast<double>(q.nbytes());
    std::printf("[quant-bench] bop many q4 3 x 4096->8192 m=%lld slice %6.1f us %5.1f%% -> bop %6.1f us %5.1f%% (%.2fx)\n",
                static_cast<long long>(m), t[0] * 1e6, 100 * bytes / t[0] / 1e9 / hbm, t[1] * 1e6,
                100 * bytes / t[1] / 1e9 / hbm, t[0] / t[1]);
  }
}

}  // namespace
}  // namespace tf
