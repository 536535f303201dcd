// The tensor-core MLA sparse attention for prefill rows (cuda_mla_prefill.cu, what
// Ops::mla_sparse_attention runs on CUDA from 16 rows on for heads a multiple of 16)
// against the CPU op: f32, bf16 and fp8 latent caches over a scrambled page table;
// widths 64 and 512; 16 and 64 heads; rows 16, 17 and 129; 37 or 2051 indices per row
// (the model's 2048 + pool tail), with repeats, -1s, out-of-range tokens and a row
// with none (zeros). Enough tokens (300) that a row spans several 32-token tiles.
//
// Tolerance 1e-5 of the largest reference magnitude where q and the probabilities are
// split into two parts (TF32 for the f32 cache, whose latents are split too: H200,
// 2026-11-29: <= 7.3e-6; BF16 hi/lo on the bf16/fp8 kernel, cuda_mla_prefill_mma.cu, whose
// latents are exact in bf16, with TF_MLA_PREFILL_SPLIT=1), so the tensor-core products keep
// about f32 accuracy. The bf16/fp8 kernel's default rounds q and the probabilities to bf16
// once each, as the reference's bf16 attention does: kTolBf16 there (each a 2^-9 relative
// rounding; the tests run both ways).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_mla_prefill.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_memory.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

constexpr double kTol = 1e-5;
constexpr double kTolBf16 = 1e-2;

// Each precision of the bf16/fp8 kernel in turn (the split pairs, then bf16 once), and its
// tolerance for a cache of dtype dt (an f32 cache takes the TF32 kernel either way).
template <typename Body>
void each_precision(DType dt, Body body) {
  const bool saved = cuda::mla_prefill_split().load();
  for (bool split : {true, false}) {
    cuda::mla_prefill_split() = split;
    body(split ? " split" : " bf16", split || dt == DType::kF32 ? kTol : kTolBf16);
  }
  cuda::mla_prefill_split() = saved;
}

// A latent cache of `tokens` random rows (normal, `sd`) on both backends, its pages in
// a scrambled order (the same table on each).
struct PagedCache {
  Tensor hpages, hscales, dpages, dscales, htable, dtable;
  LatentPagesView hv, dv;
};

class CudaMlaPrefill : public CpuCudaTest {
 protected:
  PagedCache paged_cache(DType dt, int64_t page_size, int64_t num_pages, int64_t r, int64_t tokens,
                         uint32_t table_seed, uint32_t lat_seed, float sd) {
    PagedCache c;
    const int64_t es = static_cast<int64_t>(dtype_size(dt));
    std::vector<int32_t> table(num_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(table_seed));
    c.hpages = Tensor::zeros({num_pages * page_size * r * es}, DType::kU8);
    c.hscales = Tensor::zeros({num_pages * page_size}, DType::kF32);
    c.dpages = gpu_->zeros({num_pages * page_size * r * es}, DType::kU8);
    c.dscales = gpu_->zeros({num_pages * page_size}, DType::kF32);
    c.htable = i32_tensor(table);
    c.dtable = gpu_->to_device(c.htable);
    c.hv = {c.hpages.raw(), c.hscales.data<float>(), dt, page_size, r, page_size * r, c.htable.data<int32_t>(), 0};
    c.dv = {c.dpages.raw(), c.dscales.data<float>(), dt, page_size, r, page_size * r, c.dtable.data<int32_t>(), 0};
    const Tensor lat = randn({tokens, r}, lat_seed, sd);
    cpu_->latent_store(c.hv, c.hpages.raw(), c.hscales.data<float>(), lat, 0);
    gpu_->latent_store(c.dv, c.dpages.raw(), c.dscales.data<float>(), gpu_->to_device(lat), 0);
    c.hv.num_tokens = c.dv.num_tokens = tokens;
    return c;
  }
};

// [t, w] indices: each row w distinct tokens of 0..tokens-1 in random order.
Tensor distinct_indices(int64_t t, int64_t w, int64_t tokens, uint32_t seed) {
  std::vector<int32_t> idx(static_cast<size_t>(t * w)), perm(static_cast<size_t>(tokens));
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < t; ++i) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy(perm.begin(), perm.begin() + w, idx.begin() + i * w);
  }
  return i32_tensor(idx).reshape({t, w});
}

