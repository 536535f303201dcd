// The q4 ring GEMV (kernels/cuda/quant_gemv_ring.h, QuantGemvArgs::ring, the q4 default) against the
// CPU reference and the B-operand kernel it replaces, and its speed.
//
// Parity, for both MMA operand layouts (QuantGemvArgs::ring_operand: weights as B or as A): awkward shapes
// (K not a multiple of 64 or 128: odd chunk counts take the scales' plain-load path; N not a multiple of 8
// or of the unit), m = 1..8 and 11 (two passes), accumulate, x and out with row strides; max relative
// error to the largest reference magnitude <= 5e-6 (x as f16 hi + lo of x * 2^e per (row, chunk), as the
// slice kernels). Stage sizes, ring depths, 16 consumer warps, the weights' copy path (cp.async, bulk,
// 2D tensor boxes plain or padded) and where x's records are built (the x kernel or the ring kernel)
// give the same bits (they must not change the sum order); every K split matches the CPU. A row alone
// and inside 2..8-row calls has the same bits; quant_gemv_many gives each matrix the bits of a call
// alone; the default dispatch (quant_gemv and Ops::matmul on a q4 Matrix) runs this kernel when
// quant_ring_default() (TF_QUANT_RING=1), else the B-operand kernel; a captured and replayed call has
// the eager bits.
// Bench ("[quant-bench] ring" lines, graph-replayed, matrices rotated through > 400 MB so every call
// streams from HBM): the model's q4 shapes at m = 1, 2, 4, 8, the B-operand kernel -> the session-9 ring
// -> the new ring (us, % of the measured HBM copy bandwidth), at m = 1 and 8 the new ring's knobs swept
// and both rings on one L2-resident copy (no HBM: the compute-only time); quant_gemv_many over the KDA
// q/k/v and shared-expert gate/up shapes. `ProfileOnce` makes a few plain calls of both rings for ncu.
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
  // operand: QuantGemvArgs::ring_operand (0 the default, 1 weights as B, 2 weights as A).
  cuda::QuantGemvArgs args(const Matrix& dq, float* out, int64_t ldo, const float* x, int64_t ldx, int64_t m,
                           int operand = 0) {
    cuda::QuantGemvArgs a = q4_args(dq, out, ldo, x, ldx, m);
    a.ring = 1;
    a.ring_operand = operand;
    return a;
  }
};

TEST_F(CudaQuantRing, MatchesTheCpuAndStagesDoNotChangeTheBits) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},      {7, 63},     {33, 65},     {129, 130},   {64, 256},    {45, 300},    {13, 1030},
      {200, 2050}, {300, 4096}, {136, 12288}, {1000, 4100}, {5000, 1100}, {12300, 300}, {250, 1536}};
  double worst = 0;
  int variants = 0;
  for (int operand : {1, 2})
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
      auto run = [&](int stage, int depth, int ksplit, int pdl, int warps = 0, int bulk = 0, int pad = 0) {
        Tensor out = gpu_->to_device(init);
        cuda::QuantGemvArgs a = args(dq, out.data<float>(), ldo, xd.data<float>(), ldx, m, operand);
        a.ring_pad = pad;
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
      EXPECT_LE(e, 5e-6) << "N=" << n << " K=" << k << " M=" << m << (acc ? " acc" : "") << " operand "
                         << operand;
      // Stage sizes, a 2-slot ring, PDL off, 16 consumer warps (the same K split), bulk copies and padded
      // tensor boxes: the same bits, padding columns included.
      const int plan_ks = cuda::quant_ring_plan(n, k, sms_).ksplit;
      for (auto [stage, depth, pdl, warps] : std::vector<std::tuple<int, int, int, int>>{
               {2, 0, -1, 0}, {8, 0, -1, 0}, {4, 2, 0, 0}, {2, 3, 1, 0}, {0, 0, -1, 16}, {8, 3, -1, 16}, {0, 4, -1, 0}}) {
        // depth 3: bulk copies per row (2D tensor copies: TensorCopiesGiveTheSameBits); depth 4: padded boxes.
        EXPECT_TRUE(same_bits(run(stage, depth, plan_ks, pdl, warps, depth == 3 ? 1 : 0, depth == 4 ? 1 : 0), got0))
            << "N=" << n << " K=" << k << " M=" << m << " stage " << stage << " depth " << depth << " warps "
            << warps << " operand " << operand;
        ++variants;
      }
      // Other K splits (other bits) match the CPU too.
      for (int ks : {1, 2, 4, 8}) {
        if (ks == plan_ks) continue;
        const double eb = rel_err_to_max_ref(ref, run(0, 0, ks, -1).slice(1, 0, n).contiguous());
        worst = std::max(worst, eb);
        EXPECT_LE(eb, 5e-6) << "N=" << n << " K=" << k << " M=" << m << " ksplit " << ks << " operand " << operand;
      }
      if (ldo > n) {
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = n; c < ldo; ++c)
            EXPECT_EQ(got0.data<float>()[r * ldo + c], init.data<float>()[r * ldo + c]) << "padding written";
      }
    }
  }
  std::printf(
      "[quant] ring parity q4 gemv (weights as B and as A, M 1..11, %zu shapes) max rel err %.3g (tol 5e-06); %d "
      "variants equal bit for bit\n",
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
    for (int operand : {1, 2})
    for (int64_t m : {1, 3, 5, 8}) {
      const Tensor xd = gpu_->to_device(randn({m, k}, static_cast<uint32_t>(m + 31)));
      Tensor got[3];
      for (int v = 0; v < 3; ++v) {  // 16-byte cp.async, 2D tensor copies, padded 2D tensor copies
        got[v] = gpu_->empty({m, n});
        cuda::QuantGemvArgs a = args(dq, got[v].data<float>(), n, xd.data<float>(), k, m, operand);
        a.ring_bulk = v == 0 ? 3 : 2;
        a.ring_pad = v == 2 ? 1 : 0;
        cuda::quant_gemv(stream_, a);
      }
      const Tensor want = gpu_->to_host(got[0]);
      for (int v = 1; v < 3; ++v)
        EXPECT_TRUE(same_bits(gpu_->to_host(got[v]), want))
            << "N=" << n << " K=" << k << " M=" << m << " operand " << operand << (v == 2 ? " padded" : "");
      ++cases;
    }
  }
  std::printf("[quant] ring 2D tensor copies (plain and padded boxes): %d cases equal the cp.async copies bit for bit\n",
              cases);
}

