// IncrementalDetokenizer: pieces are always valid UTF-8 and add up to decode(all ids), with
// characters split across tokens, added tokens in between, clean-up of tokenization spaces, and a
// non-byte-level (SentencePiece-style) decoder chain.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "text/detokenizer.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;
using testing::added_token;
using testing::build;
using testing::byte_level_tokenizer;

struct StreamResult {
  std::vector<std::string> pieces;
  std::string text;
};

StreamResult stream(const Tokenizer& t, const Ids& ids, bool skip) {
  IncrementalDetokenizer d(t, skip);
  StreamResult r;
  for (TokenId id : ids) {
    r.pieces.push_back(d.add(id));
    EXPECT_TRUE(is_valid_utf8(r.pieces.back()));
    r.text += r.pieces.back();
    // Never ahead of the truth: what was streamed is a prefix of the final text.
    const std::string full = t.decode(ids, skip);
    EXPECT_EQ(full.compare(0, r.text.size(), r.text), 0);
  }
  r.pieces.push_back(d.finish());
  r.text += r.pieces.back();
  EXPECT_EQ(d.emitted(), r.text);
  return r;
}

TEST(IncrementalDetokenizer, HoldsBackSplitCharactersUntilComplete) {
  // Byte tokens only: "é" (C3 A9) and "😀" (F0 9F 98 80) arrive byte by byte.
  auto t = build(byte_level_tokenizer());
  const Ids ids = t->encode("a\xC3\xA9\xF0\x9F\x98\x80!", false);
  ASSERT_EQ(ids.size(), 8u);
  const StreamResult r = stream(*t, ids, false);
  EXPECT_EQ(r.pieces, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "", "\xF0\x9F\x98\x80", "!", ""}));
}

TEST(IncrementalDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  auto t = build(byte_level_tokenizer());
  json j = byte_level_tokenizer();
  j["added_tokens"] = {added_token(300, "<|end|>", true)};
  auto u = build(j);
  // E4 B8 then an added token: the incomplete sequence is closed by U+FFFD before the token.
  const Ids ids = {0xE4, 0xB8, 300, 'x', 0xFF, 0xF0, 0x9F};
  const StreamResult r = stream(*u, ids, false);
  EXPECT_EQ(r.text, u->decode(ids, false));
  EXPECT_EQ(r.text, "\xEF\xBF\xBD<|end|>x\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(stream(*u, ids, true).text, u->decode(ids, true));
}

TEST(IncrementalDetokenizer, RandomSplitsOfMultiByteTextMatchDecode) {
  // Merges that make tokens end in the middle of characters (E4 B8 | AD, F0 9F | 98 80).
  json j = byte_level_tokenizer({{"\xE4", "\xB8"}, {"\xF0", "\x9F"}, {"\x98", "\x80"}, {"a", "\xC3"}, {" ", "t"}});
  j["added_tokens"] = {added_token(400, "<|im_start|>", true), added_token(401, "<think>", false)};
  auto t = build(j);
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {"a", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", " ", " t", "\n",
                                          "<|im_start|>", "<think>", "\xCC\x81", "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"};
  for (int iter = 0; iter < 500; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) s += parts[rng() % parts.size()];
    const Ids ids = t->encode(s, false);
    for (bool skip : {false, true}) {
      const StreamResult r = stream(*t, ids, skip);
      ASSERT_EQ(r.text, t->decode(ids, skip)) << iter;
    }
    ASSERT_EQ(t->decode(ids, false), s);
  }
}

TEST(IncrementalDetokenizer, RandomIdSequencesNeverBreakUtf8) {
  json j = byte_level_tokenizer({{"\xE4", "\xB8"}, {"\xF0", "\x9F"}});
  j["added_tokens"] = {added_token(300, "<s>", true)};
  auto t = build(j);
  std::mt19937 rng(99);
  for (int iter = 0; iter < 500; ++iter) {
    Ids ids;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<TokenId>(rng() % 310));
    const StreamResult r = stream(*t, ids, iter % 2 == 0);
    ASSERT_EQ(r.text, t->decode(ids, iter % 2 == 0)) << iter;
  }
}

