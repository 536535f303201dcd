// Byte-level BPE training (src/text/bpe_trainer.h): merges on toy corpora worked out by hand,
// tie-breaking, min_frequency, determinism (input order, repeated runs), and that the trained
// tokenizer loads and round-trips arbitrary UTF-8.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe_trainer.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;
const std::string kSpace = byte_level_encode(" ");  // "Ġ"

BpeTrainingResult train(const std::vector<std::string_view>& texts, size_t merges, int64_t min_frequency) {
  BpeTrainerOptions o;
  o.num_merges = merges;
  o.min_frequency = min_frequency;
  Expected<BpeTrainingResult> r = train_byte_level_bpe(texts, o);
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  return r.has_value() ? std::move(r).value() : BpeTrainingResult{};
}

std::unique_ptr<Tokenizer> load(const BpeTrainingResult& r, const std::vector<AddedTokenSpec>& added = {}) {
  const nlohmann::json j = nlohmann::json::parse(byte_level_tokenizer_json(r, added).dump());
  TokenizerConfig verbatim;  // the tests round-trip text: no clean-up of spaces before punctuation
  verbatim.clean_up_tokenization_spaces = false;
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(j, verbatim);
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  return t.has_value() ? std::move(t).value() : nullptr;
}

// "abab abab ab" -> words "abab", "Ġabab", "Ġab".
//  pairs: (a,b) 2+2+1 = 5, (b,a) 2, (Ġ,a) 2          -> merge a+b
//  words [ab ab] [Ġ ab ab] [Ġ ab]: (ab,ab) 2, (Ġ,ab) 2 -> tie; "ab" < "Ġ" (0x61 < 0xC4) -> merge ab+ab
//  words [abab] [Ġ abab] [Ġ ab]: (Ġ,abab) 1, (Ġ,ab) 1 -> stop at min_frequency 2;
//  at 1: same left, "ab" < "abab" -> Ġ+ab, then Ġ+abab, then nothing is left to merge.
TEST(BpeTrainer, ToyCorpusMergesWorkedByHand) {
  const std::vector<std::string_view> texts = {"abab abab ab"};
  const BpeTrainingResult r2 = train(texts, 100, 2);
  EXPECT_EQ(r2.merges, (Merges{{"a", "b"}, {"ab", "ab"}}));
  ASSERT_EQ(r2.vocab.size(), 258u);
  EXPECT_EQ(r2.vocab[256], "ab");
  EXPECT_EQ(r2.vocab[257], "abab");

  const BpeTrainingResult r1 = train(texts, 100, 1);
  EXPECT_EQ(r1.merges, (Merges{{"a", "b"}, {"ab", "ab"}, {kSpace, "ab"}, {kSpace, "abab"}}));
  ASSERT_EQ(r1.vocab.size(), 260u);
  EXPECT_EQ(r1.vocab[258], kSpace + "ab");
  EXPECT_EQ(r1.vocab[259], kSpace + "abab");

  // num_merges caps the count.
  EXPECT_EQ(train(texts, 3, 1).merges.size(), 3u);
  EXPECT_EQ(train(texts, 0, 1).merges.size(), 0u);

  // The trained tokenizer uses them: whole words are single tokens.
  auto tok = load(r1);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("abab ab"), (std::vector<TokenId>{257, 258}));
  EXPECT_EQ(tok->encode("ba"), (std::vector<TokenId>{'b', 'a'}));
}

// Word frequencies weight the pairs: words "low" x3, "Ġlower" x1, "Ġnewest" x2 (the GLM regex
// joins a space to the letters after it). Counts: (l,o) 4, (o,w) 4, (w,e) 3, then 2 for (Ġ,n)
// (n,e) (e,w) (e,s) (s,t). Tie at 4: "l" < "o" -> l+o; then (lo,w) 4 -> lo+w; then the tie at 2
// goes to the smallest left symbol "e", and between (e,s) and (e,w) to "s".
TEST(BpeTrainer, FrequenciesAndTieBreaks) {
  const std::vector<std::string_view> texts = {"low", "low", "low", " lower", " newest", " newest"};
  const BpeTrainingResult r = train(texts, 3, 2);
  EXPECT_EQ(r.merges, (Merges{{"l", "o"}, {"lo", "w"}, {"e", "s"}}));
}

// Invariants on a corpus with many ways to build the same string: no duplicate tokens, every
// merge result in the vocabulary, at most one new token per merge.
TEST(BpeTrainer, VocabularyIsConsistentWithMerges) {
  const std::vector<std::string_view> texts = {"abc abc bc bc bc ab ab ab ab", "cabc cab bca aaaa aaa aa",
                                               "abcabcabc bcabca"};
  const BpeTrainingResult r = train(texts, 200, 1);
  std::set<std::string> seen;
  for (const std::string& t : r.vocab) EXPECT_TRUE(seen.insert(t).second) << "duplicate token " << t;
  for (const auto& [a, b] : r.merges) EXPECT_TRUE(seen.count(a + b)) << a << " + " << b;
  EXPECT_LE(r.vocab.size(), 256 + r.merges.size());
  EXPECT_GT(r.merges.size(), 10u);
}

