// The q4 ring GEMV (kernels/cuda/quant_gemv_ring.h, QuantGemvArgs::ring, the q4 default) against the
// CPU reference and the B-operand kernel it replaces, and its speed.
//
// Parity: awkward shapes (K not a multiple of 64 or 128: odd chunk counts take the scales' plain-load
// path; N not a multiple of 8 or of the unit), m = 1..8 and 11 (two passes), accumulate, x and out
// with row strides; max relative error to the largest reference magnitude <= 5e-6 (x as f16 hi + lo
// of x * 2^e per (row, chunk), as the slice kernels). Stage sizes and ring depths give the same bits
// (they must not change the sum order); every K split matches the CPU. A row alone and inside
// 2..8-row calls has the same bits; quant_gemv_many gives each matrix the bits of a call alone; the
// default dispatch (quant_gemv and Ops::matmul on a q4 Matrix) runs this kernel when
// quant_ring_default() (TF_QUANT_RING=1), else the B-operand kernel; a captured and replayed call has
// the eager bits.
// Bench ("[quant-bench] ring" lines, graph-replayed, matrices rotated through > 400 MB so every call
// streams from HBM): the model's q4 shapes at m = 1, 2, 4, 8, the B-operand kernel -> the ring kernel
// (us, % of the measured HBM copy bandwidth), at m = 1 and 8 the K splits, stage sizes and a shallow
// ring swept; quant_gemv_many over the KDA q/k/v shape. `ProfileOnce` makes a few plain calls of
// both kernels for ncu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_gemv_ring.h"
#include "model/dense_quant.h"
#include "cuda_q4_gemv_test_util.h"
#include "test_tensors.h"

