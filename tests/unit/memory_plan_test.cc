// The cache pool and window are sized once from a memory budget (memory_plan.h),
// and the paged budget never hands out more pages than the pool has.
#include <gtest/gtest.h>

#include "engine/memory_plan.h"
#include "engine/paged_cache_budget.h"
#include "model/config.h"

namespace tf {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
const std::string kData = TF_TEST_DATA_DIR;

MemoryPlanInput base() {
  MemoryPlanInput in;
  in.available_bytes = 10 * kGiB;
  in.reserve_bytes = 2 * kGiB;
  in.weight_bytes = 4 * kGiB;
  in.cache_bytes_per_token = 1024;
  in.state_bytes_per_stream = 64 << 20;
  in.parallel = 4;
  in.context = 4096;
  in.model_max_context = 1 << 20;
  in.page_size = 64;
  return in;
}

TEST(MemoryPlan, PoolIsParallelWindowsWhenMemoryAllows) {
  auto plan = plan_memory(base());
  ASSERT_TRUE(plan.has_value()) << plan.status().to_string();
  EXPECT_EQ(plan->context, 4096);
  EXPECT_EQ(plan->pool_tokens, 4 * 4096);
  EXPECT_EQ(plan->num_pages, 4 * 4096 / 64);
  EXPECT_TRUE(plan->notes.empty());
}

// Kept prompts (prompt reuse) take one stream's state each from the budget, and the pool
// may hold one window more (their pages give way to requests).
TEST(MemoryPlan, KeptPromptsTakeStateAndPoolRoom) {
  MemoryPlanInput in = base();
  in.kept_states = 2;
  auto plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value()) << plan.status().to_string();
  EXPECT_EQ(plan->pool_tokens, (4 + 1) * 4096);
  in.context = 0;
  in.model_max_context = 1 << 23;
  plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  // (10 - 2 - 4) GiB - 6 x 64 MiB = 3.625 GiB at 1 KiB per token.
  EXPECT_EQ(plan->pool_tokens, 3801088);
  in.available_bytes = 6 * kGiB + 6 * (64 << 20) + 1000;
  const auto none = plan_memory(in);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.status().message().find("KEPT_PROMPTS"), std::string::npos) << none.status().to_string();
}

TEST(MemoryPlan, ContextZeroIsTheLargestThatFits) {
  MemoryPlanInput in = base();
  in.context = 0;
  auto plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  // (10 - 2 - 4) GiB - 4 x 64 MiB = 3.75 GiB at 1 KiB per token = 3,932,160 tokens; the model allows 1M.
  EXPECT_EQ(plan->context, 1 << 20);
  EXPECT_EQ(plan->pool_tokens, 3932160);  // all that fits: less than 4 full windows
  in.model_max_context = 1 << 23;
  plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->context, 3932160);
  EXPECT_EQ(plan->pool_tokens, 3932160);
}

TEST(MemoryPlan, WindowBeyondThePoolIsLoweredAndSaid) {
  MemoryPlanInput in = base();
  in.context = 1 << 20;
  in.pool_cap_bytes = 256 << 20;  // KV_POOL_GIB 0.25: 262,144 tokens
  auto plan = plan_memory(in);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->context, 262144);
  EXPECT_EQ(plan->pool_tokens, 262144);
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("does not fit"), std::string::npos);
}

TEST(MemoryPlan, NoRoomIsAClearError) {
  MemoryPlanInput in = base();
  in.reserve_bytes = 7 * kGiB;
  auto plan = plan_memory(in);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("MEMORY_RESERVE_GIB"), std::string::npos);
  in = base();
  in.context = -1;
  EXPECT_FALSE(plan_memory(in).has_value());
}

