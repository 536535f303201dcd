// Glm5Model::snapshot / restore (glm5_snapshot.cc) on the CPU backend: a sequence restored
// from its snapshot goes on exactly as the sequence did (every logit bit for bit, the MTP
// layer's drafts too), holds pages of its own, and a snapshot that does not fit the model
// (a missing or mis-shaped tensor, a bad length, no room in the pool) is refused with the
// tensor or the reason named.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>

#include "glm5_fixture.h"

namespace tf::test {
namespace {

bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

std::map<std::string, Tensor> by_name(const SequenceSnapshot& s) {
  std::map<std::string, Tensor> m;
  for (const auto& [name, t] : s.tensors) m.emplace(name, t);
  return m;
}

Glm5Options pool_of(DType latent) {
  Glm5Options o = small_pool();
  o.page_size = 4;
  o.num_pages = 128;
  o.latent_dtype = latent;
  return o;
}

TEST(Glm5Snapshot, ARestoredSequenceGoesOnBitForBit) {
  int checked = 0;
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    for (DType latent : {DType::kF32, DType::kF8E4M3}) {
      auto comm = make_single_rank_communicator();
      auto model = load_model(f, *comm, pool_of(latent));
      ASSERT_TRUE(model);
      const auto n = static_cast<int64_t>(f.prompt_ids.size());
      const int64_t at = (n / 2) / 4 * 4;
      if (at == 0) continue;
      const std::span<const int32_t> head(f.prompt_ids.data(), static_cast<size_t>(at));
      const std::span<const int32_t> rest(f.prompt_ids.data() + at, static_cast<size_t>(n - at));
      auto source = model->new_sequence();
      StepEntry first{source.get(), head, false};
      ASSERT_TRUE(model->step({&first, 1}).has_value());
      auto snap = model->snapshot(*source);
      ASSERT_TRUE(snap.has_value()) << snap.status().to_string();
      EXPECT_EQ(snap->length, at);
      EXPECT_GT(snap->bytes(), 0u);
      EXPECT_EQ(model->snapshot_bytes(*source), static_cast<int64_t>(snap->bytes()));
      const int64_t free_before = model->cache_pool().free_pages();
      auto restored = model->restore(snap->length, snap->mtp_length, by_name(*snap));
      ASSERT_TRUE(restored.has_value()) << restored.status().to_string();
      EXPECT_EQ(model->cache_pool().free_pages(), free_before - at / 4)
          << "the restored sequence has its own pages";
      EXPECT_EQ((*restored)->length(), at);
      // The restored state is the source's, tensor for tensor.
      auto again = model->snapshot(**restored);
      ASSERT_TRUE(again.has_value());
      ASSERT_EQ(again->tensors.size(), snap->tensors.size());
      for (size_t i = 0; i < snap->tensors.size(); ++i) {
        EXPECT_EQ(again->tensors[i].first, snap->tensors[i].first);
        EXPECT_TRUE(bits_equal(again->tensors[i].second, snap->tensors[i].second)) << snap->tensors[i].first;
      }
      source.reset();  // nothing of the source is needed any more
      auto reference = model->new_sequence();
      StepEntry whole{reference.get(), head, false};
      ASSERT_TRUE(model->step({&whole, 1}).has_value());
      StepEntry go_on{reference.get(), rest, true};
      auto expected = model->step({&go_on, 1});
      ASSERT_TRUE(expected.has_value());
      StepEntry go_on_restored{restored->get(), rest, true};
      auto got = model->step({&go_on_restored, 1});
      ASSERT_TRUE(got.has_value()) << got.status().to_string();
      EXPECT_TRUE(bits_equal((*got)[0].logits, (*expected)[0].logits)) << f.name << " " << dtype_name(latent);
      const int32_t tok = f.greedy_ids[0];
      StepEntry d{restored->get(), std::span<const int32_t>(&tok, 1), false};
      StepEntry d_ref{reference.get(), std::span<const int32_t>(&tok, 1), false};
      auto step = model->step({&d, 1});
      auto step_ref = model->step({&d_ref, 1});
      ASSERT_TRUE(step.has_value() && step_ref.has_value());
      EXPECT_TRUE(bits_equal((*step)[0].logits, (*step_ref)[0].logits))
          << f.name << " " << dtype_name(latent);
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);
}

TEST(Glm5Snapshot, ASnapshotThatDoesNotFitIsRefused) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  Fixture f = load_fixture(dirs[0]);
  auto comm = make_single_rank_communicator();
  Glm5Options o = pool_of(DType::kBF16);
  auto model = load_model(f, *comm, o);
  ASSERT_TRUE(model);
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(f.prompt_ids.data(), 8), false};
  ASSERT_TRUE(model->step({&e, 1}).has_value());
  auto snap = model->snapshot(*seq);
  ASSERT_TRUE(snap.has_value()) << snap.status().to_string();
  auto refused = [&](const std::map<std::string, Tensor>& t, int64_t length, const std::string& says) {
    auto r = model->restore(length, 0, t);
    ASSERT_FALSE(r.has_value()) << says;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().to_string();
  };
  {
    auto t = by_name(*snap);
    t.erase("kda.0.recurrent");
    refused(t, 8, "kda.0.recurrent is missing");
  }
  {
    auto t = by_name(*snap);
    Tensor& pages = t.at("latent.pages");
    pages = pages.slice(0, 0, 1).contiguous();  // one page for 8 tokens
    refused(t, 8, "latent.pages");
  }
  {
    auto t = by_name(*snap);
    t.at("latent.scales") = t.at("latent.scales").to_dtype(DType::kBF16);
    refused(t, 8, "latent.scales");
  }
  refused(by_name(*snap), 6, "whole number");
  refused(by_name(*snap), 12, "state tensor");  // the length and the tensors disagree
  {
    auto r = model->restore(8, 4, by_name(*snap));  // an MTP cache on a model without the layer
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("no MTP layer"), std::string::npos) << r.status().to_string();
  }
  // A length that is not a whole number of pages cannot be snapshotted either.
  auto odd = model->new_sequence();
  StepEntry three{odd.get(), std::span<const int32_t>(f.prompt_ids.data(), 3), false};
  ASSERT_TRUE(model->step({&three, 1}).has_value());
  auto no = model->snapshot(*odd);
  ASSERT_FALSE(no.has_value());
  EXPECT_NE(no.status().message().find("pages"), std::string::npos) << no.status().to_string();
  // A pool without room for the pages: kResourceExhausted, and the pool as it was.
  std::vector<std::unique_ptr<Glm5Sequence>> hogs;
  while (model->cache_pool().free_pages() >= 2) {
    auto h = model->restore(8, 0, by_name(*snap));
    ASSERT_TRUE(h.has_value()) << h.status().to_string();
    hogs.push_back(std::move(*h));
  }
  const int64_t left = model->cache_pool().free_pages();
  auto full = model->restore(8, 0, by_name(*snap));
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status().to_string();
  EXPECT_EQ(model->cache_pool().free_pages(), left);
}