namespace tf {
namespace {

// The ring kernel's calls: the shared fixture's args with ring = 1.
class CudaQuantRing : public q4test::CudaQ4GemvTest {
 protected:
  cuda::QuantGemvArgs args(const Matrix& dq, float* out, int64_t ldo, const float* x, int64_t ldx, int64_t m) {
    cuda::QuantGemvArgs a = q4_args(dq, out, ldo, x, ldx, m);
    a.ring = 1;
    return a;
  }
};

TEST_F(CudaQuantRing, MatchesTheCpuAndStagesDoNotChangeTheBits) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},      {7, 63},     {33, 65},     {129, 130},   {64, 256},    {45, 300},    {13, 1030},
      {200, 2050}, {300, 4096}, {136, 12288}, {1000, 4100}, {5000, 1100}, {12300, 300}, {250, 1536}};
  double worst = 0;
  int variants = 0;
  for (auto [n, k] : shapes) {
    const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n + 29 * k), 0.05f));
    const Matrix dq = up(q);
    for (int64_t m : {1, 2, 3, 5, 8, 11}) {
      const bool acc = m % 2 == 0 || m == 11;
      const int64_t ldx = k + (m == 3 ? 5 : 0), ldo = n + (m == 5 || m == 11 ? 3 : 0);
      const Tensor xs = randn({m, ldx}, static_cast<uint32_t>(m * 13 + k));
      Tensor x = Tensor::empty({m, k}, DType::kF32);
      for (int64_t r = 0; r < m; ++r) std::copy_n(xs.data<float>() + r * ldx, k, x.data<float>() + r * k);
      const Tensor init = randn({m, ldo}, static_cast<uint32_t>(m + 3));
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      for (int64_t r = 0; r < m; ++r) std::copy_n(init.data<float>() + r * ldo, n, ref.data<float>() + r * n);
      cpu_->matmul(ref, x, q, acc);
      const Tensor xd = gpu_->to_device(xs);
      auto run = [&](int stage, int depth, int ksplit, int pdl, int warps = 0, int bulk = 0) {
        Tensor out = gpu_->to_device(init);
        cuda::QuantGemvArgs a = args(dq, out.data<float>(), ldo, xd.data<float>(), ldx, m);
        a.accumulate = acc;
        a.ring_stage = stage;
        a.ring_depth = depth;
        a.ring_ksplit = ksplit;
        a.slice_pdl = pdl;
        a.ring_warps = warps;
        a.ring_bulk = bulk;
        cuda::quant_gemv(stream_, a);
        return gpu_->to_host(out);
      };
      const Tensor got0 = run(0, 0, 0, -1);
      const double e = rel_err_to_max_ref(ref, got0.slice(1, 0, n).contiguous());
      worst = std::max(worst, e);
      EXPECT_LE(e, 5e-6) << "N=" << n << " K=" << k << " M=" << m << (acc ? " acc" : "");
      // Stage sizes, a 2-slot ring, PDL off, 16 consumer warps (the same K split) and bulk copies: the
      // same bits, padding columns included.
      const int plan_ks = cuda::quant_ring_plan(n, k, sms_).ksplit;
      for (auto [stage, depth, pdl, warps] : std::vector<std::tuple<int, int, int, int>>{
               {2, 0, -1, 0}, {8, 0, -1, 0}, {4, 2, 0, 0}, {2, 3, 1, 0}, {0, 0, -1, 16}, {8, 3, -1, 16}}) {
        // depth 3: bulk copies per row (2D tensor copies: TensorCopiesGiveTheSameBits).
        EXPECT_TRUE(same_bits(run(stage, depth, plan_ks, pdl, warps, depth == 3 ? 1 : 0), got0))
            << "N=" << n << " K=" << k << " M=" << m << " stage " << stage << " depth " << depth << " warps "
            << warps;
        ++variants;
      }
      // Other K splits (other bits) match the CPU too.
      for (int ks : {1, 2, 4, 8}) {
        if (ks == plan_ks) continue;
        const double eb = rel_err_to_max_ref(ref, run(0, 0, ks, -1).slice(1, 0, n).contiguous());
        worst = std::max(worst, eb);
        EXPECT_LE(eb, 5e-6) << "N=" << n << " K=" << k << " M=" << m << " ksplit " << ks;
      }
      if (ldo > n) {
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = n; c < ldo; ++c)
            EXPECT_EQ(got0.data<float>()[r * ldo + c], init.data<float>()[r * ldo + c]) << "padding written";
      }
    }
  }
  std::printf(
      "[quant] ring parity q4 gemv (M 1..11, %zu shapes) max rel err %.3g (tol 5e-06); %d variants equal bit "
      "for bit\n",
      shapes.size(), worst, variants);
}

// The weights by one 2D tensor copy per stage (QuantGemvArgs::ring_bulk 0 or 2: rows past n and chunks past K
// arrive as zeros, the slot rows unpadded): the bits of the 16-byte cp.async copies (ring_bulk = 3). Its own
// test so that a stall of the tensor path cannot take the others down.
TEST_F(CudaQuantRing, TensorCopiesGiveTheSameBits) {
  int cases = 0;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {7, 63}, {129, 130}, {300, 4096}, {1000, 4100}, {5000, 1100}, {250, 1536}, {8192, 4096}};
  for (auto [n, k] : shapes) {
    const Matrix dq = up(quantize(randn({n, k}, static_cast<uint32_t>(n + k), 0.05f)));
    for (int64_t m : {1, 3, 8}) {
      const Tensor xd = gpu_->to_device(randn({m, k}, static_cast<uint32_t>(m + 31)));
      Tensor got[2];
      for (int mode : {3, 2}) {  // 16-byte cp.async, 2D tensor copies
        got[mode / 3] = gpu_->empty({m, n});
        cuda::QuantGemvArgs a = args(dq, got[mode / 3].data<float>(), n, xd.data<float>(), k, m);
        a.ring_bulk = mode;
        cuda::quant_gemv(stream_, a);
      }
      EXPECT_TRUE(same_bits(gpu_->to_host(got[1]), gpu_->to_host(got[0])))
          << "N=" << n << " K=" << k << " M=" << m;
      ++cases;
    }
  }
  std::printf("[quant] ring 2D tensor copies: %d cases equal the cp.async copies bit for bit\n", cases);
}