TEST(PagedCacheBudget, ReservesWholePagesAndReleasesOnce) {
  PagedCacheBudget b(10, 64);
  EXPECT_EQ(b.capacity_tokens(), 640);
  auto h1 = b.reserve(65);  // 2 pages
  ASSERT_TRUE(h1.has_value());
  EXPECT_EQ(b.free_tokens(), 512);
  EXPECT_TRUE(b.can_admit(512));
  EXPECT_FALSE(b.can_admit(513));
  EXPECT_FALSE(b.reserve(513).has_value());
  auto h2 = b.reserve(512);
  ASSERT_TRUE(h2.has_value());
  EXPECT_EQ(b.free_tokens(), 0);
  b.release(*h1);
  b.release(*h1);  // a second release is a no-op
  EXPECT_EQ(b.free_tokens(), 128);
  b.release(*h2);
  EXPECT_EQ(b.free_tokens(), 640);
  EXPECT_EQ(b.live_reservations(), 0u);
}

// Kept prompts' reservations give way: their pages count as free, and a reservation that
// needs them evicts kept prompts (least recently used first, here in order) until it fits.
TEST(PagedCacheBudget, ReclaimerGivesWayToReservations) {
  PagedCacheBudget b(10, 64);
  struct Kept final : PagedCacheBudget::Reclaimer {
    PagedCacheBudget* budget = nullptr;
    std::vector<std::pair<CacheHandle, int64_t>> held;  // oldest first
    int reclaimed = 0;
    int64_t reclaimable_pages() const override {
      int64_t n = 0;
      for (const auto& h : held) n += h.second;
      return n;
    }
    bool reclaim_one() override {
      if (held.empty()) return false;
      budget->release(held.front().first);
      held.erase(held.begin());
      ++reclaimed;
      return true;
    }
  } kept;
  kept.budget = &b;
  b.set_reclaimer(&kept);
  for (int i = 0; i < 3; ++i) {
    auto h = b.reserve(128);  // 2 pages each
    ASSERT_TRUE(h.has_value());
    kept.held.push_back({*h, 2});
  }
  EXPECT_EQ(b.unreserved_pages(), 4);
  EXPECT_EQ(b.free_tokens(), 640);  // every page is free or reclaimable
  EXPECT_TRUE(b.can_admit(640));
  auto live = b.reserve(64 * 7);  // 7 pages: two kept prompts must go, the newest stays
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(kept.reclaimed, 2);
  ASSERT_EQ(kept.held.size(), 1u);
  EXPECT_EQ(b.unreserved_pages(), 1);
  EXPECT_FALSE(b.can_admit(64 * 4));
  EXPECT_FALSE(b.reserve(64 * 4).has_value());
  EXPECT_EQ(kept.reclaimed, 2);  // a reservation that cannot fit evicts nothing
  b.set_reclaimer(nullptr);
  b.release(*live);
  EXPECT_EQ(b.free_tokens(), 512);  // the kept prompt left holds its 2 pages, reclaimable no more
}