// snapshot(seq, from) leaves out the rows of the tensors that run along the sequence before
// `from`, and holds everything else as the whole snapshot does.
TEST(Glm5Snapshot, ASnapshotFromATokenHoldsTheRowsAfterIt) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  Fixture f = load_fixture(dirs[0]);
  auto comm = make_single_rank_communicator();
  auto model = load_model(f, *comm, pool_of(DType::kF8E4M3));
  ASSERT_TRUE(model);
  const int64_t kp = model->config().index_kpool;
  const int64_t from = std::lcm<int64_t>(4, kp), length = 2 * from;  // whole pages and pools
  ASSERT_LE(length, static_cast<int64_t>(f.prompt_ids.size()));
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(f.prompt_ids.data(), static_cast<size_t>(length)), false};
  ASSERT_TRUE(model->step({&e, 1}).has_value());
  auto whole = model->snapshot(*seq);
  ASSERT_TRUE(whole.has_value()) << whole.status().to_string();
  ASSERT_EQ(whole->tokens_per_row.at("latent.pages"), 4);
  ASSERT_EQ(whole->tokens_per_row.at("latent.scales"), 4);
  int pooled = 0;
  for (const auto& [name, per_row] : whole->tokens_per_row) {
    if (name.find(".pool_keys") == std::string::npos) continue;
    EXPECT_EQ(per_row, kp) << name;
    ++pooled;
  }
  EXPECT_GT(pooled, 0) << "the fixture's indexers pool keys";
  auto part = model->snapshot(*seq, from);
  ASSERT_TRUE(part.has_value()) << part.status().to_string();
  EXPECT_EQ(part->from, from);
  EXPECT_EQ(part->tokens_per_row, whole->tokens_per_row);
  EXPECT_EQ(model->snapshot_bytes(*seq, from), static_cast<int64_t>(part->bytes()));
  EXPECT_LT(part->bytes(), whole->bytes());
  const auto rows = by_name(*part);
  for (const auto& [name, t] : whole->tensors) {
    auto along = whole->tokens_per_row.find(name);
    ASSERT_TRUE(rows.count(name)) << name;
    const Tensor expected =
        along == whole->tokens_per_row.end() ? t : t.slice(0, from / along->second, t.size(0));
    EXPECT_TRUE(bits_equal(rows.at(name), expected.contiguous())) << name;
  }
  // The rows before `from` (from the whole snapshot) and the part's, as two pieces, restore
  // the same state as the whole snapshot.
  SnapshotPieces pieces;
  for (const auto& [name, t] : part->tensors) pieces[name].push_back(t);
  const auto full = by_name(*whole);
  for (const auto& [name, per_row] : whole->tokens_per_row)
    pieces[name].insert(pieces[name].begin(), full.at(name).slice(0, 0, from / per_row).contiguous());
  auto restored = model->restore(length, 0, pieces);
  ASSERT_TRUE(restored.has_value()) << restored.status().to_string();
  auto again = model->snapshot(**restored);
  ASSERT_TRUE(again.has_value());
  for (const auto& [name, t] : again->tensors) EXPECT_TRUE(bits_equal(t, full.at(name))) << name;
  // Pieces whose rows do not add up are refused, naming the tensor.
  pieces["latent.scales"].pop_back();
  auto short_one = model->restore(length, 0, pieces);
  ASSERT_FALSE(short_one.has_value());
  EXPECT_NE(short_one.status().message().find("latent.scales"), std::string::npos)
      << short_one.status().to_string();
  // From the end: no rows along the sequence at all, the rest as before.
  auto none = model->snapshot(*seq, length);
  ASSERT_TRUE(none.has_value()) << none.status().to_string();
  for (const auto& [name, t] : none->tensors) EXPECT_FALSE(whole->tokens_per_row.count(name)) << name;
  EXPECT_EQ(model->snapshot_bytes(*seq, length), static_cast<int64_t>(none->bytes()));
  for (int64_t bad : {int64_t{-4}, int64_t{2}, length + from}) {
    auto no = model->snapshot(*seq, bad);
    ASSERT_FALSE(no.has_value()) << bad;
    EXPECT_NE(no.status().message().find("from token"), std::string::npos) << no.status().to_string();
  }
}

