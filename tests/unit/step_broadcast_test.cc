// Step commands (src/engine/step_broadcast.h): the payload round-trips exactly,
// and every malformed payload (each truncation, trailing bytes, bad kinds,
// counts larger than the bytes left) is a kInvalidArgument naming the field,
// never a crash or a huge allocation.
#include "engine/step_broadcast.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace tf::engine {
namespace {

StepCommand sample_command() {
  StepCommand c;
  c.create = {7, 8, 0xFFFFFFFFFFFFFFFFull};
  c.forks = {{11, 3}, {12, 11}};  // a kept prompt of 3, then a sequence resumed from it
  c.drop = {3};
  c.commits = {{8, 3}, {7, 1}};  // rows kept of the last verify steps
  c.stores = {{7, {1, 2, -3}}};  // PROMPT_STORE: each rank writes its part (a picture's key is negative)
  c.restores = {{14, {std::numeric_limits<int32_t>::min(), 5}}, {15, {9}}};
  c.prefetches = {{0, {4, 5, 6, 7}}};  // each rank reads a stored state ahead
  c.entries.push_back({7, {1, 2, 3, 4, 5}, false});
  c.entries.back().speculative = true;
  c.entries.push_back({8, {std::numeric_limits<int32_t>::max()}, true});
  c.entries.back().mtp = true;  // keeps the MTP layer's cache
  c.entries.push_back({0xFFFFFFFFFFFFFFFFull, {std::numeric_limits<int32_t>::min(), -1, 0}, false});
  c.entries.push_back({9, {}, false});  // an empty span survives too
  // Image features at rows 1-2 and 4 of a 5-token span (two runs, width 3).
  StepCommandEntry media{10, {380, 380, 380, 6, 380}, false};
  media.embed_runs = {{{0, 3, 0}}, {{4, 1, 3}}};
  media.embed_width = 3;
  media.embeds = {0.5f, -1.25f, 3e-38f, 1e30f, -0.0f, 7.f, 1.f, 2.f, 3.f, -4.f, -5.f, 6.5f};
  c.entries.push_back(media);
  c.entries.push_back({13, {42}, true});
  c.entries.back().mtp = true;  // keeps the MTP layer's cache and drafts 5 tokens with it
  c.entries.back().mtp_drafts = 5;
  c.entries.back().speculative = true;
  return c;
}

void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(StepCommandTest, StepRoundTripsExactly) {
  const StepCommand c = sample_command();
  const std::vector<uint8_t> bytes = encode_step_command(c);
  auto back = decode_step_command(bytes);
  ASSERT_TRUE(back.has_value()) << back.status().to_string();
  EXPECT_EQ(*back, c);
  EXPECT_FALSE(back->is_heartbeat());
  EXPECT_EQ(back->entries[1].all_logits, true);
  EXPECT_EQ(back->entries[2].tokens[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(back->entries[4].embed_runs, c.entries[4].embed_runs);
  EXPECT_EQ(back->entries[4].embeds, c.entries[4].embeds);  // bit for bit (-0.0 == 0.0, but equal here)
  EXPECT_TRUE(std::signbit(back->entries[4].embeds[4]));
}

TEST(StepCommandTest, HeartbeatAndStopRoundTrip) {
  StepCommand heartbeat;
  heartbeat.create = {1};
  heartbeat.drop = {1};  // created and dropped between two steps
  auto hb = decode_step_command(encode_step_command(heartbeat));
  ASSERT_TRUE(hb.has_value()) << hb.status().to_string();
  EXPECT_EQ(*hb, heartbeat);
  EXPECT_TRUE(hb->is_heartbeat());

  StepCommand stop;
  stop.kind = StepCommandKind::kStop;
  auto st = decode_step_command(encode_step_command(stop));
  ASSERT_TRUE(st.has_value()) << st.status().to_string();
  EXPECT_EQ(st->kind, StepCommandKind::kStop);
  EXPECT_FALSE(st->is_heartbeat());
  EXPECT_STREQ(step_command_kind_name(st->kind), "stop");

  // The smallest payload: kind + eight zero counts (creates, forks, drops, commits, stores,
  // restores, prefetches, entries).
  EXPECT_EQ(encode_step_command(StepCommand{}).size(), 1u + 8 * 8);
}

TEST(StepCommandTest, EveryTruncationIsAnErrorNamingTheField) {
  const std::vector<uint8_t> bytes = encode_step_command(sample_command());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_step_command(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(r.has_value()) << "a prefix of " << n << " of " << bytes.size() << " bytes decoded";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    EXPECT_NE(r.status().message().find("step command"), std::string::npos) << r.status().to_string();
  }
  auto empty = decode_step_command({});
  ASSERT_FALSE(empty.has_value());
  EXPECT_NE(empty.status().message().find("kind"), std::string::npos) << empty.status().to_string();
}

TEST(StepCommandTest, TrailingBytesAndBadKindsAndFlagsAreRefused) {
  std::vector<uint8_t> bytes = encode_step_command(sample_command());
  bytes.push_back(0);
  auto trailing = decode_step_command(bytes);
  ASSERT_FALSE(trailing.has_value());
  EXPECT_NE(trailing.status().message().find("trailing"), std::string::npos) << trailing.status().to_string();

  for (uint8_t kind : {0, 3, 255}) {
    std::vector<uint8_t> b = encode_step_command(StepCommand{});
    b[0] = kind;
    auto r = decode_step_command(b);
    ASSERT_FALSE(r.has_value()) << "kind " << int(kind);
    EXPECT_NE(r.status().message().find("unknown kind"), std::string::npos) << r.status().to_string();
  }

  StepCommand one;
  one.entries.push_back({5, {1}, false});
  std::vector<uint8_t> b = encode_step_command(one);
  // The entry's flags byte (1: all logits, 2: embeddings follow, 4: speculative, 8: MTP kept,
  // 16: MTP drafts follow).
  b[1 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8] = 32;  // kind, 7 counts, the entry count, its id
  auto flags = decode_step_command(b);
  ASSERT_FALSE(flags.has_value());
  EXPECT_NE(flags.status().message().find("flags"), std::string::npos) << flags.status().to_string();
  // A draft count out of range.
  one.entries[0].mtp = true;
  one.entries[0].mtp_drafts = 64;
  auto drafts = decode_step_command(encode_step_command(one));
  ASSERT_FALSE(drafts.has_value());
  EXPECT_NE(drafts.status().message().find("MTP drafts"), std::string::npos) << drafts.status().to_string();
}

TEST(StepCommandTest, EmbeddingsThatDoNotFitTheirSpanAreRefused) {
  StepCommand one;
  StepCommandEntry e{5, {1, 2}, false};
  e.embed_runs = {{{0, 2, 0}}};
  e.embed_width = 2;
  e.embeds = {1, 2, 3};  // 3 values are not rows of 2
  one.entries.push_back(e);
  auto r = decode_step_command(encode_step_command(one));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("rows of 2"), std::string::npos) << r.status().to_string();
  one.entries[0].embeds = {1, 2, 3, 4};
  one.entries[0].embed_width = 0;
  r = decode_step_command(encode_step_command(one));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("embedding width"), std::string::npos) << r.status().to_string();
}

TEST(StepCommandTest, CountsBeyondThePayloadFailWithoutAllocating) {
  // Each count in turn claims 2^60 items: the decoder must refuse before resizing.
  const std::vector<uint8_t> base = encode_step_command(StepCommand{});
  const char* fields[] = {"create count", "fork count", "drop count", "commit count",
                          "store",        "restore",    "prefetch",   "entry count"};
  for (int k = 0; k < 8; ++k) {
    std::vector<uint8_t> b = base;
    put_u64(b, 1 + 8 * static_cast<size_t>(k), uint64_t{1} << 60);
    auto r = decode_step_command(b);
    ASSERT_FALSE(r.has_value()) << fields[k];
    EXPECT_NE(r.status().message().find(fields[k]), std::string::npos) << r.status().to_string();
  }
  StepCommand one;
  one.entries.push_back({5, {1, 2}, false});
  std::vector<uint8_t> b = encode_step_command(one);
  put_u64(b, 1 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 1, uint64_t{1} << 62);  // the entry's token count
  auto r = decode_step_command(b);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("entry token count"), std::string::npos) << r.status().to_string();
}