// x records written by the ring kernel itself (QuantGemvArgs::ring_x = 1: all of K in shared memory when a
// few rounds of the builder threads do it, 2: whenever it fits, else the x kernel): the bits of the x
// kernel's records (ring_x = 0), for both operand layouts, odd K and row strides, accumulate, K too long for
// the in-kernel records at larger m (the fallback), and K = 3,776 / 2,368 at m = 5 / 8 (five rounds of the
// builder threads, ring_x = 2).
TEST_F(CudaQuantRing, XInTheKernelGivesTheSameBits) {
  int cases = 0, in_kernel = 0;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {7, 63},      {129, 130},   {300, 2050},  {1000, 4100}, {250, 1536},
      {8192, 4096}, {700, 16384}, {4096, 2048}, {300, 3776},  {513, 2368}};
  for (auto [n, k] : shapes) {
    const Matrix dq = up(quantize(randn({n, k}, static_cast<uint32_t>(3 * n + k), 0.05f)));
    for (int operand : {1, 2})
      for (int64_t m : {1, 2, 4, 5, 8, 11}) {
        const int64_t ldx = k + (m == 5 ? 3 : 0);
        const Tensor xd = gpu_->to_device(randn({m, ldx}, static_cast<uint32_t>(m + 7 * k)));
        const Tensor init = gpu_->to_device(randn({m, n}, static_cast<uint32_t>(m + 1)));
        Tensor got[3];
        for (int xk = 0; xk < 3; ++xk) {
          got[xk] = gpu_->empty({m, n});
          cudaMemcpyAsync(got[xk].data<float>(), init.data<float>(), m * n * 4, cudaMemcpyDeviceToDevice, stream_);
          cuda::QuantGemvArgs a = args(dq, got[xk].data<float>(), n, xd.data<float>(), ldx, m, operand);
          a.accumulate = m % 2 == 0;
          a.ring_pad = operand == 2 ? 1 : 0;
          a.ring_x = xk;
          cuda::quant_gemv(stream_, a);
        }
        const Tensor want = gpu_->to_host(got[0]);
        for (int xk = 1; xk < 3; ++xk)
          EXPECT_TRUE(same_bits(gpu_->to_host(got[xk]), want))
              << "N=" << n << " K=" << k << " M=" << m << " operand " << operand << " ring_x " << xk;
        ++cases;
        in_kernel += ((k + 63) / 64) * (256 * std::min<int64_t>(m, 8) + 32) <= 76 * 1024;
      }
  }
  std::printf("[quant] ring x records built in the kernel: %d cases (%d with all of K in shared memory) equal the x "
              "kernel's bit for bit\n",
              cases, in_kernel);
}