// The MTP layer's cache goes along: drafts after a restore equal the source's.
TEST(Glm5Snapshot, TheMtpLayersCacheGoesAlong) {
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
  auto snap = model->snapshot(*seq);
  ASSERT_TRUE(snap.has_value()) << snap.status().to_string();
  EXPECT_EQ(snap->mtp_length, 31);  // the last row waits for its next token
  EXPECT_EQ(model->snapshot_bytes(*seq), static_cast<int64_t>(snap->bytes()));
  auto restored = model->restore(snap->length, snap->mtp_length, by_name(*snap));
  ASSERT_TRUE(restored.has_value()) << restored.status().to_string();
  EXPECT_EQ(model->mtp_length(**restored), 31);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::vector<int32_t>> drafts;
    std::vector<Tensor> logits;
    for (Glm5Sequence* s : {seq.get(), restored->get()}) {
      StepEntry d{s, std::span<const int32_t>(&f.prompt_ids[static_cast<size_t>(s->length())], 1)};
      d.mtp = true;
      d.mtp_drafts = 3;
      auto r = model->step({&d, 1});
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      drafts.push_back((*r)[0].drafts);
      logits.push_back((*r)[0].logits);
      ASSERT_TRUE(model->commit_speculation(*s, 1).is_ok());
    }
    EXPECT_EQ(drafts[0].size(), 3u);
    EXPECT_EQ(drafts[0], drafts[1]) << "step " << i;
    EXPECT_TRUE(bits_equal(logits[0], logits[1])) << "step " << i;
  }
}

}  // namespace
}  // namespace tf::test
