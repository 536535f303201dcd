// Each logits processor on tiny hand-made rows, and SamplingParams validation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "sampling/logits_processors.h"
#include "sampling/sampling_params.h"
#include "sampling/token_history.h"

namespace tf {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

std::vector<bool> kept(const std::vector<float>& row) {
  std::vector<bool> k;
  for (float l : row) k.push_back(l != kNegInf);
  return k;
}

TEST(LogitsProcessors, LogitBiasAddsAndIgnoresOutOfRange) {
  std::vector<float> row{0.0f, 1.0f, 2.0f};
  apply_logit_bias(row, {{0, 5.0f}, {2, -100.0f}, {7, 3.0f}, {-1, 1.0f}});
  EXPECT_EQ(row, (std::vector<float>{5.0f, 1.0f, -98.0f}));
}

TEST(LogitsProcessors, MaskTokens) {
  std::vector<float> row{1.0f, 2.0f, 3.0f};
  const std::vector<int32_t> ban{1, 9};
  mask_tokens(row, ban);
  EXPECT_EQ(kept(row), (std::vector<bool>{true, false, true}));
}

TEST(LogitsProcessors, PenaltiesFollowOpenAIAndTransformers) {
  const std::vector<int32_t> prompt{1, 2, 1};
  TokenHistory h(prompt);
  for (int32_t t : {2, 3, 3}) h.append_generated(t);
  std::vector<float> row{1.0f, 2.0f, -1.0f, 0.5f, 4.0f};
  apply_penalties(row, h, /*presence=*/0.25f, /*frequency=*/0.5f, /*repetition=*/2.0f);
  // repetition over {1,2,3} (once each): 2/2, -1*2, 0.5/2; then generated counts {2:1, 3:2}.
  EXPECT_FLOAT_EQ(row[0], 1.0f);
  EXPECT_FLOAT_EQ(row[1], 1.0f);
  EXPECT_FLOAT_EQ(row[2], -2.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(row[3], 0.25f - 1.0f - 0.25f);
  EXPECT_FLOAT_EQ(row[4], 4.0f);
}

TEST(LogitsProcessors, PenaltiesOffAreIdentity) {
  const std::vector<int32_t> prompt{0, 1};
  TokenHistory h(prompt);
  h.append_generated(1);
  std::vector<float> row{1.0f, -2.0f, 3.0f};
  apply_penalties(row, h, 0.0f, 0.0f, 1.0f);
  EXPECT_EQ(row, (std::vector<float>{1.0f, -2.0f, 3.0f}));
}

TEST(LogitsProcessors, NegativePresencePenaltyEncouragesRepeats) {
  TokenHistory h;
  h.append_generated(0);
  std::vector<float> row{0.0f, 0.0f};
  apply_penalties(row, h, -1.0f, 0.0f, 1.0f);
  EXPECT_FLOAT_EQ(row[0], 1.0f);
  EXPECT_FLOAT_EQ(row[1], 0.0f);
}

TEST(LogitsProcessors, Temperature) {
  std::vector<float> row{1.0f, -2.0f};
  apply_temperature(row, 0.5f);
  EXPECT_EQ(row, (std::vector<float>{2.0f, -4.0f}));
  apply_temperature(row, 0.0f);  // greedy: untouched
  EXPECT_EQ(row, (std::vector<float>{2.0f, -4.0f}));
}

TEST(LogitsProcessors, TopKKeepsTheKLargestAndTies) {
  std::vector<float> row{3.0f, 1.0f, 1.0f, 0.0f, 2.0f};
  apply_top_k(row, 2);
  EXPECT_EQ(kept(row), (std::vector<bool>{true, false, false, false, true}));
  std::vector<float> tie{3.0f, 1.0f, 1.0f, 0.0f};
  apply_top_k(tie, 2);  // the 2nd value is tied: both stay
  EXPECT_EQ(kept(tie), (std::vector<bool>{true, true, true, false}));
  std::vector<float> off{1.0f, 2.0f};
  apply_top_k(off, 0);
  apply_top_k(off, 5);
  EXPECT_EQ(kept(off), (std::vector<bool>{true, true}));
}

TEST(LogitsProcessors, TopPKeepsSmallestSetReachingP) {
  const auto base = log_probs({0.05, 0.5, 0.15, 0.3});
  auto row = base;
  apply_top_p(row, 0.75f);  // 0.5 then 0.3 (mass 0.8 >= 0.75)
  EXPECT_EQ(kept(row), (std::vector<bool>{false, true, false, true}));
  row = base;
  apply_top_p(row, 0.85f);
  EXPECT_EQ(kept(row), (std::vector<bool>{false, true, true, true}));
  row = base;
  apply_top_p(row, 0.1f);  // the most likely always stays
  EXPECT_EQ(kept(row), (std::vector<bool>{false, true, false, false}));
  row = base;
  apply_top_p(row, 1.0f);
  EXPECT_EQ(kept(row), (std::vector<bool>{true, true, true, true}));
}

TEST(LogitsProcessors, TopPRenormalisesOverUnmaskedTokens) {
  // After top_k removed the 0.5 token, 0.3 is the head of a 0.5-mass set.
  auto row = log_probs({0.05, 0.5, 0.15, 0.3});
  row[1] = kNegInf;
  apply_top_p(row, 0.55f);  // 0.3/0.5 = 0.6 >= 0.55
  EXPECT_EQ(kept(row), (std::vector<bool>{false, false, false, true}));
}

TEST(LogitsProcessors, MinPRelativeToMostLikely) {
  const auto base = log_probs({0.05, 0.5, 0.15, 0.3});
  auto row = base;
  apply_min_p(row, 0.2f);  // keep p >= 0.1
  EXPECT_EQ(kept(row), (std::vector<bool>{false, true, true, true}));
  row = base;
  apply_min_p(row, 0.7f);  // keep p >= 0.35
  EXPECT_EQ(kept(row), (std::vector<bool>{false, true, false, false}));
  row = base;
  apply_min_p(row, 0.0f);
  EXPECT_EQ(kept(row), (std::vector<bool>{true, true, true, true}));
}

TEST(SamplingParams, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.validate(100).is_ok()); }

TEST(SamplingParams, RejectsOutOfRangeNamingTheField) {
  struct Case {
    const char* field;
    void (*mutate)(SamplingParams&);
  };
  const Case cases[] = {
      {"'temperature'", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"'temperature'", [](SamplingParams& p) { p.temperature = std::nanf(""); }},
      {"'temperature'", [](SamplingParams& p) { p.temperature = 2.5f; }},
      {"'top_p'", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"'top_p'", [](SamplingParams& p) { p.top_p = 1.5f; }},
      {"'top_k'", [](SamplingParams& p) { p.top_k = -2; }},
      {"'min_p'", [](SamplingParams& p) { p.min_p = 1.1f; }},
      {"'presence_penalty'", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"'frequency_penalty'", [](SamplingParams& p) { p.frequency_penalty = -3.0f; }},
      {"'repetition_penalty'", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"'logit_bias'", [](SamplingParams& p) { p.logit_bias[5] = 101.0f; }},
      {"'logit_bias'", [](SamplingParams& p) { p.logit_bias[100] = 1.0f; }},
      {"'logit_bias'", [](SamplingParams& p) { p.logit_bias[-1] = 1.0f; }},
      {"'n'", [](SamplingParams& p) { p.n = 0; }},
      {"'top_logprobs'", [](SamplingParams& p) { p.logprobs = true; p.top_logprobs = 21; }},
      {"'top_logprobs'", [](SamplingParams& p) { p.top_logprobs = 3; }},
      {"'stop'", [](SamplingParams& p) { p.stop = {"ok", ""}; }},
      {"'stop'", [](SamplingParams& p) { p.stop = {"\x80x"}; }},
      {"'stop_token_ids'", [](SamplingParams& p) { p.stop_token_ids = {100}; }},
      {"'max_tokens'", [](SamplingParams& p) { p.max_tokens = -1; }},
      {"'min_tokens'", [](SamplingParams& p) { p.min_tokens = 17; }},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    Status s = p.validate(100);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

TEST(SamplingParams, AcceptsBoundaries) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{0, -100.0f}, {99, 100.0f}};
  p.logprobs = true;
  p.top_logprobs = 20;
  p.stop = {"\xE6\x97\xA5"};
  p.max_tokens = 0;
  EXPECT_TRUE(p.validate(100).is_ok()) << p.validate(100).to_string();
}

}  // namespace
}  // namespace tf