// x read by 16-byte loads (aligned x, ldx and K multiples of 4) or one float at a time (x one float past
// an aligned address): the same records, so the same bits, with the records from the x kernel and from
// the ring kernel.
TEST_F(CudaQuantRing, XLoadsOfEitherWidthGiveTheSameBits) {
  int cases = 0;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{300, 2048}, {129, 4100}, {513, 4096}}) {
    const Matrix dq = up(quantize(randn({n, k}, static_cast<uint32_t>(5 * n + k), 0.05f)));
    for (int64_t m : {1, 4, 8}) {
      const Tensor host_x = randn({m, k}, static_cast<uint32_t>(m + 3 * k));
      Tensor shifted = gpu_->empty({m * k + 4});
      cudaMemcpy(shifted.data<float>() + 1, host_x.data<float>(), m * k * 4, cudaMemcpyHostToDevice);
      const Tensor aligned = gpu_->to_device(host_x);
      for (int xk = 0; xk < 2; ++xk) {
        Tensor got[2];
        for (int shift = 0; shift < 2; ++shift) {
          got[shift] = gpu_->empty({m, n});
          const float* x = shift ? shifted.data<float>() + 1 : aligned.data<float>();
          cuda::QuantGemvArgs a = args(dq, got[shift].data<float>(), n, x, k, m, 2);
          a.ring_x = xk;
          cuda::quant_gemv(stream_, a);
        }
        EXPECT_TRUE(same_bits(gpu_->to_host(got[1]), gpu_->to_host(got[0])))
            << "N=" << n << " K=" << k << " M=" << m << " ring_x " << xk;
        ++cases;
      }
    }
  }
  std::printf("[quant] ring x by 16-byte loads and by floats: %d cases equal bit for bit\n", cases);
}

