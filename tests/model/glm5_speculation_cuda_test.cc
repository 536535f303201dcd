// Speculative verify steps on the CUDA backend (label gpu): every verified row equals
// serial decoding (graph-replayed decode steps) bit for bit, whatever rows each commit
// keeps, with f32 and bf16 weights, DENSE=q4 and an fp8 latent cache, alone and beside
// a decoding batch-mate. The CPU side is glm5_speculation_test.cc.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_test_ops.h"
#include "glm5_fixture.h"
#include "glm5_mtp_check.h"
#include "glm5_speculation_check.h"

namespace tf::test {
namespace {

TEST(Glm5SpeculationCuda, VerifiedRowsEqualSerialDecoding) {
  struct Variant {
    const char* name;
    DType weights, latent;
    MatrixFormat dense;
  };
  const Variant variants[] = {{"f32 weights, bf16 cache", DType::kF32, DType::kBF16, MatrixFormat::kDense},
                              {"bf16 weights, DENSE=q4, fp8 cache", DType::kBF16, DType::kF8E4M3, MatrixFormat::kQ4}};
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    for (const Variant& v : variants) {
      Glm5Options o;
      o.page_size = 16;
      o.num_pages = 512;
      o.latent_dtype = v.latent;
      o.weight_dtype = v.weights;
      o.dense_quant = v.dense;
      auto ws = open_weights(f);
      ASSERT_TRUE(ws);
      auto model = Glm5Model::load(f.config, *ws, *gpu_ops(), *comm, o);
      ASSERT_TRUE(model.has_value()) << model.status().to_string();
      for (bool busy : {false, true}) {
        const SpeculationCheck c =
            check_speculation(**model, f.prompt_ids, 9, {4, 7, 2, 5, 1, 3, 6}, {1, 3, 0, 2, 0, 1, 4}, busy);
        std::printf("[cuda-spec] [%s, %s%s] %lld verify steps (%lld partial commits): %lld of %lld rows differ, "
                    "max |d| %.3g\n",
                    f.name.c_str(), v.name, busy ? ", beside a decoding sequence" : "",
                    static_cast<long long>(c.verify_steps), static_cast<long long>(c.partial_commits),
                    static_cast<long long>(c.rows_differing), static_cast<long long>(c.rows_compared), c.max_abs_diff);
        ASSERT_EQ(c.error, "") << f.name;
        EXPECT_EQ(c.rows_differing, 0) << f.name << " " << v.name;
      }
    }
  }
}

// MTP drafts made inside the steps (glm5_mtp.cc) on the GPU: each is the layer's greedy
// token for the pairs before it (the reference: mtp_step over serial decoding's hidden
// states), and the verified rows equal serial decoding bit for bit.
TEST(Glm5SpeculationCuda, MtpDraftsAreTheLayersGreedyTokens) {
  int checked = 0;
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    for (bool q4 : {false, true}) {
      Glm5Options o;
      o.page_size = 16;
      o.num_pages = 512;
      o.latent_dtype = q4 ? DType::kF8E4M3 : DType::kBF16;
      o.weight_dtype = q4 ? DType::kBF16 : DType::kF32;
      o.dense_quant = q4 ? MatrixFormat::kQ4 : MatrixFormat::kDense;
      o.draft_head_quant = q4 ? MatrixFormat::kQ4 : MatrixFormat::kDense;
      auto model = load_model_with_mtp(f, *comm, *gpu_ops(), o);
      if (!model) continue;
      const MtpCheck c = check_mtp_drafts(*model, f.prompt_ids, 9, 14, {3, 1, 0, 2, 5}, {1, 0, 2, 3, 0, 1}, 1e-3);
      std::printf("[cuda-mtp] [%s%s] %s\n", f.name.c_str(), q4 ? ", bf16 weights, DENSE=q4, fp8 cache, q4 draft head" : ", f32 weights",
                  describe(c).c_str());
      ASSERT_EQ(c.error, "") << f.name;
      EXPECT_GT(c.drafts, 40) << f.name;
      EXPECT_EQ(c.drafts_differing, 0) << f.name;
      EXPECT_EQ(c.rows_differing, 0) << f.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace tf::test
