// Token masks and the per-choice constraint (src/sampling/grammar): the mask equals a
// brute-force check of every token, end tokens follow completeness, and accept()
// refuses what the mask would have refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/structured_constraint.h"
#include "sampling/grammar/token_mask.h"

namespace tf::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = compile_gbnf(text);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  return *g;
}

// A vocabulary with shared prefixes, multi-byte characters split over tokens, and a
// few byte-less ids (special tokens).
std::vector<std::string> test_vocabulary() {
  std::vector<std::string> v = {"", "{", "}", "{\"", "\"", "\":", ",", " ", "a", "ab", "abc", "b", "1", "12", "123",
                                "-", "true", "tr", "ue", "null", "é", "\xC3", "\xA9", "\xE2\x9C", "\x93", "✓", "[", "]",
                                "\"a", "a\"", "\":1", "}}", "", "\n", "x"};
  std::mt19937 rng(7);
  const std::string alphabet = "{}[]\":,ab1- \n";
  for (int i = 0; i < 300; ++i) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    v.push_back(t);
  }
  return v;
}

void expect_mask_matches_brute_force(const GrammarMatcher& m, const TokenVocabulary& vocab) {
  std::vector<uint8_t> allowed;
  ASSERT_TRUE(fill_token_mask(m, vocab, allowed));
  ASSERT_EQ(allowed.size(), vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    GrammarMatcher copy = m;
    const bool expect = !vocab.bytes(static_cast<int32_t>(id)).empty() && copy.accept(vocab.bytes(static_cast<int32_t>(id)));
    EXPECT_EQ(allowed[id] != 0, expect) << "token " << id << " '" << vocab.bytes(static_cast<int32_t>(id)) << "'";
  }
}

TEST(GrammarTokenMask, EqualsBruteForceAlongAWalk) {
  auto g = compile(R"(
    root ::= "{" ws "\"" key "\":" ws value ("," ws "\"" key "\":" ws value)* ws "}"
    key ::= [a-b]+
    value ::= "-"? [0-9]+ | "true" | "null" | "\"" [^"]* "\""
    ws ::= " "?
  )");
  TokenVocabulary vocab(test_vocabulary());
  GrammarMatcher m(g);
  expect_mask_matches_brute_force(m, vocab);
  // Walk a sentence byte by byte (so the state is also inside multi-byte characters).
  const std::string text = "{ \"ab\": \"é✓x\",\"a\":-12 }";
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_TRUE(m.accept(text.substr(i, 1))) << i;
    expect_mask_matches_brute_force(m, vocab);
  }
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarTokenMask, ConstraintMasksEndsUntilComplete) {
  auto g = compile(R"(root ::= "a" [0-9]*)");
  auto vocab = std::make_shared<TokenVocabulary>(std::vector<std::string>{"", "a", "1", "12", "b", "a1"});
  const int32_t eos = 0;
  StructuredConstraint c(g, vocab, {eos});
  std::vector<float> logits(8, 1.0f);  // two ids past the vocabulary
  ASSERT_TRUE(c.mask(logits).is_ok());
  const float ninf = -INFINITY;
  EXPECT_EQ(logits, (std::vector<float>{ninf, 1, ninf, ninf, ninf, 1, ninf, ninf}));
  EXPECT_FALSE(c.accept(eos).is_ok());  // not complete yet
  EXPECT_FALSE(c.accept(4).is_ok());    // "b"
  ASSERT_TRUE(c.accept(1).is_ok());     // "a": complete, may go on with digits
  std::vector<float> next(6, 2.0f);
  ASSERT_TRUE(c.mask(next).is_ok());
  EXPECT_EQ(next, (std::vector<float>{2, ninf, 2, 2, ninf, ninf}));
  ASSERT_TRUE(c.accept(3).is_ok());
  EXPECT_TRUE(c.complete());
  EXPECT_TRUE(c.accept(eos).is_ok());
}

