// Speculative verify steps (StepEntry::speculative + Glm5Model::commit_speculation) on
// the CPU backend: every verified row equals serial decoding bit for bit, and whatever
// rows a commit keeps, the sequence goes on exactly as if only they had been stepped
// (KDA conv and recurrent states, indexer pools and ring across pool boundaries).
#include <gtest/gtest.h>

#include <cstdio>

#include "glm5_fixture.h"
#include "glm5_speculation_check.h"

namespace tf::test {
namespace {

TEST(Glm5Speculation, VerifiedRowsEqualSerialDecodingWhateverIsKept) {
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    auto model = load_model(f, *comm, small_pool());
    ASSERT_TRUE(model);
    // The serving default too: DENSE=q4 matrices and an fp8 cache (its q4 matmuls at 1..8 rows).
    Glm5Options q4 = small_pool();
    q4.dense_quant = MatrixFormat::kQ4;
    q4.latent_dtype = DType::kF8E4M3;
    auto quantized = load_model(f, *comm, q4);
    ASSERT_TRUE(quantized);
    const SpeculationCheck qc = check_speculation(*quantized, f.prompt_ids, 9, {3, 6, 2, 8}, {2, 0, 1, 5}, true);
    std::printf("[%s, DENSE=q4, fp8 cache] %lld verify steps: %lld of %lld rows differ from serial, max |d| %.3g\n",
                f.name.c_str(), static_cast<long long>(qc.verify_steps), static_cast<long long>(qc.rows_differing),
                static_cast<long long>(qc.rows_compared), qc.max_abs_diff);
    ASSERT_EQ(qc.error, "") << f.name;
    EXPECT_EQ(qc.rows_differing, 0) << f.name;
    const int64_t prefill = 9;  // not a pool boundary: rings start part full
    // Spans of 1..7 rows; keeps of 1 (everything after the pending token rejected), a
    // middle row, everything.
    for (bool busy : {false, true}) {
      const SpeculationCheck c =
          check_speculation(*model, f.prompt_ids, prefill, {4, 7, 2, 5, 1, 3, 6}, {1, 3, 0, 2, 0, 1, 4}, busy);
      std::printf("[%s%s] %lld verify steps (%lld partial commits): %lld of %lld rows differ from serial, max |d| %.3g\n",
                  f.name.c_str(), busy ? ", beside a decoding sequence" : "", static_cast<long long>(c.verify_steps),
                  static_cast<long long>(c.partial_commits), static_cast<long long>(c.rows_differing),
                  static_cast<long long>(c.rows_compared), c.max_abs_diff);
      ASSERT_EQ(c.error, "") << f.name;
      EXPECT_GT(c.partial_commits, 5) << f.name;
      EXPECT_EQ(c.rows_differing, 0) << f.name;
    }
  }
}

TEST(Glm5Speculation, CommitIsCheckedAndRequired) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  Fixture f = load_fixture(dirs[0]);
  auto comm = make_single_rank_communicator();
  auto model = load_model(f, *comm, small_pool());
  ASSERT_TRUE(model);
  auto seq = model->new_sequence();
  const std::vector<int32_t> ids(f.prompt_ids.begin(), f.prompt_ids.begin() + 8);
  StepEntry e{seq.get(), ids};
  ASSERT_TRUE(model->step({&e, 1}).has_value());
  EXPECT_FALSE(model->commit_speculation(*seq, 1).is_ok());  // nothing to commit
  const std::vector<int32_t> drafts(f.prompt_ids.begin() + 8, f.prompt_ids.begin() + 12);
  StepEntry v{seq.get(), drafts, true};
  v.speculative = true;
  ASSERT_TRUE(model->step({&v, 1}).has_value());
  EXPECT_TRUE(model->speculation_pending(*seq));
  // Another step before the commit is refused, naming the reason.
  auto again = model->step({&v, 1});
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.status().message().find("commit_speculation"), std::string::npos) << again.status().to_string();
  EXPECT_FALSE(model->commit_speculation(*seq, 0).is_ok());
  EXPECT_FALSE(model->commit_speculation(*seq, 5).is_ok());
  ASSERT_TRUE(model->commit_speculation(*seq, 2).is_ok());
  EXPECT_EQ(seq->length(), 10);
  EXPECT_FALSE(model->speculation_pending(*seq));
}

}  // namespace
}  // namespace tf::test