TEST(StepCommandTest, ForkIdsThatAreNotPairsAreRefused) {
  StepCommand c;
  c.forks = {{5, 4}};
  std::vector<uint8_t> b = encode_step_command(c);
  // The fork list is the ids flattened: claim 3 of them and cut the payload to match.
  put_u64(b, 1 + 8, 3);
  b.insert(b.begin() + 1 + 8 + 8 + 16, 8, uint8_t{0});
  auto r = decode_step_command(b);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("fork ids are not pairs"), std::string::npos) << r.status().to_string();
}

TEST(StepCommandTest, CommitsThatAreNotPairsOrKeepNothingAreRefused) {
  StepCommand c;
  c.commits = {{5, 0}};
  auto zero = decode_step_command(encode_step_command(c));
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.status().message().find("keeps 0 rows"), std::string::npos) << zero.status().to_string();
  c.commits = {{5, 2}};
  std::vector<uint8_t> b = encode_step_command(c);
  put_u64(b, 1 + 8 + 8 + 8, 3);  // the commit list claims 3 ids
  b.insert(b.begin() + 1 + 8 + 8 + 8 + 8 + 16, 8, uint8_t{0});
  auto odd = decode_step_command(b);
  ASSERT_FALSE(odd.has_value());
  EXPECT_NE(odd.status().message().find("commits are not pairs"), std::string::npos) << odd.status().to_string();
}

