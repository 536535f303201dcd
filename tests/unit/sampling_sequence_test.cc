// SequenceSampler over a fake model: reproducible sequences, n choices, seeds
// from the prompt, min/max tokens and EOS.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "sampling/batch_sampler.h"
#include "sampling/counter_hash.h"
#include "sampling/sequence_sampler.h"

namespace tf {
namespace {

constexpr int32_t kVocab = 50;
constexpr int32_t kEos = 0;

// A deterministic fake model: the next-token logits depend on the last token.
std::vector<float> fake_logits(int32_t last, float eos_logit = 0.0f) {
  std::vector<float> row(kVocab);
  for (int32_t v = 0; v < kVocab; ++v) {
    row[static_cast<size_t>(v)] = static_cast<float>(hash_to_open_unit(counter_hash(7, static_cast<uint64_t>(last), v)) * 3.0);
  }
  row[kEos] = eos_logit;
  return row;
}

std::vector<int32_t> generate(const SamplingParams& p, const std::vector<int32_t>& prompt, uint32_t choice,
                              float eos_logit = 0.0f, FinishReason* reason = nullptr) {
  const std::vector<int32_t> eos{kEos};
  SequenceSampler seq(p, prompt, eos, choice);
  Sampler sampler;
  std::vector<int32_t> out;
  int32_t last = prompt.back();
  while (!seq.finished()) {
    auto step = seq.step(fake_logits(last, eos_logit), sampler);
    EXPECT_TRUE(step);
    if (!step) break;
    out.push_back(step->sampled.token);
    last = step->sampled.token;
  }
  if (reason) *reason = seq.finish_reason();
  return out;
}

SamplingParams params(int32_t max_tokens) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

TEST(SequenceSampler, IdenticalRequestsGiveIdenticalOutput) {
  const std::vector<int32_t> prompt{5, 6, 7};
  auto p = params(30);
  p.presence_penalty = 0.5f;
  p.repetition_penalty = 1.2f;
  FinishReason reason = FinishReason::kNone;
  const auto a = generate(p, prompt, 0, 0.0f, &reason);
  EXPECT_EQ(a.size(), 30u);
  EXPECT_EQ(reason, FinishReason::kLength);
  EXPECT_EQ(generate(p, prompt, 0), a);
  // Another prompt derives another seed; an explicit seed overrides the prompt.
  EXPECT_NE(generate(p, {5, 6, 8}, 0), a);
  p.seed = 42;
  const auto seeded = generate(p, prompt, 0);
  EXPECT_NE(seeded, a);
  EXPECT_EQ(generate(p, prompt, 0), seeded);
  p.seed = 43;
  EXPECT_NE(generate(p, prompt, 0), seeded);
}

TEST(SequenceSampler, ChoicesDifferAndChoiceZeroIsTheSingleReply) {
  const std::vector<int32_t> prompt{1, 2};
  const auto p = params(25);
  const auto c0 = generate(p, prompt, 0);
  const auto c1 = generate(p, prompt, 1);
  const auto c2 = generate(p, prompt, 2);
  EXPECT_NE(c0, c1);
  EXPECT_NE(c1, c2);
  EXPECT_NE(c0, c2);
  const std::vector<int32_t> eos{kEos};
  SequenceSampler s0(p, prompt, eos, 0), s1(p, prompt, eos, 1);
  EXPECT_NE(s0.seed(), s1.seed());
}

TEST(SequenceSampler, PositionsAreAbsolute) {
  const std::vector<int32_t> prompt{1, 2, 3, 4};
  const std::vector<int32_t> eos{kEos};
  SequenceSampler seq(params(5), prompt, eos, 0);
  Sampler sampler;
  EXPECT_EQ(seq.position(), 4);
  ASSERT_TRUE(seq.step(fake_logits(4), sampler));
  EXPECT_EQ(seq.position(), 5);
  EXPECT_EQ(seq.generated(), 1);
}

TEST(SequenceSampler, MinTokensHoldsBackEos) {
  SamplingParams p;
  p.max_tokens = 10;
  p.min_tokens = 3;
  FinishReason reason = FinishReason::kNone;
  // EOS dominates: it comes as soon as it is allowed, as the 4th token.
  const auto out = generate(p, {9}, 0, 50.0f, &reason);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NE(out[0], kEos);
  EXPECT_NE(out[2], kEos);
  EXPECT_EQ(out[3], kEos);
  EXPECT_EQ(reason, FinishReason::kStop);
  p.ignore_eos = true;
  EXPECT_EQ(generate(p, {9}, 0, 50.0f, &reason).size(), 10u);
  EXPECT_EQ(reason, FinishReason::kLength);
}

TEST(SequenceSampler, StepAfterFinishFails) {
  const std::vector<int32_t> prompt{1};
  const std::vector<int32_t> eos{kEos};
  SequenceSampler seq(params(1), prompt, eos, 0);
  Sampler sampler;
  auto first = seq.step(fake_logits(1), sampler);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->finish, FinishReason::kLength);
  EXPECT_EQ(seq.step(fake_logits(1), sampler).status().code(), StatusCode::kInternal);
}

// Eight sequences decoded together for 20 steps on pools of 1 and 3 threads,
// and in another row order: every sequence gets the tokens it gets alone.
TEST(BatchSampler, SameTokensWhateverThePoolAndRowOrder) {
  auto p = params(20);
  p.top_p = 0.9f;
  p.frequency_penalty = 0.3f;
  const std::vector<int32_t> eos{kEos};
  auto run = [&](ThreadPool& pool, const std::vector<int>& order) {
    std::vector<std::unique_ptr<SequenceSampler>> seqs;
    std::vector<int32_t> last;
    for (int r = 0; r < 8; ++r) {
      const std::vector<int32_t> prompt{r, r + 1};
      seqs.push_back(std::make_unique<SequenceSampler>(p, prompt, eos, static_cast<uint32_t>(r % 2)));
      last.push_back(r + 1);
    }
    std::vector<std::vector<int32_t>> out(8);
    for (int step = 0; step < 20; ++step) {
      std::vector<float> logits;
      std::vector<SequenceSampler*> rows;
      for (int r : order) {
        const auto row = fake_logits(last[static_cast<size_t>(r)]);
        logits.insert(logits.end(), row.begin(), row.end());
        rows.push_back(seqs[static_cast<size_t>(r)].get());
      }
      auto steps = sample_batch(logits, kVocab, rows, pool);
      for (size_t i = 0; i < order.size(); ++i) {
        EXPECT_TRUE(steps[i]);
        const auto r = static_cast<size_t>(order[i]);
        out[r].push_back(steps[i]->sampled.token);
        last[r] = steps[i]->sampled.token;
      }
    }
    return out;
  };
  ThreadPool one(1), three(3);
  const auto a = run(one, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(run(three, {0, 1, 2, 3, 4, 5, 6, 7}), a);
  EXPECT_EQ(run(three, {7, 3, 5, 1, 0, 6, 2, 4}), a);
  const auto alone = run(one, {5});
  EXPECT_EQ(alone[5], a[5]);
  EXPECT_EQ(generate(p, {5, 6}, 1), a[5]);  // and what the single-sequence loop gives
}

TEST(BatchSampler, ShapeMismatchIsAnErrorPerRow) {
  ThreadPool pool(1);
  const std::vector<int32_t> prompt{1}, eos{kEos};
  SequenceSampler seq(params(3), prompt, eos, 0);
  std::vector<SequenceSampler*> rows{&seq, &seq};
  const std::vector<float> logits(kVocab, 0.0f);  // one row, two sequences
  auto out = sample_batch(logits, kVocab, rows, pool);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_FALSE(out[0]);
  EXPECT_FALSE(out[1]);
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// allowed_token_ids: every token comes from the list, greedy and sampled, and a list that
// leaves the greedy token in gives the same token as no list; nothing goes to the device.
TEST(SequenceSampler, AllowedTokenIdsAreTheOnlyOnesSampled) {
  const std::vector<int32_t> prompt{5, 6, 7};
  for (float temperature : {0.0f, 1.0f}) {
    auto p = params(40);
    p.temperature = temperature;
    p.seed = 3;
    const auto free = generate(p, prompt, 0);
    p.allowed_token_ids = {4, 9, 17, 33};
    const auto kept = generate(p, prompt, 0);
    ASSERT_EQ(kept.size(), 40u);
    for (int32_t t : kept) EXPECT_TRUE(t == 4 || t == 9 || t == 17 || t == 33) << t;
    EXPECT_NE(kept, free);
    SequenceSampler seq(p, prompt, std::vector<int32_t>{kEos}, 0);
    EXPECT_FALSE(seq.device_params(kVocab).has_value());
  }
}

// bad_words: a one-token word never appears; a two-token word's second token never follows
// its first, while each token alone still may. Checked against the free reply of the same seed.
TEST(SequenceSampler, BadWordsAreNeverWritten) {
  const std::vector<int32_t> prompt{5, 6, 7};
  auto p = params(400);
  p.temperature = 1.0f;
  p.seed = 11;
  const auto free = generate(p, prompt, 0);
  // The free reply's most common token, and its most common bigram that does not involve it.
  std::map<int32_t, int> count;
  for (int32_t t : free) ++count[t];
  const int32_t single = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) {
                           return a.second < b.second;
                         })->first;
  std::map<std::pair<int32_t, int32_t>, int> pairs;
  for (size_t i = 1; i < free.size(); ++i)
    if (free[i - 1] != single && free[i] != single) ++pairs[{free[i - 1], free[i]}];
  ASSERT_FALSE(pairs.empty());
  const auto pair = std::max_element(pairs.begin(), pairs.end(), [](auto& a, auto& b) {
                      return a.second < b.second;
                    })->first;
  p.bad_words_ids = {{single}, {pair.first, pair.second}};
  const auto clean = generate(p, prompt, 0);
  ASSERT_EQ(clean.size(), 400u);
  bool first_seen = false, second_seen = false;
  for (size_t i = 0; i < clean.size(); ++i) {
    EXPECT_NE(clean[i], single) << i;
    if (i > 0) {
      EXPECT_FALSE(clean[i - 1] == pair.first && clean[i] == pair.second) << i;
    }
    first_seen = first_seen || clean[i] == pair.first;
    second_seen = second_seen || clean[i] == pair.second;
  }
  EXPECT_TRUE(first_seen && second_seen);  // only the pair is banned, not its tokens
  SequenceSampler seq(p, prompt, std::vector<int32_t>{kEos}, 0);
  EXPECT_FALSE(seq.device_params(kVocab).has_value());
}

TEST(SamplingParamsValidate, AllowedIdsAndBadWordsAreInTheVocabulary) {
  auto p = params(4);
  p.allowed_token_ids = {1, kVocab};
  EXPECT_FALSE(p.validate(kVocab).is_ok());
  p.allowed_token_ids = {1, 2};
  EXPECT_TRUE(p.validate(kVocab).is_ok());
  p.bad_words_ids = {{}};
  EXPECT_FALSE(p.validate(kVocab).is_ok());
  p.bad_words_ids = {{3, -1}};
  EXPECT_FALSE(p.validate(kVocab).is_ok());
}

}  // namespace
}  // namespace tf
