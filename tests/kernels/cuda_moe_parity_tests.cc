// Ops::moe_experts on CUDA against the CPU reference, at the model's EXACT_ROWS (8) and
// at 64 and 0, so that both device paths run: the row-independent f32 kernels (up to
// exact_rows tokens, f32 weights, shapes without 16-byte rows) and the BF16 tensor-core
// tiles (above exact_rows with bf16 weights), over awkward shapes: rows 1, 3, 8, 9, 17,
// 64, 65, 1024; every expert active; one expert taking every token; top-8 of 288.
// Also: every call is capturable in a CUDA graph (replay == eager, bit for bit), rows do
// not depend on their batch-mates on the tensor cores either, bad ids are reported.
//
// Tolerances (relative to the largest reference magnitude): 1e-5 for the f32 path,
// 1e-2 on the tensor cores (x and the SwiGLU activations are rounded to bf16 there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "fp8_expert_stack_testing.h"
#include "test_tensors.h"

namespace tf {
namespace {

double max_rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    if (!std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU";
    for (int64_t rows : {0, 8, 64}) {
      auto g = make_cuda_ops(0, rows);
      ASSERT_TRUE(g) << g.status().to_string();
      gpu_.push_back(std::move(*g));
    }
    cpu_ = make_cpu_ops();
  }
  // The backend whose exact_rows is `rows` (0, 8 or 64).
  Ops& gpu(int64_t rows) { return *gpu_[rows == 0 ? 0 : rows == 8 ? 1 : 2]; }