TEST_F(CudaQuantRing, RowBitsDoNotDependOnTheBatch) {
  for (auto [n, k] :
       std::vector<std::pair<int64_t, int64_t>>{{97, 390}, {300, 2050}, {1000, 4096}, {8192, 4096}}) {
    const Matrix dq = up(quantize(randn({n, k}, 9, 0.05f)));
    const Tensor row = randn({1, k}, 10);
    Tensor alone = gpu_->empty({1, n});
    const Tensor rd = gpu_->to_device(row);
    cuda::quant_gemv(stream_, args(dq, alone.data<float>(), n, rd.data<float>(), k, 1));
    const Tensor want = gpu_->to_host(alone);
    for (int64_t m = 2; m <= 8; ++m) {
      Tensor x = randn({m, k}, static_cast<uint32_t>(20 + m),
                       m == 8 ? 1e4f : 1.0f);  // other rows' magnitudes differ
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

TEST_F(CudaQuantRing, ManySegmentsEqualSeparateCalls) {
  uint32_t seed = 4321;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
  };
  int cases = 0;
  for (int64_t k : {int64_t{300}, int64_t{2048}, int64_t{4100}}) {
    const int count = 1 + static_cast<int>(next() % cuda::kQuantGemvMaxSegments);
    std::vector<Matrix> mats;
    for (int i = 0; i < count; ++i)
      mats.push_back(up(quantize(randn({1 + int64_t(next() % 3000), k}, next(), 0.05f))));
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
  std::printf("[quant] ring quant_gemv_many: %d segments equal separate calls bit for bit\n", cases);
}

// The defaults follow quant_ring_default() (TF_QUANT_RING): quant_gemv with ring and b_operand unset,
// and Ops::matmul on a q4 Matrix (quant_matmul, its workspace from the context's scratch), give the
// ring kernel's bits when it is on, the B-operand kernel's when off; b_operand = 1 runs the old kernel
// (other bits, same accuracy); a captured and replayed ring call gives the eager bits.
TEST_F(CudaQuantRing, FollowsTheDefaultAndIsCaptureSafe) {
  const int64_t n = 1000, k = 4096;
  const Matrix q = quantize(randn({n, k}, 77, 0.05f));
  const Matrix dq = up(q);
  for (int64_t m : {1, 3, 8}) {
    const Tensor x = randn({m, k}, static_cast<uint32_t>(m + 5));
    const Tensor xd = gpu_->to_device(x);
    Tensor ring_out = gpu_->empty({m, n});
    cuda::quant_gemv(stream_, args(dq, ring_out.data<float>(), n, xd.data<float>(), k, m));
    const Tensor want = gpu_->to_host(ring_out);

    Tensor bop_out = gpu_->empty({m, n});
    cuda::QuantGemvArgs a = args(dq, bop_out.data<float>(), n, xd.data<float>(), k, m);
    a.ring = -1;
    a.b_operand = 1;
    cuda::quant_gemv(stream_, a);
    const Tensor bop = gpu_->to_host(bop_out);
    Tensor ref = Tensor::empty({m, n}, DType::kF32);
    cpu_->matmul(ref, x, q);
    EXPECT_LE(rel_err_to_max_ref(ref, bop), 5e-6) << "b_operand, M=" << m;
    const Tensor& def_want = cuda::quant_ring_default() ? want : bop;

    Tensor def_out = gpu_->empty({m, n});
    a = args(dq, def_out.data<float>(), n, xd.data<float>(), k, m);
    a.ring = -1;
    cuda::quant_gemv(stream_, a);
    EXPECT_TRUE(same_bits(gpu_->to_host(def_out), def_want)) << "quant_gemv default, M=" << m;

    Tensor op_out = gpu_->empty({m, n});
    gpu_->matmul(op_out, xd, dq);
    EXPECT_TRUE(same_bits(gpu_->to_host(op_out), def_want)) << "Ops::matmul, M=" << m;

    Tensor cap_out = gpu_->empty({m, n});
    a = args(dq, cap_out.data<float>(), n, xd.data<float>(), k, m);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cuda::quant_gemv(stream_, a);
    ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_TRUE(same_bits(gpu_->to_host(cap_out), want)) << "graph replay, M=" << m;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

using q4test::graph_seconds;
using q4test::random_q4;

TEST_F(CudaQuantRing, Bench) {
  auto probe = cuda::probe_device(0);
  ASSERT_TRUE(probe) << probe.status().to_string();
  const double hbm = probe->hbm_gbps;
  const bool tma = std::getenv("TF_RING_BENCH_TMA") != nullptr;  // the 2D tensor-copy columns (ring_bulk = 2)
  std::printf(
      "[quant-bench] ring columns: graph-replayed us and %% of HBM (%.0f GB/s measured): B-operand kernel -> "
      "ring kernel; m=1, 8 also ring K splits k1..k8 (plan's marked *), stages s2/s8, depth d4, PDL off, "
      "16 consumer warps (w16k<its plan's split>, and stages s8), weights by bulk copies per row (run3s9's), "
      "by one 2D tensor copy per stage (tma2d, and stages s8; with TF_RING_BENCH_TMA)\n",
      hbm);
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {{8192, 4096, "4096->8192"},   {4096, 8192, "8192->4096"},
                          {2048, 4096, "4096->2048"},   {4096, 2048, "2048->4096"},
                          {16384, 1536, "1536->16384"}, {4096, 16384, "16384->4096"},
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
      auto time_it = [&](int ring, int ksplit = 0, int stage = 0, int depth = 0, int pdl = -1, int warps = 0,
                         int bulk = 0) {
        cuda::QuantGemvArgs a = args(dev[0], out.data<float>(), s.n, x.data<float>(), s.k, m);
        a.slice_pdl = pdl;
        a.ring_warps = warps;
        a.ring_bulk = bulk;
        a.ring = ring;
        a.b_operand = ring ? -1 : 1;
        a.ring_ksplit = ksplit;
        a.ring_stage = stage;
        a.ring_depth = depth;
        return graph_seconds(stream_, 40, [&](int i) {
          a.codes = dev[i % copies].codes().raw();
          a.scales = dev[i % copies].scales().raw();
          cuda::quant_gemv(stream_, a);
        });
      };
      const double tb = time_it(0), tr = time_it(1);
      std::string sweep;
      if (m == 1 || m == 8) {
        auto add = [&](const std::string& what, double t) {
          char buf[80];
          std::snprintf(buf, sizeof buf, " %s: %.1f us %.1f%%", what.c_str(), t * 1e6,
                        100 * bytes / t / 1e9 / hbm);
          sweep += buf;
        };
        const int plan_ks = cuda::quant_ring_plan(s.n, s.k, sms_).ksplit;
        for (int ks : {1, 2, 4, 8})
          add("k" + std::to_string(ks) + (ks == plan_ks ? "*" : ""), time_it(1, ks));
        add("s2", time_it(1, 0, 2));
        add("s8", time_it(1, 0, 8));
        add("d4", time_it(1, 0, 0, 4));
        add("nopdl", time_it(1, 0, 0, 0, 0));
        const int ks16 = cuda::quant_ring_plan(s.n, s.k, sms_, 0, 16).ksplit;
        add("w16k" + std::to_string(ks16), time_it(1, 0, 0, 0, -1, 16));
        add("w16s8", time_it(1, 0, 8, 0, -1, 16));
        add("bulk", time_it(1, 0, 0, 0, -1, 0, 1));
        if (tma) {
          add("tma2d", time_it(1, 0, 0, 0, -1, 0, 2));
          add("tma2d-s8", time_it(1, 0, 8, 0, -1, 0, 2));
        }
      }
      std::printf(
          "[quant-bench] ring q4 %-12s m=%lld bop %6.1f us %5.1f%% -> ring %6.1f us %5.1f%% (%.2fx)%s%s\n",
          s.what, static_cast<long long>(m), tb * 1e6, 100 * bytes / tb / 1e9 / hbm, tr * 1e6,
          100 * bytes / tr / 1e9 / hbm, tb / tr, sweep.empty() ? "" : ";", sweep.c_str());
    }
  }
  // quant_gemv_many: 3 x 4096->8192 (KDA q/k/v) in one launch, B-operand vs ring kernel.
  const int64_t n = 8192, k = 4096;
  const Matrix q = random_q4(n, k, 12);
  const int copies =
      static_cast<int>(std::max<int64_t>(3, 3 * ((int64_t{400} << 20) / (3 * q.nbytes()) + 1)));
  std::vector<Matrix> dev;
  for (int i = 0; i < copies; ++i) dev.push_back(up(q));
  for (int64_t m : {1, 2, 4, 8}) {
    const Tensor x = gpu_->to_device(randn({m, k}, 4));
    std::vector<Tensor> outs;
    cuda::QuantGemvSegment segs[3];
    for (int i = 0; i < 3; ++i) {
      outs.push_back(gpu_->empty({m, n}));
      segs[i].out = outs[i].data<float>();
      segs[i].ldo = n;
      segs[i].n = n;
    }
    Tensor ws =
        gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_many_workspace_bytes(m, segs, 3, k, sms_) / 4)});
    double t[4];
    t[3] = NAN;
    for (int ring = 0; ring < (tma ? 4 : 3);
         ++ring) {  // bop, ring, ring with 16 consumer warps, ring with 2D tensor copies
      cuda::QuantGemvArgs common = args(dev[0], nullptr, 0, x.data<float>(), k, m);
      common.workspace = ws.data<float>();
      common.ring = ring ? 1 : 0;
      common.b_operand = ring ? -1 : 1;
      common.ring_warps = ring == 2 ? 16 : 0;
      common.ring_bulk = ring == 3 ? 2 : 0;
      t[ring] = graph_seconds(stream_, 20, [&](int i) {
        for (int j = 0; j < 3; ++j) {
          segs[j].codes = dev[(3 * i + j) % copies].codes().raw();
          segs[j].scales = dev[(3 * i + j) % copies].scales().raw();
        }
        cuda::quant_gemv_many(stream_, common, segs, 3);
      });
    }
    const double bytes = 3.0 * static_cast<double>(q.nbytes());
    std::printf(
        "[quant-bench] ring many q4 3 x 4096->8192 m=%lld bop %6.1f us %5.1f%% -> ring %6.1f us %5.1f%% "
        "(%.2fx); "
        "w16: %.1f us %.1f%%; tma2d: %.1f us %.1f%%\n",
        static_cast<long long>(m), t[0] * 1e6, 100 * bytes / t[0] / 1e9 / hbm, t[1] * 1e6,
        100 * bytes / t[1] / 1e9 / hbm, t[0] / t[1], t[2] * 1e6, 100 * bytes / t[2] / 1e9 / hbm, t[3] * 1e6,
        100 * bytes / t[3] / 1e9 / hbm);
  }
}

// A few plain calls for ncu (run it with --gtest_filter=*ProfileOnce): 4096->8192 at m = 1 and 8,
// the B-operand kernel then the ring kernel, each on its own copy of the matrix.
TEST_F(CudaQuantRing, ProfileOnce) {
  const int64_t n = 8192, k = 4096;
  const Matrix q = random_q4(n, k, 3);
  std::vector<Matrix> dev;
  for (int i = 0; i < 4; ++i) dev.push_back(up(q));
  for (int64_t m : {1, 8}) {
    const Tensor x = gpu_->to_device(randn({m, k}, 4));
    Tensor out = gpu_->empty({m, n});
    for (int ring = 0; ring < 2; ++ring) {
      cuda::QuantGemvArgs a = args(dev[2 * ring + (m == 8)], out.data<float>(), n, x.data<float>(), k, m);
      a.ring = ring;
      a.b_operand = ring ? -1 : 1;
      cuda::quant_gemv(stream_, a);
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

}  // namespace
}  // namespace tf
