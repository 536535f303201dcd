// The MTP drafter inside model steps (StepEntry::mtp / mtp_drafts, glm5_mtp.cc) on the CPU
// backend: each draft is the MTP layer's greedy token for the pairs (h_i, t_{i+1}) of every
// position before it (a reference built after the fact with mtp_step, chained as the
// model chains), the verified rows equal serial decoding bit for bit whatever is kept, and
// a fork carries the layer's cache.
#include <gtest/gtest.h>

#include <cstdio>

#include "glm5_fixture.h"
#include "glm5_mtp_check.h"

namespace tf::test {
namespace {

TEST(Glm5Mtp, DraftsAreTheLayersGreedyTokensAndVerifiedRowsEqualSerial) {
  int checked = 0;
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    Glm5Options q4 = small_pool();
    q4.dense_quant = MatrixFormat::kQ4;
    q4.latent_dtype = DType::kF8E4M3;
    q4.draft_head_quant = MatrixFormat::kQ4;  // the drafts' own q4 head (the serving default)
    for (const Glm5Options& o : {small_pool(), q4}) {
      // The fixtures have no MTP layer: one built from a DSA + MoE layer (add_mtp_layer).
      auto model = load_model_with_mtp(f, *comm, cpu_ops(), o);
      if (!model) continue;
      // k = 0 steps keep the layer's cache without drafting; keeps of 1 (every draft
      // rejected), a middle row and all.
      const MtpCheck c = check_mtp_drafts(*model, f.prompt_ids, 9, 14, {3, 1, 0, 2, 5}, {1, 0, 2, 3, 0, 1}, 1e-4);
      std::printf("[%s%s] %s\n", f.name.c_str(),
                  o.dense_quant == MatrixFormat::kQ4 ? ", DENSE=q4, fp8 cache, q4 draft head" : "",
                  describe(c).c_str());
      ASSERT_EQ(c.error, "") << f.name;
      EXPECT_GT(c.drafts, 40) << f.name;
      EXPECT_GT(c.partial_commits, 5) << f.name;
      EXPECT_EQ(c.drafts_differing, 0) << f.name;
      EXPECT_EQ(c.rows_differing, 0) << f.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no fixture has an MTP layer";
}

// Drafts after a fork equal the source's when both go on with the same tokens.
TEST(Glm5Mtp, AForkCarriesTheLayersCache) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  Fixture f = load_fixture(dirs[0]);
  auto comm = make_single_rank_communicator();
  auto model = load_model_with_mtp(f, *comm, cpu_ops(), small_pool());
  ASSERT_TRUE(model);
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(f.prompt_ids.data(), 32)};  // two 16-token pages
  e.mtp = true;
  ASSERT_TRUE(model->step({&e, 1}).has_value());
  EXPECT_EQ(model->mtp_length(*seq), 31);  // the last row waits for its next token
  auto fork = model->fork(*seq);
  ASSERT_TRUE(fork.has_value()) << fork.status().to_string();
  EXPECT_EQ(model->mtp_length(**fork), 31);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::vector<int32_t>> drafts;
    for (Glm5Sequence* s : {seq.get(), fork->get()}) {
      StepEntry d{s, std::span<const int32_t>(&f.prompt_ids[static_cast<size_t>(s->length())], 1)};
      d.mtp = true;
      d.mtp_drafts = 3;
      auto r = model->step({&d, 1});
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      drafts.push_back((*r)[0].drafts);
      ASSERT_TRUE(model->commit_speculation(*s, 1).is_ok());
    }
    EXPECT_EQ(drafts[0].size(), 3u);
    EXPECT_EQ(drafts[0], drafts[1]) << "step " << i;
  }
}

TEST(Glm5Mtp, StepEntriesAreChecked) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  Fixture f = load_fixture(dirs[0]);
  auto comm = make_single_rank_communicator();
  auto plain = load_model(f, *comm, small_pool());  // no MTP layer
  ASSERT_TRUE(plain);
  auto s0 = plain->new_sequence();
  StepEntry p{s0.get(), std::span<const int32_t>(f.prompt_ids.data(), 4)};
  p.mtp = true;
  auto refused = plain->step({&p, 1});
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("no MTP layer"), std::string::npos) << refused.status().to_string();
  auto model = load_model_with_mtp(f, *comm, cpu_ops(), small_pool());
  ASSERT_TRUE(model);
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(f.prompt_ids.data(), 4)};
  e.mtp_drafts = 2;  // without mtp
  EXPECT_FALSE(model->step({&e, 1}).has_value());
  e.mtp = true;  // more than one token
  auto r = model->step({&e, 1});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("MTP drafts"), std::string::npos) << r.status().to_string();
  // Drafts asked before the layer has a row to draft from: a verify span of one row.
  e.tokens = std::span<const int32_t>(f.prompt_ids.data(), 1);
  r = model->step({&e, 1});
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_TRUE((*r)[0].drafts.empty());
  EXPECT_TRUE(model->speculation_pending(*seq));
  ASSERT_TRUE(model->commit_speculation(*seq, 1).is_ok());
}

}  // namespace
}  // namespace tf::test