// DENSE's formats cost 4.25 bits (q4: 4-bit codes + an f16 scale per 64) and 1 byte + an
// f32 per 128x128 block (fp8); dense matrices their own dtype.
TEST(WeightBytes, FormatBytesPerWeight) {
  EXPECT_DOUBLE_EQ(matrix_format_bytes_per_weight(MatrixFormat::kQ4, 2.0), 4.25 / 8);
  EXPECT_DOUBLE_EQ(matrix_format_bytes_per_weight(MatrixFormat::kFp8Block, 2.0), 1.0 + 4.0 / 16384);
  EXPECT_DOUBLE_EQ(matrix_format_bytes_per_weight(MatrixFormat::kDense, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(matrix_format_bytes_per_weight(MatrixFormat::kDense, 4.0), 4.0);
}

// GLM-5.3-Flash: the matrices glm5_weights.cc re-quantizes. Per KDA layer q, k, v, o
// 4 x 8192 x 4096 = 134,217,728 (34 layers); per MLA layer q_a 1536x4096 + q_b 16384x1536
// + kv_a 512x4096 + o 4096x16384 = 100,663,296 (11 layers, + 1 in the MTP layer); dense
// MLPs 3 x 12288 x 4096 = 150,994,944 (3 layers); shared experts 3 x 2048 x 4096 =
// 25,165,824 (42 MoE layers + the MTP layer); the MTP eh_proj 4096 x 8192 = 33,554,432.
TEST(WeightBytes, RequantizedElementsOfTheRealConfig) {
  auto cfg = load_glm5_config(kData + "/glm53/config.json");
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  const int64_t want = 34 * int64_t{134217728} + 12 * int64_t{100663296} + 3 * int64_t{150994944} +
                       43 * int64_t{25165824} + int64_t{33554432};
  EXPECT_EQ(want, 7340032000);
  EXPECT_EQ(dense_requantized_elements(*cfg), want);
}

TEST(WeightBytes, DenseFormatFreesMemoryForThePool) {
  WeightBytesInput in;
  in.file_bytes = 20 * kGiB;  // a BF16 checkpoint
  in.matrix_dtype = DType::kBF16;
  // BF16 on the GPU: the files + 5% for what stays f32; DENSE=bf16 saves nothing.
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB);
  in.requantized_elements = 7 * (kGiB / 2);  // 7 GiB of the 20 are re-quantized matrices
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB);
  // q4: each of those weights goes from 2 bytes to 4.25 bits.
  in.dense = MatrixFormat::kQ4;
  const int64_t q4 = estimate_weight_bytes(in);
  EXPECT_EQ(q4, 21 * kGiB - static_cast<int64_t>(7.0 * (kGiB / 2) * (2.0 - 4.25 / 8)));
  // fp8: from 2 bytes to 1 + 4/16384.
  in.dense = MatrixFormat::kFp8Block;
  const int64_t fp8 = estimate_weight_bytes(in);
  EXPECT_NEAR(static_cast<double>(fp8), 21.0 * kGiB - 7.0 * (kGiB / 2) * (1.0 - 4.0 / 16384), 1.0);
  EXPECT_LT(q4, fp8);
  // The CPU holds f32: twice the files, and q4 saves 4 - 0.53125 bytes per weight.
  in.matrix_dtype = DType::kF32;
  in.dense = MatrixFormat::kQ4;
  EXPECT_EQ(estimate_weight_bytes(in), 40 * kGiB - static_cast<int64_t>(7.0 * (kGiB / 2) * (4.0 - 4.25 / 8)));
  // An FP8 checkpoint's matrices are held BF16: twice its files (+5%).
  in.matrix_dtype = DType::kBF16;
  in.dense = MatrixFormat::kDense;
  in.fp8_checkpoint = true;
  EXPECT_EQ(estimate_weight_bytes(in), 42 * kGiB);
  // ... except its routed experts, kept as their FP8 bytes (Fp8ExpertStack): 16 GiB of
  // its 20 are experts, counted once instead of twice.
  in.fp8_kept_elements = 16 * kGiB;
  EXPECT_EQ(estimate_weight_bytes(in), 26 * kGiB);
  // (On a non-FP8 checkpoint the count means nothing.)
  in.fp8_checkpoint = false;
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB);
  in.fp8_checkpoint = true;
  in.fp8_kept_elements = 0;
  // Never below zero, whatever the inputs.
  in.dense = MatrixFormat::kQ4;
  in.requantized_elements = 1000 * kGiB;
  EXPECT_EQ(estimate_weight_bytes(in), 0);
}

// LM_HEAD=q4 / fp8 frees lm_head's BF16 bytes like DENSE frees its matrices', and the
// two add up.
TEST(WeightBytes, LmHeadFormatFreesItsBytes) {
  WeightBytesInput in;
  in.file_bytes = 20 * kGiB;
  in.matrix_dtype = DType::kBF16;
  const int64_t head = 154880LL * 4096;  // GLM-5.3-Flash's lm_head
  in.head_elements = head;
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB);  // kDense: the count alone saves nothing
  in.head = MatrixFormat::kQ4;
  const int64_t q4 = estimate_weight_bytes(in);
  EXPECT_EQ(q4, 21 * kGiB - std::llround(static_cast<double>(head) * (2.0 - 4.25 / 8)));
  in.head = MatrixFormat::kFp8Block;
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB - std::llround(static_cast<double>(head) * (1.0 - 4.0 / 16384)));
  in.head = MatrixFormat::kQ4;
  in.dense = MatrixFormat::kQ4;
  in.requantized_elements = 7 * (kGiB / 2);
  EXPECT_EQ(estimate_weight_bytes(in),
            21 * kGiB - std::llround((static_cast<double>(head) + 7.0 * (kGiB / 2)) * (2.0 - 4.25 / 8)));
}