TEST_F(CudaQuantRing, RowBitsDoNotDependOnTheBatch) {
  for (int operand : {1, 2})
  for (auto [n, k] :
       std::vector<std::pair<int64_t, int64_t>>{{97, 390}, {300, 2050}, {1000, 4096}, {8192, 4096}}) {
    const Matrix dq = up(quantize(randn({n, k}, 9, 0.05f)));
    const Tensor row = randn({1, k}, 10);
    Tensor alone = gpu_->empty({1, n});
    const Tensor rd = gpu_->to_device(row);
    cuda::quant_gemv(stream_, args(dq, alone.data<float>(), n, rd.data<float>(), k, 1, operand));
    const Tensor want = gpu_->to_host(alone);
    for (int64_t m = 2; m <= 8; ++m) {
      Tensor x = randn({m, k}, static_cast<uint32_t>(20 + m),
                       m == 8 ? 1e4f : 1.0f);  // other rows' magnitudes differ
      const int64_t at = (m * 3) / 4;
      std::copy_n(row.data<float>(), k, x.data<float>() + at * k);
      Tensor out = gpu_->empty({m, n});
      const Tensor xd = gpu_->to_device(x);
      cuda::quant_gemv(stream_, args(dq, out.data<float>(), n, xd.data<float>(), k, m, operand));
      const Tensor got = gpu_->to_host(out).slice(0, at, at + 1).contiguous();
      EXPECT_TRUE(same_bits(got, want)) << "N=" << n << " K=" << k << " row at " << at << " of " << m << " operand "
                                        << operand;
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
  for (int operand : {1, 2})
  for (int64_t k : {int64_t{300}, int64_t{2048}, int64_t{4100}}) {
    const int count = 1 + static_cast<int>(next() % cuda::kQuantGemvMaxSegments);
    std::vector<Matrix> mats;
    for (int i = 0; i < count; ++i)
      mats.push_back(up(quantize(randn({1 + int64_t(next() % 3000), k}, next(), 0.05f))));
    for (int64_t m : {1, 4, 8}) {
      const Tensor xd = gpu_->to_device(randn({m, k}, next()));
      cuda::QuantGemvArgs common = args(mats[0], nullptr, 0, xd.data<float>(), k, m, operand);
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
        cuda::QuantGemvArgs a = args(mats[i], alone[i].data<float>(), segs[i].ldo, xd.data<float>(), k, m, operand);
        a.accumulate = common.accumulate;
        cuda::quant_gemv(stream_, a);
        EXPECT_TRUE(same_bits(gpu_->to_host(together[i]), gpu_->to_host(alone[i])))
            << "K=" << k << " M=" << m << " segment " << i << " of " << count << " operand " << operand;
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

// A ring configuration of the bench: QuantGemvArgs::ring_operand / ring_pad and the sweep knobs.
struct RingVariant {
  int operand = 1, pad = 0, x = 0, ksplit = 0, stage = 0, warps = 0, bulk = 0;
  bool resident = false;  // one L2-resident copy of the matrix (no HBM reads)
};

TEST_F(CudaQuantRing, Bench) {
  auto probe = cuda::probe_device(0);
  ASSERT_TRUE(probe) << probe.status().to_string();
  const double hbm = probe->hbm_gbps;
  std::printf(
      "[quant-bench] ring columns: graph-replayed us and %% of HBM (%.0f GB/s measured): B-operand kernel -> "
      "old ring (session 9: weights as B, unpadded boxes, x kernel) -> new ring (weights as A, padded "
      "boxes, x built in the ring kernel where one round of its threads does it); at m=1, 4, 8 also: "
      "nopad (new, unpadded boxes), wb (new with weights as B), xk (new with the x kernel: the defaults "
      "since session 51), new with K splits k1..k8 (plan's marked *), stages s8, 16 consumer warps (w16), "
      "l2-old / l2-new (one L2-resident copy: no HBM reads)\n",
      hbm);
  struct Shape {
    int64_t n, k;
    const char* what;
  };
  const Shape shapes[] = {{8192, 4096, "4096->8192"},   {4096, 8192, "8192->4096"},  {2048, 4096, "4096->2048"},
                          {4096, 2048, "2048->4096"},   {4096, 4096, "4096->4096"},  {1536, 4096, "4096->1536"},
                          {16384, 1536, "1536->16384"}, {4096, 16384, "16384->4096"}, {4096, 12288, "12288->4096"},
                          {24576, 4096, "4096->24576"}};
  const RingVariant old_ring{1, 0, 0}, new_ring{2, 1, 1};
  for (const Shape& s : shapes) {
    const Matrix q = random_q4(s.n, s.k, static_cast<uint64_t>(s.n * 3 + s.k));
    const double bytes = static_cast<double>(q.nbytes());
    const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / q.nbytes() + 1));
    std::vector<Matrix> dev;
    for (int i = 0; i < copies; ++i) dev.push_back(up(q));
    for (int64_t m : {1, 2, 4, 8}) {
      const Tensor x = gpu_->to_device(randn({m, s.k}, 4));
      Tensor out = gpu_->empty({m, s.n});
      // ring false: the B-operand kernel.
      auto time_it = [&](bool ring, const RingVariant& v) {
        cuda::QuantGemvArgs a = args(dev[0], out.data<float>(), s.n, x.data<float>(), s.k, m, v.operand);
        a.ring = ring ? 1 : 0;
        a.b_operand = ring ? -1 : 1;
        a.ring_pad = v.pad;
        a.ring_x = v.x;
        a.ring_ksplit = v.ksplit;
        a.ring_stage = v.stage;
        a.ring_warps = v.warps;
        a.ring_bulk = v.bulk;
        return graph_seconds(stream_, 40, [&](int i) {
          const int c = v.resident ? 0 : i % copies;
          a.codes = dev[c].codes().raw();
          a.scales = dev[c].scales().raw();
          cuda::quant_gemv(stream_, a);
        });
      };
      auto pct = [&](double t) { return 100 * bytes / t / 1e9 / hbm; };
      const double tb = time_it(false, old_ring), to = time_it(true, old_ring), tn = time_it(true, new_ring);
      std::string sweep;
      if (m == 1 || m == 4 || m == 8) {
        auto add = [&](const std::string& what, const RingVariant& v) {
          const double t = time_it(true, v);
          char buf[80];
          std::snprintf(buf, sizeof buf, " %s: %.1f us %.1f%%", what.c_str(), t * 1e6, pct(t));
          sweep += buf;
        };
        RingVariant v = new_ring;
        v.pad = 0;
        add("nopad", v);
        v = new_ring;
        v.operand = 1;
        add("wb", v);
        v = new_ring;
        v.x = 0;
        add("xk", v);
        const int plan_ks = cuda::quant_ring_plan(s.n, s.k, sms_).ksplit;
        for (int ks : {1, 2, 4, 8}) {
          v = new_ring;
          v.ksplit = ks;
          add("k" + std::to_string(ks) + (ks == plan_ks ? "*" : ""), v);
        }
        v = new_ring;
        v.stage = 8;
        add("s8", v);
        v = new_ring;
        v.warps = 16;
        add("w16k" + std::to_string(cuda::quant_ring_plan(s.n, s.k, sms_, 0, 16).ksplit), v);
        v = old_ring;
        v.resident = true;
        add("l2-old", v);
        v = new_ring;
        v.resident = true;
        add("l2-new", v);
      }
      std::printf(
          "[quant-bench] ring q4 %-12s m=%lld bop %6.1f us %5.1f%% -> old ring %6.1f us %5.1f%% -> new ring %6.1f us "
          "%5.1f%% (%.2fx old)%s%s\n",
          s.what, static_cast<long long>(m), tb * 1e6, pct(tb), to * 1e6, pct(to), tn * 1e6, pct(tn), to / tn,
          sweep.empty() ? "" : ";", sweep.c_str());
    }
  }
  // quant_gemv_many: 3 x 4096->8192 (KDA q/k/v) and 2 x 4096->2048 (a shared expert's gate and up) in one
  // launch, B-operand kernel vs the old and new ring.
  for (auto [n, segs_n] : std::vector<std::pair<int64_t, int>>{{8192, 3}, {2048, 2}}) {
    const int64_t k = 4096;
    const Matrix q = random_q4(n, k, 12);
    const int copies = static_cast<int>(
        std::max<int64_t>(segs_n, segs_n * ((int64_t{400} << 20) / (segs_n * q.nbytes()) + 1)));
    std::vector<Matrix> dev;
    for (int i = 0; i < copies; ++i) dev.push_back(up(q));
    for (int64_t m : {1, 2, 4, 8}) {
      const Tensor x = gpu_->to_device(randn({m, k}, 4));
      std::vector<Tensor> outs;
      cuda::QuantGemvSegment segs[3];
      for (int i = 0; i < segs_n; ++i) {
        outs.push_back(gpu_->empty({m, n}));
        segs[i].out = outs[i].data<float>();
        segs[i].ldo = n;
        segs[i].n = n;
      }
      Tensor ws = gpu_->empty(
          {std::max<int64_t>(1, cuda::quant_gemv_many_workspace_bytes(m, segs, segs_n, k, sms_) / 4)});
      double t[4];
      for (int v = 0; v < 4; ++v) {  // bop, old ring, new ring, new ring with 16 consumer warps
        cuda::QuantGemvArgs common = args(dev[0], nullptr, 0, x.data<float>(), k, m, v >= 2 ? 2 : 1);
        common.workspace = ws.data<float>();
        common.ring = v ? 1 : 0;
        common.b_operand = v ? -1 : 1;
        common.ring_pad = v >= 2 ? 1 : 0;
        common.ring_x = v >= 2 ? 1 : 0;
        common.ring_warps = v == 3 ? 16 : 0;
        t[v] = graph_seconds(stream_, 20, [&](int i) {
          for (int j = 0; j < segs_n; ++j) {
            segs[j].codes = dev[(segs_n * i + j) % copies].codes().raw();
            segs[j].scales = dev[(segs_n * i + j) % copies].scales().raw();
          }
          cuda::quant_gemv_many(stream_, common, segs, segs_n);
        });
      }
      const double bytes = segs_n * static_cast<double>(q.nbytes());
      auto pct = [&](double s) { return 100 * bytes / s / 1e9 / hbm; };
      std::printf(
          "[quant-bench] ring many q4 %d x 4096->%lld m=%lld bop %6.1f us %5.1f%% -> old ring %6.1f us %5.1f%% -> new "
          "ring %6.1f us %5.1f%% (%.2fx old); new w16: %.1f us %.1f%%\n",
          segs_n, static_cast<long long>(n), static_cast<long long>(m), t[0] * 1e6, pct(t[0]), t[1] * 1e6, pct(t[1]),
          t[2] * 1e6, pct(t[2]), t[1] / t[2], t[3] * 1e6, pct(t[3]));
    }
  }
}

// A few plain calls for ncu (run it with --gtest_filter=*ProfileOnce): 4096->8192 at m = 1 and 8 and
// 2048->4096 at m = 1, the old ring (weights as B, unpadded boxes, x kernel) then the new (weights as A,
// padded boxes, x built in the ring kernel), each on its own copy of the matrix.
TEST_F(CudaQuantRing, ProfileOnce) {
  for (auto [n, k, m] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{8192, 4096, 1}, {8192, 4096, 8},
                                                                          {4096, 2048, 1}}) {
    const Matrix q = random_q4(n, k, 3);
    std::vector<Matrix> dev;
    for (int i = 0; i < 2; ++i) dev.push_back(up(q));
    const Tensor x = gpu_->to_device(randn({m, k}, 4));
    Tensor out = gpu_->empty({m, n});
    for (int v = 0; v < 2; ++v) {  // the old ring, the new ring
      cuda::QuantGemvArgs a = args(dev[v], out.data<float>(), n, x.data<float>(), k, m, v ? 2 : 1);
      a.ring_pad = v;
      a.ring_x = v;
      cuda::quant_gemv(stream_, a);
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

}  // namespace
}  // namespace tf