TEST(IncrementalDetokenizer, CleanUpOfTokenizationSpacesStreamsExactly) {
  json j = byte_level_tokenizer({{" ", "'"}, {"'", "s"}, {" ", "."}, {"n", "'"}});
  TokenizerConfig cfg;
  cfg.clean_up_tokenization_spaces = true;
  auto t = build(j, cfg);
  std::mt19937 rng(3);
  const std::vector<std::string> parts = {" ", "'", "s", "m", "ve", "re", "n't", ".", ",", "!", "?", "a", "  ", "\xC3\xA9"};
  for (int iter = 0; iter < 1000; ++iter) {
    std::string s;
    const int n = static_cast<int>(rng() % 25);
    for (int i = 0; i < n; ++i) s += parts[rng() % parts.size()];
    const Ids ids = t->encode(s, false);
    const StreamResult r = stream(*t, ids, false);
    ASSERT_EQ(r.text, t->decode(ids, false)) << iter;
    ASSERT_EQ(r.text, clean_up_tokenization(s)) << iter;
  }
  // Text without spaces streams without delay.
  const Ids ids = t->encode("abc", false);
  IncrementalDetokenizer d(*t);
  EXPECT_EQ(d.add(ids[0]), "a");
}

TEST(IncrementalDetokenizer, SentencePieceDecoderChain) {
  // Replace(▁ -> space), ByteFallback, Fuse, Strip: the generic (re-decoding) path.
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\u2581", 2}, {"\u2581hi", 3}, {"!", 4}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 5 + b;
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", "<unk>"}, {"byte_fallback", true}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["added_tokens"] = {added_token(1, "<s>", true)};
  auto t = build(j);
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    Ids ids;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(rng() % 6);
      if (k < 4) ids.push_back(static_cast<TokenId>(k + 1));
      else if (k == 4) { ids.push_back(5 + 0xE4); ids.push_back(5 + 0xB8); ids.push_back(5 + 0xAD); }
      else ids.push_back(5 + static_cast<TokenId>(rng() % 256));
    }
    for (bool skip : {false, true}) {
      const StreamResult r = stream(*t, ids, skip);
      ASSERT_EQ(r.text, t->decode(ids, skip)) << iter;
    }
  }
}

}  // namespace
}  // namespace tf::text

namespace tf::text {
namespace {

// Tokenizer::token_bytes: the raw bytes behind each token (OpenAI logprob `bytes`), which add
// up to the text even where a character is split across tokens and decode() shows U+FFFD.
TEST(TokenBytes, ByteLevelTokensGiveTheirRawBytes) {
  auto t = testing::build(testing::byte_level_tokenizer());
  const std::string text = "a\xC3\xA9\xF0\x9F\x98\x80!";
  const std::vector<TokenId> ids = t->encode(text, false);
  std::string joined;
  for (TokenId id : ids) {
    const std::string b = t->token_bytes(id);
    EXPECT_EQ(b.size(), 1u) << "id " << id;
    joined += b;
  }
  EXPECT_EQ(joined, text);
  const TokenId split[1] = {0xC3};
  EXPECT_EQ(t->decode(split), "\xEF\xBF\xBD");  // the repaired text differs from the bytes
  EXPECT_EQ(t->token_bytes(0xC3), "\xC3");
}

TEST(TokenBytes, AddedTokensAndUnknownIds) {
  nlohmann::json j = testing::byte_level_tokenizer();
  j["added_tokens"] = {testing::added_token(300, "<|end|>", true)};
  auto t = testing::build(j);
  EXPECT_EQ(t->token_bytes(300), "<|end|>");
  EXPECT_EQ(t->token_bytes(100000), "");
}

}  // namespace
}  // namespace tf::text