const std::vector<std::string_view> kEnglish = {
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.\n",
    "int main(int argc, char** argv) {\n  return argc > 1 ? 0 : 1;\n}\n",
    "for (size_t i = 0; i < n; ++i) total += values[i];\n",
    "Tokenizers split text into words, then merge the most frequent pairs of symbols.\n",
    "It's 12:30 and they're testing 1234567 numbers, don't you think?\n",
};

TEST(BpeTrainer, DeterministicAndIndependentOfInputOrder) {
  const BpeTrainingResult a = train(kEnglish, 150, 1);
  const BpeTrainingResult b = train(kEnglish, 150, 1);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.vocab, b.vocab);
  std::vector<std::string_view> reversed(kEnglish.rbegin(), kEnglish.rend());
  const BpeTrainingResult c = train(reversed, 150, 1);
  EXPECT_EQ(a.merges, c.merges);
  EXPECT_EQ(a.vocab, c.vocab);
  EXPECT_EQ(a.merges.size(), 150u);
  // The JSON is byte-identical too.
  EXPECT_EQ(byte_level_tokenizer_json(a, {{"<|user|>", true}}).dump(),
            byte_level_tokenizer_json(c, {{"<|user|>", true}}).dump());
  // Training stops when no pair is left (min_frequency 1) or none occurs twice (2), earlier.
  const BpeTrainingResult all = train(kEnglish, 100000, 1);
  const BpeTrainingResult twice = train(kEnglish, 100000, 2);
  EXPECT_GT(all.merges.size(), 150u);
  EXPECT_LT(all.merges.size(), 100000u);
  EXPECT_LT(twice.merges.size(), all.merges.size());
  EXPECT_GT(twice.merges.size(), 20u);
}

TEST(BpeTrainer, EmptyCorpusGivesTheByteAlphabet) {
  const BpeTrainingResult r = train({}, 100, 1);
  EXPECT_TRUE(r.merges.empty());
  ASSERT_EQ(r.vocab.size(), 256u);
  EXPECT_EQ(r.vocab[' '], kSpace);
  EXPECT_EQ(r.vocab['a'], "a");
  // min_frequency above every count: no merge.
  EXPECT_TRUE(train({"abab abab ab"}, 100, 6).merges.empty());
  EXPECT_EQ(train({"abab abab ab"}, 100, 5).merges, (Merges{{"a", "b"}}));
  // Still a working, lossless tokenizer.
  auto tok = load(r);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode(tok->encode("héllo\n")), "héllo\n");
  EXPECT_EQ(tok->encode("héllo").size(), 6u);  // one token per byte
}

TEST(BpeTrainer, BadPatternIsAnError) {
  BpeTrainerOptions o;
  o.split_pattern = "(unclosed";
  const std::vector<std::string_view> texts = {"abc"};
  Expected<BpeTrainingResult> r = train_byte_level_bpe(texts, o);
  EXPECT_FALSE(r.has_value());
}

// Deterministic random UTF-8: ASCII (incl. controls), Latin-1, Greek, CJK, emoji, whitespace runs.
std::string random_utf8(uint64_t& state, size_t n) {
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  static const char32_t kRanges[][2] = {{0x00, 0x7f}, {0x20, 0x7e}, {0x20, 0x7e}, {0xa0, 0xff}, {0x391, 0x3c9},
                                        {0x4e00, 0x9fa5}, {0x1f600, 0x1f64f}, {0x2000, 0x200f}};
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto& r = kRanges[next() % 8];
    const char32_t cp = r[0] + next() % (r[1] - r[0] + 1);
    if (next() % 7 == 0) s += (next() % 2) ? "  " : "\n";
    append_utf8(s, cp);
  }
  return s;
}

TEST(BpeTrainer, TrainedTokenizerRoundTripsArbitraryUtf8) {
  const BpeTrainingResult r = train(kEnglish, 400, 1);
  auto tok = load(r, {{"<|user|>", true}, {"<think>", true}});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), r.vocab.size() + 2);
  EXPECT_EQ(tok->token_to_id("<|user|>"), static_cast<TokenId>(r.vocab.size()));
  EXPECT_EQ(tok->token_to_id("<think>"), static_cast<TokenId>(r.vocab.size() + 1));
  uint64_t state = 42;
  for (int i = 0; i < 500; ++i) {
    std::string s = random_utf8(state, 1 + i % 40);
    if (i % 5 == 0) s += "<|user|>the fox<think>";
    const std::vector<TokenId> ids = tok->encode(s);
    ASSERT_EQ(tok->decode(ids), s) << "string #" << i;
    for (TokenId id : ids) EXPECT_LT(static_cast<size_t>(id), tok->vocab_size());
  }
  // Text seen in training compresses well.
  const std::vector<TokenId> ids = tok->encode(std::string(kEnglish[0]));
  EXPECT_LT(ids.size(), kEnglish[0].size() / 3);
}

}  // namespace
}  // namespace tf::text