// The MTP drafts' q4 copy of a dense lm_head is held beside it: its q4 bytes are added; with
// LM_HEAD=q4 the drafts read lm_head itself and nothing is added.
TEST(WeightBytes, MtpDraftHeadAddsItsBytes) {
  WeightBytesInput in;
  in.file_bytes = 20 * kGiB;
  in.matrix_dtype = DType::kBF16;
  const int64_t head = 154880LL * 4096;
  in.head_elements = head;
  in.draft_head = MatrixFormat::kQ4;
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB + std::llround(static_cast<double>(head) * 4.25 / 8));
  in.head = MatrixFormat::kQ4;
  EXPECT_EQ(estimate_weight_bytes(in), 21 * kGiB - std::llround(static_cast<double>(head) * (2.0 - 4.25 / 8)));
}

// EXL3 linears outside the routed experts are dequantized at load: counted as the BF16
// they become (2 bytes per padded element), not as their ~4-bit file bytes, so the pool
// is planned around what the weights will really take.
TEST(WeightBytes, DequantizedExl3LinearsCountAsBf16) {
  WeightBytesInput in;
  in.file_bytes = 20 * kGiB;
  in.matrix_dtype = DType::kBF16;
  const int64_t plain = estimate_weight_bytes(in);
  in.exl3_dense_elements = 4 * kGiB;       // 4 Gi weights
  in.exl3_dense_file_bytes = 2 * kGiB + 1;  // stored at ~4 bits
  WeightBytesInput as_bf16;
  as_bf16.file_bytes = 20 * kGiB - (2 * kGiB + 1) + 8 * kGiB;
  as_bf16.matrix_dtype = DType::kBF16;
  EXPECT_EQ(estimate_weight_bytes(in), estimate_weight_bytes(as_bf16));
  EXPECT_GT(estimate_weight_bytes(in), plain + 5 * kGiB);
  // DENSE=q4 then frees their bytes as it does a BF16 checkpoint's.
  in.dense = as_bf16.dense = MatrixFormat::kQ4;
  in.requantized_elements = as_bf16.requantized_elements = 4 * kGiB;
  EXPECT_EQ(estimate_weight_bytes(in), estimate_weight_bytes(as_bf16));
}

// lm_head_elements counts the stored lm_head; a tied one is not a tensor of its own.
TEST(WeightBytes, LmHeadElementsFromTheTensorList) {
  auto cfg = load_glm5_config(kData + "/glm53/config.json");
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  EXPECT_EQ(lm_head_elements(*cfg), int64_t{154880} * 4096);
  cfg->text.tie_word_embeddings = true;
  EXPECT_EQ(lm_head_elements(*cfg), 0);
}

TEST(WeightBytes, PoolGrowsByWhatQ4Frees) {
  WeightBytesInput w;
  w.file_bytes = 20 * kGiB;
  w.requantized_elements = 7 * (kGiB / 2);
  MemoryPlanInput in = base();
  in.available_bytes = 40 * kGiB;
  in.context = 0;
  in.model_max_context = int64_t{1} << 40;
  in.weight_bytes = estimate_weight_bytes(w);
  auto bf16 = plan_memory(in);
  w.dense = MatrixFormat::kQ4;
  in.weight_bytes = estimate_weight_bytes(w);
  auto q4 = plan_memory(in);
  ASSERT_TRUE(bf16.has_value() && q4.has_value());
  const int64_t freed = static_cast<int64_t>(7.0 * (kGiB / 2) * (2.0 - 4.25 / 8));
  const int64_t page = 1024 * 64;
  EXPECT_NEAR(static_cast<double>(q4->pool_bytes - bf16->pool_bytes), static_cast<double>(freed), page);
}

}  // namespace
}  // namespace tf