TEST_F(CudaMlaPrefill, ShapesItCovers) {
  // The model's single-GPU shape (64 heads) needs an H100 / H200's 227 KB of shared memory per
  // block; with less (a DGX Spark's 99 KB, or TF_SMEM_PER_BLOCK) it goes to the split-token
  // kernels. Its 32 and 16 heads per rank at TP 2 / 4 fit 99 KB (the q-in-registers form).
  const bool large = cuda::device_limits().smem_per_block >= 227 * 1024;
  EXPECT_EQ(cuda::mla_prefill_supported(64, 512, 2051, DType::kF8E4M3), large);
  EXPECT_TRUE(cuda::mla_prefill_supported(16, 64, 37, DType::kF32));
  EXPECT_FALSE(cuda::mla_prefill_supported(5, 512, 2048, DType::kBF16));   // heads not a multiple of 16
  EXPECT_FALSE(cuda::mla_prefill_supported(64, 72, 2048, DType::kBF16));   // width not a multiple of 16
  EXPECT_FALSE(cuda::mla_prefill_supported(128, 512, 2048, DType::kBF16)); // more than 64 heads
  // The BF16 kernel (bf16/fp8 caches): the model's shape and the test shapes below.
  EXPECT_EQ(cuda::mla_prefill_mma_supported(64, 512, 2051, DType::kF8E4M3), large);
  EXPECT_EQ(cuda::mla_prefill_mma_supported(64, 512, 2051, DType::kBF16), large);
  EXPECT_TRUE(cuda::mla_prefill_mma_supported(16, 512, 37, DType::kBF16));
  EXPECT_TRUE(cuda::mla_prefill_mma_supported(32, 512, 2051, DType::kF8E4M3));
  EXPECT_TRUE(cuda::mla_prefill_mma_supported(16, 512, 2051, DType::kF8E4M3));
  EXPECT_TRUE(cuda::mla_prefill_supported(32, 512, 2051, DType::kBF16));
  EXPECT_TRUE(cuda::mla_prefill_mma_supported(64, 64, 37, DType::kBF16));
  EXPECT_FALSE(cuda::mla_prefill_mma_supported(64, 512, 2051, DType::kF32));  // f32: the TF32 kernel
  EXPECT_FALSE(cuda::mla_prefill_mma_supported(16, 64, 37, DType::kBF16));    // 4 columns per warp
  EXPECT_FALSE(cuda::mla_prefill_mma_supported(48, 512, 37, DType::kBF16));   // 3 head tiles
  EXPECT_FALSE(cuda::mla_prefill_mma_supported(64, 1024, 37, DType::kBF16));  // wider than 512
}

// The model's shape over a long prompt: 2051 distinct tokens per row (65 tiles, the last
// partial), rows at the end of a 2600-token cache, pages in scrambled order; 64 heads (one
// GPU) and the 32 / 16 heads per rank of TP 2 / 4.
TEST_F(CudaMlaPrefill, ManyTilesMatchTheCpuOp) {
  const int64_t page_size = 64, num_pages = 41, tokens = 2600, r = 512, t = 16, w = 2051;
  for (const auto& [dt, heads] : std::vector<std::pair<DType, int64_t>>{
           {DType::kBF16, 64}, {DType::kF8E4M3, 64}, {DType::kF8E4M3, 32}, {DType::kBF16, 16}}) {
    const PagedCache c = paged_cache(dt, page_size, num_pages, r, tokens, 221, 222, 1.5f);
    const LatentPagesView &hv = c.hv, &dv = c.dv;
    const Tensor hidx = distinct_indices(t, w, tokens, 223);
    const Tensor q = randn({t, heads, r}, 224, 0.3f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(r));
    Tensor ref = Tensor::empty({t, heads, r}, DType::kF32);
    cpu_->mla_sparse_attention(ref, q, hv, hidx, scale);
    each_precision(dt, [&](const char* how, double tol) {
      Tensor out = gpu_->empty({t, heads, r});
      gpu_->mla_sparse_attention(out, gpu_->to_device(q), dv, gpu_->to_device(hidx), scale);
      const double e = parity_rel_err(ref, gpu_->to_host(out));
      std::printf(
          "[parity] mla_sparse_attention (prefill) %s%s H=%d 2051 distinct of 2600 tokens max rel err %.3g "
          "(tol "
          "%.0e)\n",
          dtype_name(dt), how, static_cast<int>(heads), e, tol);
      EXPECT_LE(e, tol) << dtype_name(dt) << how << " H=" << heads;
    });
  }
}