  std::unique_ptr<Ops> cpu_;
  std::vector<std::unique_ptr<Ops>> gpu_;
};

struct Case {
  int64_t t, k, e, h, i;
  int32_t all_take;  // -1: none
  const char* what;
};

TEST_F(CudaMoe, MatchesTheCpuOnBothPaths) {
  const float limit = 2.0f;  // small enough that both clamps act
  const std::vector<Case> cases = {
      {1, 8, 288, 256, 128, -1, "top-8 of 288"},   {3, 8, 288, 256, 128, -1, "top-8 of 288"},
      {8, 8, 288, 256, 128, -1, "top-8 of 288"},   {9, 8, 288, 256, 128, -1, "top-8 of 288"},
      {17, 8, 288, 256, 128, -1, "top-8 of 288"},  {64, 8, 288, 256, 128, -1, "top-8 of 288"},
      {65, 8, 288, 256, 128, -1, "top-8 of 288"},  {9, 8, 8, 128, 64, -1, "every expert active"},
      {17, 8, 8, 128, 64, -1, "every expert active"}, {64, 8, 8, 128, 64, -1, "every expert active"},
      {17, 4, 16, 128, 72, 3, "one expert takes every token"}, {65, 4, 16, 128, 72, 3, "one expert takes every token"},
      {33, 2, 5, 67, 9, -1, "rows not 16-byte vectors"},      {17, 3, 7, 136, 24, 6, "I = 24 (partial K chunk)"},
      {40, 8, 12, 520, 40, -1, "H = 520 (partial K chunk)"}};
  for (const Case& c : cases) {
    const Tensor gu = randn({c.e, 2 * c.i, c.h}, 171, 0.2f), dn = randn({c.e, c.h, c.i}, 172, 0.2f);
    const Tensor x = randn({c.t, c.h}, 173), w = randn({c.t, c.k}, 174, 0.5f);
    const Tensor ids = moe_route_ids(c.t, c.k, c.e, 175, c.all_take);
    for (bool bf16 : {false, true}) {
      const Tensor gw = bf16 ? gu.to_dtype(DType::kBF16) : gu, dw = bf16 ? dn.to_dtype(DType::kBF16) : dn;
      Tensor ref = Tensor::empty({c.t, c.h}, DType::kF32);
      cpu_->moe_experts(ref, x, ids, w, gw, dw, limit);
      for (int64_t rows : {8, 64}) {
        Ops& g = gpu(rows);
        Tensor out = g.empty({c.t, c.h});
        g.moe_experts(out, g.to_device(x), g.to_device(ids), g.to_device(w), g.to_device(gw), g.to_device(dw), limit);
        const bool tc = bf16 && c.t > rows && c.h % 8 == 0 && c.i % 8 == 0;
        const double err = max_rel_err(ref, g.to_host(out)), tol = tc ? 1e-2 : 1e-5;
        EXPECT_LE(err, tol) << c.what << (bf16 ? " bf16" : " f32") << " T=" << c.t << " k=" << c.k << " E=" << c.e
                            << " H=" << c.h << " I=" << c.i << " exact_rows=" << rows;
        std::printf("[moe] %-30s %s T=%-4lld k=%lld E=%-3lld H=%-3lld I=%-3lld exact_rows=%-2lld %-12s err %.2g\n",
                    c.what, bf16 ? "bf16" : "f32 ", static_cast<long long>(c.t), static_cast<long long>(c.k),
                    static_cast<long long>(c.e), static_cast<long long>(c.h), static_cast<long long>(c.i),
                    static_cast<long long>(rows), tc ? "tensor-cores" : "f32", err);
      }
    }
  }
}

TEST_F(CudaMoe, PrefillChunkOf1024Rows) {
  const int64_t t = 1024, k = 8, e = 288, h = 256, i = 128;
  const Tensor gu = randn({e, 2 * i, h}, 201, 0.1f).to_dtype(DType::kBF16);
  const Tensor dn = randn({e, h, i}, 202, 0.1f).to_dtype(DType::kBF16);
  const Tensor x = randn({t, h}, 203), w = randn({t, k}, 204, 0.5f), ids = moe_route_ids(t, k, e, 205, 17);
  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  cpu_->moe_experts(ref, x, ids, w, gu, dn, 10.0f);
  Ops& g = gpu(8);
  Tensor out = g.empty({t, h});
  g.moe_experts(out, g.to_device(x), g.to_device(ids), g.to_device(w), g.to_device(gu), g.to_device(dn), 10.0f);
  const double err = max_rel_err(ref, g.to_host(out));
  EXPECT_LE(err, 1e-2);
  std::printf("[moe] prefill T=1024 top-8 of 288 (expert 17 in every row) bf16 err %.2g\n", err);
}

TEST_F(CudaMoe, RowsDoNotDependOnTheBatchOnTensorCoresEither) {
  // exact_rows 0: every call takes the tensor cores, whatever its size (tile of 16, 32 or 64 rows).
  const int64_t t = 64, k = 8, e = 24, h = 256, i = 72;
  const Tensor x = randn({t, h}, 181), w = randn({t, k}, 182, 0.5f), ids = moe_route_ids(t, k, e, 183, 5);
  const Tensor gu = randn({e, 2 * i, h}, 184, 0.1f).to_dtype(DType::kBF16);
  const Tensor dn = randn({e, h, i}, 185, 0.1f).to_dtype(DType::kBF16);
  Ops& g = gpu(0);
  const Tensor dgu = g.to_device(gu), ddn = g.to_device(dn);
  Tensor all = g.empty({t, h});
  g.moe_experts(all, g.to_device(x), g.to_device(ids), g.to_device(w), dgu, ddn, 10.0f);
  const Tensor h_all = g.to_host(all);
  for (int64_t r : {0, 2, 31, 63}) {
    for (int64_t b0 : {r, std::max<int64_t>(0, r - 2), std::max<int64_t>(0, r - 20)}) {
      const int64_t n = r - b0 + 1;
      Tensor part = g.empty({n, h});
      g.moe_experts(part, g.to_device(x.slice(0, b0, r + 1).contiguous()),
                    g.to_device(ids.slice(0, b0, r + 1).contiguous()), g.to_device(w.slice(0, b0, r + 1).contiguous()),
                    dgu, ddn, 10.0f);
      const Tensor hp = g.to_host(part);
      int64_t bad = 0;
      for (int64_t c = 0; c < h; ++c)
        bad += float_bits(hp.data<float>()[(n - 1) * h + c]) != float_bits(h_all.data<float>()[r * h + c]);
      EXPECT_EQ(bad, 0) << "row " << r << " in a batch of " << n;
    }
  }
  std::printf("[moe] tensor-core rows bit-identical alone / in batches of 3, 21, 64\n");
}

TEST_F(CudaMoe, CapturedCallsEqualEagerOnes) {
  // Above exact_rows (tensor cores) and at most exact_rows (f32): no host sync in either.
  const int64_t k = 8, e = 32, h = 256, i = 128;
  const Tensor gu = randn({e, 2 * i, h}, 211, 0.1f).to_dtype(DType::kBF16);
  const Tensor dn = randn({e, h, i}, 212, 0.1f).to_dtype(DType::kBF16);
  Ops& g = gpu(8);
  ASSERT_TRUE(g.supports_graphs());
  const Tensor dgu = g.to_device(gu), ddn = g.to_device(dn);
  for (int64_t t : {4, 16, 64, 100}) {
    const Tensor x = g.to_device(randn({t, h}, 213)), w = g.to_device(randn({t, k}, 214, 0.5f));
    const Tensor ids = g.to_device(moe_route_ids(t, k, e, 215, -1));
    Tensor eager = g.empty({t, h}), replayed = g.zeros({t, h});
    g.moe_experts(eager, x, ids, w, dgu, ddn, 10.0f);
    auto graph = g.capture([&] { g.moe_experts(replayed, x, ids, w, dgu, ddn, 10.0f); });
    ASSERT_TRUE(graph) << "T=" << t << ": " << graph.status().to_string();
    ASSERT_TRUE(g.replay(**graph).is_ok());
    EXPECT_TRUE(same_bits(g.to_host(eager), g.to_host(replayed))) << "T=" << t;
  }
  std::printf("[moe] captured == eager at T=4, 16, 64, 100 (exact_rows 8)\n");
}

TEST_F(CudaMoe, DuplicateIdsKZeroAndBadIdsOnTensorCores) {
  const int64_t t = 12, h = 64, i = 16, e = 4, k = 3;
  const Tensor gu = randn({e, 2 * i, h}, 191, 0.3f).to_dtype(DType::kBF16);
  const Tensor dn = randn({e, h, i}, 192, 0.3f).to_dtype(DType::kBF16);
  const Tensor x = randn({t, h}, 193), w = randn({t, k}, 194);
  Tensor ids = moe_route_ids(t, k, e, 195, -1);
  ids.data<int32_t>()[0] = ids.data<int32_t>()[1];  // row 0 names one expert twice: counted twice
  ids.data<int32_t>()[k * 5 + 2] = ids.data<int32_t>()[k * 5 + 1];
  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  cpu_->moe_experts(ref, x, ids, w, gu, dn, 10.0f);
  Ops& g = gpu(8);
  Tensor out = g.empty({t, h});
  g.moe_experts(out, g.to_device(x), g.to_device(ids), g.to_device(w), g.to_device(gu), g.to_device(dn), 10.0f);
  EXPECT_LE(max_rel_err(ref, g.to_host(out)), 1e-2);
  // k = 0 routes nothing: zeros.
  Tensor zk = g.to_device(Tensor::from_floats({t, h}, std::vector<float>(t * h, 7.0f)));
  g.moe_experts(zk, g.to_device(x), g.empty({t, 0}, DType::kI32), g.empty({t, 0}), g.to_device(gu),
                g.to_device(dn), 10.0f);
  EXPECT_EQ(g.to_host(zk).to_vector(), std::vector<float>(t * h, 0.0f));
  // An id outside [0, E) cannot throw inside the kernel: the next sync reports it.
  ids.data<int32_t>()[k * 7] = static_cast<int32_t>(e);
  g.moe_experts(out, g.to_device(x), g.to_device(ids), g.to_device(w), g.to_device(gu), g.to_device(dn), 10.0f);
  try {
    (void)g.to_host(out);
    FAIL() << "expected an out-of-range error";
  } catch (const StatusError& err) {
    EXPECT_EQ(err.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(err.status().message().find("moe_experts"), std::string::npos) << err.status().message();
  }
}

// moe_experts_fp8 (the release's FP8 experts): the device-grouped kernels (in chunks of 64
// tokens above that) against the CPU backend's op on the same stack, over vector rows and
// rows that are not (I = 72: partial scale blocks, 72-byte rows), one expert taking every
// token: exact to f32 rounding and capturable (replay == eager, bit for bit); from 256
// tokens the per-expert default (bf16 tensor cores, 1e-2).
TEST_F(CudaMoe, Fp8ExpertsMatchTheCpu) {
  const float limit = 2.0f;
  const std::vector<Case> cases = {
      {1, 8, 288, 256, 128, -1, "top-8 of 288"},       {3, 8, 288, 256, 128, -1, "top-8 of 288"},
      {9, 8, 40, 256, 256, -1, "top-8 of 40"},         {64, 8, 288, 256, 128, -1, "top-8 of 288"},
      {65, 8, 288, 256, 128, -1, "top-8 of 288 (two chunks)"},
      {150, 8, 12, 256, 128, 5, "every token on expert 5 (three chunks)"},
      {300, 8, 24, 256, 128, 5, "prefill (per-expert default)"},
      {17, 4, 16, 192, 72, 3, "I = 72 (partial blocks, byte rows)"},
      {5, 2, 6, 200, 136, -1, "H = 200, I = 136 (partial blocks)"}};
  for (const Case& c : cases) {
    const Fp8ExpertStack st = random_fp8_stack(c.e, c.i, c.h, 301);
    const Tensor x = randn({c.t, c.h}, 302), w = randn({c.t, c.k}, 303, 0.5f);
    const Tensor ids = moe_route_ids(c.t, c.k, c.e, 304, c.all_take);
    Tensor ref = Tensor::empty({c.t, c.h}, DType::kF32);
    cpu_->moe_experts_fp8(ref, x, ids, w, st, limit);
    Ops& g = gpu(8);
    const Fp8ExpertStack d = fp8_stack_on(g, st);
    Tensor out = g.empty({c.t, c.h});
    g.moe_experts_fp8(out, g.to_device(x), g.to_device(ids), g.to_device(w), d, limit);
    // From kMoeFp8PrefillTokens tokens each expert's rows go through the FP8 matmul,
    // whose prefill path rounds x and the dequantized weights to bf16 for cuBLAS (3e-2:
    // these random codes span e4m3's whole range, so a few large products dominate;
    // measured 1.2e-2 on an H200, run3s14).
    const bool prefill = c.t >= 256;
    const double err = max_rel_err(ref, g.to_host(out));
    EXPECT_LE(err, prefill ? 3e-2 : 1e-5) << c.what << " T=" << c.t << " E=" << c.e << " H=" << c.h << " I=" << c.i;
    std::printf("[moe-fp8] %-36s T=%-3lld k=%lld E=%-3lld H=%-3lld I=%-3lld err %.2g\n", c.what,
                static_cast<long long>(c.t), static_cast<long long>(c.k), static_cast<long long>(c.e),
                static_cast<long long>(c.h), static_cast<long long>(c.i), err);
    if (prefill) continue;  // (host grouping: not capturable, like any prefill)
    Tensor replayed = g.zeros({c.t, c.h});
    const Tensor dx = g.to_device(x), di = g.to_device(ids), dw = g.to_device(w);
    auto graph = g.capture([&] { g.moe_experts_fp8(replayed, dx, di, dw, d, limit); });
    ASSERT_TRUE(graph) << c.what << ": " << graph.status().to_string();
    ASSERT_TRUE(g.replay(**graph).is_ok());
    EXPECT_TRUE(same_bits(g.to_host(out), g.to_host(replayed))) << c.what << " T=" << c.t;
  }
}

TEST_F(CudaMoe, Fp8RowsDoNotDependOnTheBatch) {
  const int64_t t = 24, k = 4, e = 10, h = 256, i = 128;
  const Fp8ExpertStack st = random_fp8_stack(e, i, h, 311);
  Ops& g = gpu(8);
  const Fp8ExpertStack d = fp8_stack_on(g, st);
  const Tensor x = randn({t, h}, 312), w = randn({t, k}, 313, 0.5f), ids = moe_route_ids(t, k, e, 314, 2);
  Tensor all = g.empty({t, h});
  g.moe_experts_fp8(all, g.to_device(x), g.to_device(ids), g.to_device(w), d, 10.0f);
  const Tensor h_all = g.to_host(all);
  for (int64_t r : {0, 7, 23}) {
    Tensor one = g.empty({1, h});
    g.moe_experts_fp8(one, g.to_device(x.slice(0, r, r + 1).contiguous()),
                      g.to_device(ids.slice(0, r, r + 1).contiguous()), g.to_device(w.slice(0, r, r + 1).contiguous()),
                      d, 10.0f);
    const Tensor h1 = g.to_host(one);
    int64_t bad = 0;
    for (int64_t c = 0; c < h; ++c) bad += float_bits(h1.data<float>()[c]) != float_bits(h_all.data<float>()[r * h + c]);
    EXPECT_EQ(bad, 0) << "row " << r;
  }
}

}  // namespace
}  // namespace tf
