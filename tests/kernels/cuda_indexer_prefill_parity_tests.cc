// The tensor-core DSA indexer scores (cuda_indexer_prefill.cu, what Ops::indexer_scores
// runs on CUDA for 64- or 128-wide heads) against the CPU op.
//
// Precision contract: q and the pooled keys are split into two bf16 parts (three mma
// per product), so a score matches the f32 CPU op to a few 1e-6 of the largest score
// (H200, 2026-11-30: 3.8e-6 .. 5.5e-6); the tests hold 1e-5, as the f32 kernel's
// parity test. Non-candidates are the lowest float on both. The top-k pool selection
// is discrete: the GPU may pick differently only where two scores agree within that
// tolerance, so the selection test checks "same pools, except ones whose CPU score
// ties the row's k-th score within 1e-5 of the scale" (and prints how many rows differ
// at all: 0 of 256 here; 5 of 8192 and 7 of 1024 rows in cuda_prefill_bench, all ties).
// The transformers reference itself rounds q and the pooled keys to bf16 (spec 3.6), so
// its selection differs from the f32 CPU op's at a far coarser level than this.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_indexer_prefill.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

constexpr double kTol = 1e-5;

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Largest |ref - got| over the largest |ref| among real scores (the lowest float marks
// a non-candidate; both must agree on those exactly).
double score_err(const Tensor& ref, const Tensor& got, int64_t* mismatched_marks) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1e-30;
  *mismatched_marks = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool ma = a[i] == -FLT_MAX, mb = b[i] == -FLT_MAX;
    if (ma != mb) ++*mismatched_marks;
    if (ma || mb) continue;
    if (std::isnan(b[i]) || std::isinf(b[i])) return INFINITY;
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

class CudaIndexerPrefill : public CpuCudaTest {
 protected:
  // Scores of t rows over p pools on both backends; returns the CPU and GPU scores.
  std::pair<Tensor, Tensor> scores(int64_t t, int64_t p, int64_t h, int64_t d, const std::vector<int32_t>& cand,
                                   uint32_t seed, int64_t q_offset = 0) {
    const Tensor q = randn({t, h, d}, seed), keys = randn({p, d}, seed + 1), w = randn({t, h}, seed + 2, 0.2f);
    Tensor ref = Tensor::empty({t, p}, DType::kF32);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    cpu_->indexer_scores(ref, q, keys, w, ints(cand), scale);
    // q_offset > 0 places q at an odd element offset on the device (not 16-byte aligned).
    Tensor qbuf = gpu_->empty({t * h * d + q_offset});
    Tensor qd = qbuf.slice(0, q_offset, q_offset + t * h * d);
    gpu_->copy(qd, up(q.reshape({t * h * d})));
    Tensor out = gpu_->empty({t, p});
    gpu_->indexer_scores(out, qd.reshape({t, h, d}), up(keys), up(w), up(ints(cand)), scale);
    return {ref, down(out)};
  }
};

TEST_F(CudaIndexerPrefill, ShapesItCovers) {
  // Also on a GPU with 99 KB of shared memory per block (a DGX Spark): 32-row blocks there.
  EXPECT_TRUE(cuda::indexer_scores_mma_supported(32, 128));
  EXPECT_TRUE(cuda::indexer_scores_mma_supported(64, 128));
  EXPECT_TRUE(cuda::indexer_scores_mma_supported(7, 64));
  EXPECT_FALSE(cuda::indexer_scores_mma_supported(32, 96));
  EXPECT_FALSE(cuda::indexer_scores_mma_supported(65, 128));
  EXPECT_FALSE(cuda::indexer_scores_mma_supported(0, 128));
}

TEST_F(CudaIndexerPrefill, MatchesTheCpuOp) {
  struct Case {
    int64_t h, d;
  };
  for (const Case c : {Case{32, 128}, Case{7, 64}, Case{64, 128}}) {
    for (int64_t t : {1, 63, 64, 65, 200}) {
      for (int64_t p : {1, 127, 128, 129, 300}) {
        for (int mode = 0; mode < 2; ++mode) {
          // mode 0: causal pools of 4 as a prompt gives them ((i + 1 + offset) / 4);
          // mode 1: random counts in [-1, p + 2] (none, some, all, more than all).
          std::vector<int32_t> cand(static_cast<size_t>(t));
          std::mt19937 rng(static_cast<uint32_t>(7 * t + p));
          for (int64_t i = 0; i < t; ++i)
            cand[i] = mode == 0 ? static_cast<int32_t>(std::min<int64_t>((i + 1 + 4 * p - 4 * t) / 4, p))
                                : static_cast<int32_t>(rng() % static_cast<uint32_t>(p + 4)) - 1;
          const auto [ref, got] = scores(t, p, c.h, c.d, cand, static_cast<uint32_t>(300 + t + p + mode));
          int64_t marks = 0;
          const double e = score_err(ref, got, &marks);
          const std::string tag = "H=" + std::to_string(c.h) + " D=" + std::to_string(c.d) + " T=" +
                                  std::to_string(t) + " P=" + std::to_string(p) + (mode ? " random" : " causal");
          if (t == 200 && p == 300)
            std::printf("[parity] indexer_scores (tensor cores) %-32s max rel err %.3g (tol %.0e)\n", tag.c_str(), e,
                        kTol);
          EXPECT_LE(e, kTol) << tag;
          EXPECT_EQ(marks, 0) << tag << ": non-candidate marks differ";
        }
      }
    }
  }
}

TEST_F(CudaIndexerPrefill, UnalignedQFallsBackAndStillMatches) {
  std::vector<int32_t> cand(40);
  for (int i = 0; i < 40; ++i) cand[i] = i * 3;
  const auto [ref, got] = scores(40, 100, 32, 128, cand, 501, /*q_offset=*/1);
  int64_t marks = 0;
  EXPECT_LE(score_err(ref, got, &marks), kTol);
  EXPECT_EQ(marks, 0);
}

// The model's use: top-(2048 / 4) pools of each row's scores. The GPU's selection equals
// the CPU's except for pools whose score ties the row's k-th within the tolerance.
TEST_F(CudaIndexerPrefill, TopkSelectionAgreesExceptTies) {
  const int64_t t = 256, p = 1024, h = 32, d = 128, k = 512;
  std::vector<int32_t> cand(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) cand[i] = static_cast<int32_t>((4 * (p - t) + 4 * i + 4) / 4);  // 769 .. 1024
  const auto [ref, got] = scores(t, p, h, d, cand, 601);
  Tensor rv = Tensor::empty({t, k}, DType::kF32), ri = Tensor::empty({t, k}, DType::kI32);
  cpu_->topk(rv, ri, ref, static_cast<int>(k));
  Tensor gv = gpu_->empty({t, k}), gi = gpu_->empty({t, k}, DType::kI32);
  gpu_->topk(gv, gi, up(got), static_cast<int>(k));
  const Tensor gih = down(gi);
  double scale = 0;
  for (float x : ref.to_vector())
    if (x != -FLT_MAX) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  int64_t rows_differing = 0, pools_differing = 0;
  for (int64_t r = 0; r < t; ++r) {
    const int32_t* a = ri.data<int32_t>() + r * k;
    const int32_t* b = gih.data<int32_t>() + r * k;
    const std::set<int32_t> sa(a, a + k), sb(b, b + k);
    if (sa == sb) continue;
    ++rows_differing;
    const double kth = rv.data<float>()[r * k + k - 1];
    for (const std::set<int32_t>* s : {&sa, &sb})
      for (int32_t pool : *s) {
        if ((s == &sa ? sb : sa).count(pool)) continue;
        ++pools_differing;
        ASSERT_GE(pool, 0);
        ASSERT_LT(pool, p);
        const double v = ref.data<float>()[r * p + pool];
        EXPECT_LE(std::fabs(v - kth), kTol * scale) << "row " << r << " pool " << pool << ": score " << v
                                                    << " vs k-th " << kth << " is no tie";
      }
  }
  std::printf("[parity] indexer top-%lld of %lld pools: %lld of %lld rows pick differently (%lld pools, all ties)\n",
              static_cast<long long>(k), static_cast<long long>(p), static_cast<long long>(rows_differing),
              static_cast<long long>(t), static_cast<long long>(pools_differing));
}

}  // namespace
}  // namespace tf