// The BF16 kernel's two ways to a row's token list (a bitmap of the cache's tokens, the
// default where it fits; the sort, TF_MLA_PREFILL_SORT=1), and its softmax step's heads side
// by side or in turn (TF_MLA_PREFILL_HEADS_IN_TURN=1), give the same bits, at the
// model's shape and at 16 / 32 heads, with repeats, -1s, out-of-range tokens and a row
// without tokens; each within the tolerance of the CPU op.
TEST_F(CudaMlaPrefill, BitmapAndSortGiveTheSameBits) {
  const int64_t page_size = 64, num_pages = 41, tokens = 2600;
  const bool saved = cuda::mla_prefill_sort_tokens().load();
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    for (const auto& [heads, r, t, w] : std::vector<std::array<int64_t, 4>>{
             {64, 512, 18, 2051}, {32, 512, 16, 300}, {16, 512, 17, 77}, {64, 64, 16, 1000}}) {
      const PagedCache c = paged_cache(dt, page_size, num_pages, r, tokens, 231, 232, 1.5f);
      std::mt19937 rng(static_cast<uint32_t>(233 + heads + w));
      std::uniform_int_distribution<int32_t> pick(-2, static_cast<int32_t>(tokens) + 3);
      std::vector<int32_t> idx(static_cast<size_t>(t * w));
      for (auto& i : idx) i = pick(rng);
      for (int64_t j = 0; j < w; ++j) idx[2 * w + j] = -1;  // row 2: no token (zeros)
      const Tensor hidx = i32_tensor(idx).reshape({t, w});
      const Tensor q = randn({t, heads, r}, 234, 0.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(r));
      const Tensor dq = gpu_->to_device(q), didx = gpu_->to_device(hidx);
      Tensor ref = Tensor::empty({t, heads, r}, DType::kF32);
      cpu_->mla_sparse_attention(ref, q, c.hv, hidx, scale);
      each_precision(dt, [&](const char* how, double tol) {
        std::vector<Tensor> got;
        for (bool sort : {false, true}) {
          Tensor out = gpu_->empty({t, heads, r});
          cuda::mla_prefill_sort_tokens() = sort;
          gpu_->mla_sparse_attention(out, dq, c.dv, didx, scale);
          cuda::mla_prefill_sort_tokens() = saved;
          got.push_back(gpu_->to_host(out));
          const std::string tag = std::string(dtype_name(dt)) + how + " H=" + std::to_string(heads) +
                                  " R=" + std::to_string(r) + " W=" + std::to_string(w) +
                                  (sort ? " sort" : " bitmap");
          const double e = parity_rel_err(ref, got.back());
          std::printf("[parity] mla_sparse_attention (prefill) %-42s max rel err %.3g (tol %.0e)\n",
                      tag.c_str(), e, tol);
          EXPECT_LE(e, tol) << tag;
        }
        EXPECT_EQ(
            0, std::memcmp(got[0].raw(), got[1].raw(), static_cast<size_t>(got[0].numel()) * sizeof(float)))
            << how << " max rel diff " << parity_rel_err(got[0], got[1]);
        // The softmax step's heads one after another (its first form): the same bits too.
        Tensor out = gpu_->empty({t, heads, r});
        cuda::mla_prefill_heads_in_turn() = true;
        gpu_->mla_sparse_attention(out, dq, c.dv, didx, scale);
        cuda::mla_prefill_heads_in_turn() = false;
        const Tensor in_turn = gpu_->to_host(out);
        EXPECT_EQ(
            0, std::memcmp(got[0].raw(), in_turn.raw(), static_cast<size_t>(got[0].numel()) * sizeof(float)))
            << how << " heads in turn: max rel diff " << parity_rel_err(got[0], in_turn);
      });
    }
  }
}