TEST(StepCommandTest, StopCarryingSequencesIsRefused) {
  StepCommand stop;
  stop.kind = StepCommandKind::kStop;
  stop.drop = {4};
  auto r = decode_step_command(encode_step_command(stop));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("stop command carries"), std::string::npos) << r.status().to_string();
  StepCommand stop_restoring;
  stop_restoring.kind = StepCommandKind::kStop;
  stop_restoring.restores = {{4, {1}}};
  EXPECT_FALSE(decode_step_command(encode_step_command(stop_restoring)).has_value());
  StepCommand stop_prefetching;
  stop_prefetching.kind = StepCommandKind::kStop;
  stop_prefetching.prefetches = {{0, {1}}};
  EXPECT_FALSE(decode_step_command(encode_step_command(stop_prefetching)).has_value());
}

TEST(StepCommandTest, AStoredPromptWithoutTokensIsRefused) {
  StepCommand c;
  c.stores = {{4, {}}};
  auto r = decode_step_command(encode_step_command(c));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("store without tokens"), std::string::npos) << r.status().to_string();
  c.stores.clear();
  c.restores = {{4, {}}};
  r = decode_step_command(encode_step_command(c));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("restore without tokens"), std::string::npos) << r.status().to_string();
  c.restores.clear();
  c.prefetches = {{0, {}}};
  r = decode_step_command(encode_step_command(c));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("prefetch without tokens"), std::string::npos)
      << r.status().to_string();
}

TEST(StepCommandTest, SingleRankSendIsANoOpAndOnlyRankZeroSends) {
  auto comm = make_single_rank_communicator();
  EXPECT_TRUE(send_step_command(*comm, sample_command()).is_ok());
  EXPECT_TRUE(send_model_setup(*comm, {64, 10, DType::kBF16}).is_ok());
  StepBroadcaster b(*comm);
  b.sequence_created(1);
  EXPECT_TRUE(b.send_heartbeat().is_ok());
  EXPECT_FALSE(b.stopped());
  EXPECT_TRUE(b.send_stop().is_ok());
  EXPECT_TRUE(b.stopped());
  EXPECT_TRUE(b.send_stop().is_ok());  // once only; later calls do nothing
  Status after = b.send_step({});
  EXPECT_EQ(after.code(), StatusCode::kInternal) << after.to_string();
}

}  // namespace
}  // namespace tf::engine