// A grammar too ambiguous to mask within the work allowed is a clean refusal, not a stall.
TEST(GrammarTokenMask, TooMuchWorkIsRefused) {
  auto g = compile(R"(root ::= ("a" | "a" "a" | "a" "a" "a")* "b")");
  auto vocab = std::make_shared<TokenVocabulary>(test_vocabulary());
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept("aaaaaaaa"));
  std::vector<uint8_t> allowed;
  EXPECT_TRUE(fill_token_mask(m, *vocab, allowed));
  EXPECT_FALSE(fill_token_mask(m, *vocab, allowed, /*max_work=*/50));
  StructuredConstraint c(g, vocab, {0}, /*max_mask_work=*/50);
  ASSERT_TRUE(c.accept(8).is_ok());  // "a"
  std::vector<float> logits(vocab->size(), 0.0f);
  EXPECT_EQ(c.mask(logits).code(), StatusCode::kInvalidArgument);
}

// A request's choices share their masks (shared_masks.h): n choices in the same state compute
// its mask once, and one refused mask refuses them all (64 choices of a hostile grammar each
// spent the whole work budget on the same first mask, one after another in the engine's step).
TEST(GrammarTokenMask, ChoicesShareMasksAndRefusals) {
  auto g = compile(R"(root ::= ("a" | "a" "a" | "a" "a" "a")* "b")");
  auto vocab = std::make_shared<TokenVocabulary>(test_vocabulary());
  const auto choices = [&](std::shared_ptr<SharedMasks> shared, uint64_t max_work) {
    std::vector<std::unique_ptr<StructuredConstraint>> out;
    for (int i = 0; i < 8; ++i)
      out.push_back(
          std::make_unique<StructuredConstraint>(g, vocab, std::vector<int32_t>{0}, max_work, shared));
    return out;
  };
  std::vector<float> logits(vocab->size(), 0.0f);
  auto shared = std::make_shared<SharedMasks>();
  for (auto& c : choices(shared, kMaxMaskWork)) EXPECT_TRUE(c->mask(logits).is_ok());
  EXPECT_EQ(shared->computed(), 1u);

  auto poor = std::make_shared<SharedMasks>();
  auto refused = choices(poor, /*max_work=*/50);
  for (auto& c : refused) ASSERT_TRUE(c->accept(8).is_ok());  // "a": ambiguous from here
  for (auto& c : refused) EXPECT_EQ(c->mask(logits).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(poor->refused());
  EXPECT_EQ(poor->computed(), 0u);
}

// Ambiguity on top of deep nesting: 3 x 2^k stacks, each as deep as the text's nesting.
// Ten a's 20,000 brackets deep made 3,072 stacks of 20,000 elements (245 MB a state,
// copied at every byte); past kMaxStateElements such a state is dead (2,000 deep here).
TEST(GrammarTokenMask, DeepAmbiguousStatesAreDead) {
  auto g = compile(R"g(
    root ::= "[" root "]" | "(" amb ")"
    amb ::= "a" amb "b" | "a" amb "c" | "x"
  )g");
  GrammarMatcher deep(g);
  ASSERT_TRUE(deep.accept(std::string(2000, '[') + "("));
  EXPECT_FALSE(deep.accept(std::string(10, 'a')));
  GrammarMatcher shallow(g);
  EXPECT_TRUE(shallow.accept("[(" + std::string(10, 'a')));
}

// A chain of rules that each start with the next: expanding it copies the growing stack at
// every link (3,000 links: 4.5M elements for one step, 10,000: 50M). Such a step is dead;
// at the start the grammar is refused when compiled (it could never match).
TEST(GrammarTokenMask, LongLeftmostRuleChainsAreDead) {
  const auto chain_text = [](int links) {
    std::string text = "root ::= r0\n";
    for (int i = 0; i < links; ++i)
      text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
    return text + "r" + std::to_string(links) + " ::= \"y\"\n";
  };
  const auto chain = [&](int links) { return compile(chain_text(links)); };
  auto long_chain = compile_gbnf(chain_text(3000));
  ASSERT_FALSE(long_chain.has_value());
  EXPECT_NE(long_chain.status().message().find("parses open at once"), std::string::npos);
  auto later = compile("root ::= \"z\" r0\n" + chain_text(3000).substr(std::string("root ::= r0\n").size()));
  GrammarMatcher long_later(later);
  EXPECT_FALSE(long_later.accept("zy"));
  GrammarMatcher short_chain(chain(300));
  EXPECT_TRUE(short_chain.accept("y" + std::string(300, 'x')));
  EXPECT_TRUE(short_chain.is_complete());
}

// Every token of up to 12 brackets leaves a distinct state as deep as the text: from
// 20,000 deep, one mask kept 8,190 such states (over 4 GB). The walk's states are bounded
// (4,000 deep here: 800 MB before).
TEST(GrammarTokenMask, MaskWalkKeepsBoundedMemory) {
  auto g = compile(R"(root ::= "[" root "]" | "{" root "}" | "x")");
  std::vector<std::string> tokens = {""};
  for (int len = 1; len <= 12; ++len) {
    for (int bits = 0; bits < (1 << len); ++bits) {
      std::string t;
      for (int i = 0; i < len; ++i) t += (bits >> i) & 1 ? '{' : '[';
      tokens.push_back(t);
    }
  }
  TokenVocabulary vocab(tokens);
  std::vector<uint8_t> allowed;
  GrammarMatcher deep(g);
  ASSERT_TRUE(deep.accept(std::string(4000, '[')));
  EXPECT_FALSE(fill_token_mask(deep, vocab, allowed));
  GrammarMatcher shallow(g);
  ASSERT_TRUE(shallow.accept("[["));
  EXPECT_TRUE(fill_token_mask(shallow, vocab, allowed));
  EXPECT_EQ(allowed[1], 1);
}

// Past the matcher's limits a state counted as dead, so a grammar with 5,000 alternatives
// open at once (an enum of 5,000 strings, a regex a0|a1|...) masked every token and failed
// with "every token is excluded". At the start it is refused when compiled; later, the mask
// is refused (the constraint's "too ambiguous" error) rather than leave tokens out.
TEST(GrammarTokenMask, StatesPastTheLimitsAreRefusedNotDead) {
  std::string alternatives;
  for (int i = 0; i < 5000; ++i)
    alternatives += std::string(i ? " | " : "") + "\"x" + std::to_string(i) + "\"";
  auto at_start = compile_gbnf("root ::= " + alternatives);
  ASSERT_FALSE(at_start.has_value());
  EXPECT_NE(at_start.status().message().find("more than 4096 parses open at once"), std::string::npos)
      << at_start.status().message();
  auto nullable = compile_gbnf(R"(root ::= ("a"?){10000} "b")");
  EXPECT_FALSE(nullable.has_value());

  auto later = compile("root ::= \"{\" (" + alternatives + ")");
  GrammarMatcher m(later);
  TokenVocabulary vocab({"{", "}", "x", "{x"});
  std::vector<uint8_t> allowed;
  EXPECT_FALSE(fill_token_mask(m, vocab, allowed));
  StructuredConstraint c(
      later, std::make_shared<TokenVocabulary>(std::vector<std::string>{"{", "}", "x", "{x"}), {});
  std::vector<float> logits(4, 0.0f);
  const Status st = c.mask(logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("4096"), std::string::npos) << st.message();
  // At the limit, all is well: 4,096 alternatives.
  std::string at_limit;
  for (int i = 0; i < 4096; ++i) at_limit += std::string(i ? " | " : "") + "\"x" + std::to_string(i) + "\"";
  auto fits = compile("root ::= " + at_limit);
  EXPECT_TRUE(grammar_matches(*fits, "x4095"));
}

}  // namespace
}  // namespace tf::grammar