// A page size that is not a power of two (the engine accepts any): the BF16 kernel's gather
// then finds a token's page and slot by division instead of shift and mask. Both precisions,
// pages in scrambled order, the model's 64 heads where this GPU's shared memory takes them
// (227 KB) and 16 heads (the TP 4 share: the q-in-registers form at 99 KB) on any GPU.
TEST_F(CudaMlaPrefill, PagesOfAnySizeMatchTheCpuOp) {
  const int64_t page_size = 24, tokens = 2600, num_pages = (tokens + page_size - 1) / page_size, r = 512;
  const int64_t t = 16, w = 2051;
  ASSERT_TRUE(cuda::mla_prefill_mma_supported(16, r, w, DType::kBF16));
  for (int64_t heads : {64, 16}) {
    if (!cuda::mla_prefill_mma_supported(heads, r, w, DType::kBF16)) continue;  // 64 heads below 227 KB
    for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
      const PagedCache c = paged_cache(dt, page_size, num_pages, r, tokens, 241, 242, 1.5f);
      const Tensor hidx = distinct_indices(t, w, tokens, 243);
      const Tensor q = randn({t, heads, r}, 244, 0.3f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(r));
      Tensor ref = Tensor::empty({t, heads, r}, DType::kF32);
      cpu_->mla_sparse_attention(ref, q, c.hv, hidx, scale);
      each_precision(dt, [&](const char* how, double tol) {
        Tensor out = gpu_->empty({t, heads, r});
        gpu_->mla_sparse_attention(out, gpu_->to_device(q), c.dv, gpu_->to_device(hidx), scale);
        const double e = parity_rel_err(ref, gpu_->to_host(out));
        std::printf(
            "[parity] mla_sparse_attention (prefill) %s%s H=%d pages of 24 tokens max rel err %.3g (tol "
            "%.0e)\n",
            dtype_name(dt), how, static_cast<int>(heads), e, tol);
        EXPECT_LE(e, tol) << dtype_name(dt) << how << " H=" << heads;
      });
    }
  }
}

TEST_F(CudaMlaPrefill, MatchesTheCpuOp) {
  const int64_t page_size = 16, num_pages = 20, tokens = 300;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t r : {64, 512}) {
      const PagedCache c = paged_cache(dt, page_size, num_pages, r, tokens, 201, 202, 2.0f);
      const LatentPagesView &hv = c.hv, &dv = c.dv;
      for (int64_t heads : {16, 64}) {
        for (int64_t t : {16, 17, 129}) {
          for (int64_t w : {37, 2051}) {
            std::mt19937 rng(static_cast<uint32_t>(210 + t + w + heads));
            std::uniform_int_distribution<int32_t> pick(-3, static_cast<int32_t>(tokens) + 5);
            std::vector<int32_t> idx(static_cast<size_t>(t * w));
            for (auto& i : idx) i = pick(rng);
            for (int64_t j = 0; j < w; ++j) idx[w + j] = -1;  // row 1: no token (zeros)
            const Tensor hidx = i32_tensor(idx).reshape({t, w});
            const Tensor q = randn({t, heads, r}, 211, 0.3f);
            const float scale = 1.0f / std::sqrt(static_cast<float>(r));
            Tensor ref = Tensor::empty({t, heads, r}, DType::kF32);
            cpu_->mla_sparse_attention(ref, q, hv, hidx, scale);
            each_precision(dt, [&](const char* how, double tol) {
              Tensor out = gpu_->empty({t, heads, r});
              gpu_->mla_sparse_attention(out, gpu_->to_device(q), dv, gpu_->to_device(hidx), scale);
              const std::string tag = std::string(dtype_name(dt)) + how + " R=" + std::to_string(r) +
                                      " H=" + std::to_string(heads) + " T=" + std::to_string(t) +
                                      " W=" + std::to_string(w);
              const double e = parity_rel_err(ref, gpu_->to_host(out));
              std::printf("[parity] mla_sparse_attention (prefill) %-42s max rel err %.3g (tol %.0e)\n",
                          tag.c_str(), e, tol);
              EXPECT_LE(e, tol) << tag;
            });
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf
