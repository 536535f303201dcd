// WordPiece, Unigram and WordLevel models, the BERT pipeline, the normalizers and decoders added
// for them, and malformed model sections. Every expected value was produced by transformers.js
// 3.7.2 (the reference) on the same tokenizer.json, and checked by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "text/normalizer.h"
#include "text/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;
using testing::build;
using testing::tokenizer_with;

json wordpiece_model() {
  return {{"type", "WordPiece"},
          {"unk_token", "[UNK]"},
          {"continuing_subword_prefix", "##"},
          {"max_input_chars_per_word", 5},
          {"vocab",
           {{"[UNK]", 0}, {"un", 1}, {"##aff", 2}, {"##able", 3}, {"##affa", 4}, {"##b", 5}, {"a", 6}, {"\u00e9", 7},
            {"##\u00e9", 8}, {"hel", 9}, {"##lo", 10}, {"world", 11}, {"!", 12}}}};
}

TEST(WordPiece, GreedyLongestMatchFirstWithContinuationPrefix) {
  auto t = build(tokenizer_with(wordpiece_model(), {{"type", "WhitespaceSplit"}}));
  // "unaff": "un" then "##aff". "unaffable": greedy takes "##affa" (longer than "##aff"), then
  // "##b", then nothing matches "le": the whole word is [UNK] (no backtracking to "##aff" "##able").
  EXPECT_EQ(t->encode("unaff unaffable"), (Ids{1, 2, 0}));
  EXPECT_EQ(t->encode("hello"), (Ids{9, 10}));
}

TEST(WordPiece, WordsLongerThanMaxInputCharsAreUnk) {
  auto t = build(tokenizer_with(wordpiece_model(), {{"type", "WhitespaceSplit"}}));
  // The limit (5) counts code points, not bytes: five two-byte "é" pass, six do not.
  EXPECT_EQ(t->encode("aaaaaa \u00e9\u00e9\u00e9\u00e9\u00e9 \u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"), (Ids{0, 7, 8, 8, 8, 8, 0}));
  // One unknown part makes the whole word unk.
  EXPECT_EQ(t->encode("a!x"), (Ids{0}));
}

json unigram_model() {
  return {{"type", "Unigram"},
          {"unk_id", 0},
          {"vocab", json::parse(R"([["<unk>", 0], ["a", -1], ["b", -1], ["ab", -2], ["abc", -4.5], ["c", -1], ["cd", -1.5], ["d", -1]])")}};
}

TEST(Unigram, ViterbiPicksTheBestScoringSegmentation) {
  auto t = build(tokenizer_with(unigram_model(), {{"type", "WhitespaceSplit"}}));
  // "ab": "a"+"b" = -2 ties "ab" = -2; the node found first (the longer one, from position 0) wins.
  EXPECT_EQ(t->encode("ab"), (Ids{3}));
  // "abc": "ab"+"c" = -3 beats "abc" = -4.5 and "a"+"b"+"c" = -3 (tie, "ab" first again).
  EXPECT_EQ(t->encode("abc"), (Ids{3, 5}));
  // "abcd": "ab"+"cd" = -3.5 beats "ab"+"c"+"d" = -4.
  EXPECT_EQ(t->encode("abcd"), (Ids{3, 6}));
}

TEST(Unigram, UnknownCharactersAreOneFusedUnkAcrossWords) {
  auto t = build(tokenizer_with(unigram_model(), {{"type", "WhitespaceSplit"}}));
  EXPECT_EQ(t->encode("axxb"), (Ids{1, 0, 2}));
  EXPECT_EQ(t->encode("x y"), (Ids{0}));  // two words, one unk: fused over the section
  EXPECT_EQ(t->encode("xay"), (Ids{0, 1, 0}));
}

TEST(Unigram, ByteFallbackIsIgnoredLikeTransformersJs) {
  json m = unigram_model();
  m["byte_fallback"] = true;
  m["vocab"].push_back({"<0x78>", 0.0});  // "x"'s byte token: transformers.js still gives unk
  auto t = build(tokenizer_with(m));
  EXPECT_EQ(t->encode("axb"), (Ids{1, 0, 2}));
}

TEST(WordLevel, WholeWordsOrUnk) {
  json m = {{"type", "WordLevel"}, {"vocab", {{"<unk>", 0}, {"hello", 1}, {"world", 2}}}, {"unk_token", "<unk>"}};
  auto t = build(tokenizer_with(m, {{"type", "WhitespaceSplit"}}));
  EXPECT_EQ(t->encode("hello zz world"), (Ids{1, 0, 2}));
}

TEST(ModelType, InferredWhenAbsent) {
  // A list vocabulary is Unigram; continuing_subword_prefix + unk_token without merges WordPiece.
  json uni = unigram_model();
  uni.erase("type");
  EXPECT_EQ(build(tokenizer_with(uni))->encode("abcd"), (Ids{3, 6}));
  json wp = wordpiece_model();
  wp.erase("type");
  EXPECT_EQ(build(tokenizer_with(wp))->encode("unaff"), (Ids{1, 2}));
}

json bert_tokenizer() {
  json j = tokenizer_with({{"type", "WordPiece"},
                           {"unk_token", "[UNK]"},
                           {"continuing_subword_prefix", "##"},
                           {"vocab", {{"[UNK]", 0}, {"[CLS]", 1}, {"[SEP]", 2}, {"a", 3}, {"\u4e1c", 4}, {"b", 5}, {"hello", 6}, {"!", 7}}}},
                          {{"type", "BertPreTokenizer"}});
  j["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}, {"strip_accents", nullptr}, {"lowercase", true}};
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 2}}, {"cls", {"[CLS]", 1}}};
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  j["added_tokens"] = {testing::added_token(1, "[CLS]", true), testing::added_token(2, "[SEP]", true)};
  return j;
}

TEST(Bert, ChineseCharactersAreSpacedAccentsStrippedClsAndSepAdded) {
  auto t = build(bert_tokenizer());
  // "a东b" -> "a 东 b" (handle_chinese_chars) -> three words.
  EXPECT_EQ(t->encode("a\u4e1cb"), (Ids{1, 3, 4, 5, 2}));
  EXPECT_EQ(t->decode(Ids{1, 3, 4, 5, 2}), "[CLS] a \u4e1c b [SEP]");
  EXPECT_EQ(t->decode(Ids{1, 3, 4, 5, 2}, true), "a \u4e1c b");
  // Lowercased, and accents stripped because strip_accents is null (follows lowercase).
  EXPECT_EQ(t->encode("H\u00c9LLO!"), (Ids{1, 6, 7, 2}));
  EXPECT_EQ(t->decode(Ids{1, 6, 7, 2}, true), "hello!");  // the decoder's cleanup joins "!"
  // clean_text drops U+0000: "A\0B" is the one word "ab".
  EXPECT_EQ(t->encode(std::string("A\0B", 3)), (Ids{1, 0, 2}));
  EXPECT_EQ(t->encode("hello", false), (Ids{6}));
}

std::string normalize(const json& config, const std::string& text) {
  Expected<std::unique_ptr<Normalizer>> n = make_normalizer(config);
  EXPECT_TRUE(n.has_value()) << n.status().to_string();
  return n ? (*n)->normalize(text) : std::string();
}

TEST(Normalizers, BertNormalizerLikeTransformersJs) {
  const json uncased = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}, {"strip_accents", nullptr}, {"lowercase", true}};
  // U+0000 and U+200B (Cf) and U+000B (Cc) go, tab and U+3000 become spaces, CJK gets spaces,
  // lowercase (a sigma before a letter stays medial), accents stripped.
  EXPECT_EQ(normalize(uncased, std::string("H\u00e9llo") + '\0' + "\u200b\tW\u00d6RLD\u4e1c\u4eac\u3000\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3\vx"),
            "hello world \u4e1c  \u4eac  \u03c3\u03b9\u03c3\u03c5\u03c6\u03bf\u03c3x");
  const json keep_accents = {{"type", "BertNormalizer"}, {"clean_text", false}, {"handle_chinese_chars", false}, {"strip_accents", false}, {"lowercase", true}};
  EXPECT_EQ(normalize(keep_accents, "H\u00e9llo \u039f\u0394\u039f\u03a3"), "h\u00e9llo \u03bf\u03b4\u03bf\u03c2");  // final sigma
}

TEST(Normalizers, StripAccentsLowercasePrecompiled) {
  // StripAccents removes marks without decomposing first.
  EXPECT_EQ(normalize({{"type", "StripAccents"}}, "e\u0301 \u00e9"), "e \u00e9");
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "\u03a3\u0391\u03a3 \u03a3 A\u03a3. \u039f\u0394\u039f\u03a3'\u03a3 \u0130"),
            "\u03c3\u03b1\u03c2 \u03c3 a\u03c2. \u03bf\u03b4\u03bf\u03c3'\u03c2 i\u0307");
  // transformers.js's Precompiled: control characters dropped, U+2581 / NBSP to spaces, NFKC,
  // but the fullwidth tilde kept.
  EXPECT_EQ(normalize({{"type", "Precompiled"}, {"precompiled_charsmap", ""}},
                      "\uff46\uff55\uff4c\uff4c\uff5e\u2460\u2581x\u0001\u00a0y\ufb01"),
            "full\uff5e1 x yfi");
}

TEST(Normalizers, NmtDropsControlsAndSpacesSeparatorsLikeTheRustLibrary) {
  // Dropped: U+0001-0008, U+000B, U+000E-001F, U+007F, U+008F, U+009F. To a space: tab, LF, FF, CR,
  // U+1680, U+200B-200F, U+2028/9, U+2581, U+FEFF, U+FFFD. NBSP, U+3000 and fullwidth letters stay
  // (no NFKC here).
  EXPECT_EQ(normalize({{"type", "Nmt"}},
                      "a\u0001\u0008\v\u000e\u001f\u007f\u008f\u009fb\t\n\f\r\u1680\u200b\u200f"
                      "\u2028\u2029\u2581\ufeff\ufffdc\u00a0\u3000\uff41\u0085\u200a"),
            "ab            c\u00a0\u3000\uff41\u0085\u200a");
  EXPECT_EQ(normalize({{"type", "Nmt"}}, ""), "");
}

TEST(Normalizers, ConfigSwitchesRemoveSpaceAndLowercaseAndRemoveAccent) {
  // remove_space: JavaScript's trim, then each run of its whitespace (U+3000, U+FEFF; not U+0085) one space.
  EXPECT_EQ(js_remove_space(" \t a  b\u3000\ufeff c\u0085d \n"), "a b c\u0085d");
  EXPECT_EQ(js_remove_space(" \u3000 "), "");
  // toLowerCase, then every mark removed (no NFD: a precomposed letter keeps its accent).
  EXPECT_EQ(js_lowercase_and_remove_accent("\u00c9COLE E\u0301t\u00e9 \u03a3\u039f\u03a3"),
            "\u00e9cole et\u00e9 \u03c3\u03bf\u03c2");
}

std::string decode_with(const json& decoder, const Ids& ids) {
  json vocab = {{"<pad>", 0}, {"|", 1}, {"h", 2}, {"e", 3}, {"l", 4}, {"o", 5}, {"w", 6}, {"hel", 7},
                {"##lo", 8}, {"lo</w>", 9}, {"wor", 10}, {"ld</w>", 11}, {"!", 12}, {"world", 13}};
  json j = tokenizer_with({{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<pad>"}});
  j["decoder"] = decoder;
  return build(j)->decode(ids);
}

TEST(Decoders, WordPieceCtcAndBpeDecoder) {
  EXPECT_EQ(decode_with({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}, Ids{7, 8, 13, 12}), "hello world!");
  // CTC: repeats collapse, <pad> (the blank) separates real repeats, "|" is the word delimiter.
  EXPECT_EQ(decode_with({{"type", "CTC"}, {"pad_token", "<pad>"}, {"word_delimiter_token", "|"}, {"cleanup", true}},
                        Ids{0, 2, 2, 3, 0, 4, 4, 0, 4, 5, 1, 6, 1}),
            "hello w");
  EXPECT_EQ(decode_with({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, Ids{7, 9, 10, 11}), "hello world");
  EXPECT_EQ(decode_with({{"type", "BPEDecoder"}, {"suffix", "</w>"}}, Ids{7, 9, 10}), "hello wor");
}

// Malformed model sections are errors naming the field, never crashes.
void expect_error(const json& model, const std::string& needle) {
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(tokenizer_with(model));
  ASSERT_FALSE(t.has_value()) << model.dump();
  EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().to_string();
}

TEST(Models, MalformedModelsAreRefusedNamingTheField) {
  expect_error({{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "[UNK]"}}, "model.unk_token");
  expect_error({{"type", "WordPiece"}, {"vocab", {{"a", "zero"}}}, {"unk_token", "a"}}, "model.vocab");
  expect_error({{"type", "WordPiece"}, {"vocab", json::array()}, {"unk_token", "a"}}, "model.vocab");
  expect_error({{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}, "model.unk_token");
  expect_error({{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "a"}, {"max_input_chars_per_word", "x"}},
               "model.max_input_chars_per_word");
  expect_error({{"type", "Unigram"}, {"vocab", {{"a", -1}}}}, "model.vocab");  // an object, not a list
  expect_error({{"type", "Unigram"}, {"vocab", json::parse(R"([["a", "high"]])")}}, "model.vocab[0]");
  expect_error({{"type", "Unigram"}, {"vocab", json::parse(R"([["a", -1], ["b"]])")}}, "model.vocab[1]");
  expect_error({{"type", "Unigram"}, {"vocab", json::parse(R"([["a", -1]])")}, {"unk_id", 5}}, "model.unk_id");
  expect_error({{"type", "Unigram"}, {"vocab", json::parse(R"([["a", -1]])")}, {"unk_id", "a"}}, "model.unk_id");
  expect_error({{"type", "WordLevel"}, {"vocab", {{"a", -3}}}}, "model.vocab");
  expect_error({{"type", 7}, {"vocab", {{"a", 0}}}}, "model.type");
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(tokenizer_with({{"type", "Trigram"}, {"vocab", {{"a", 0}}}}));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("Trigram"), std::string::npos);
}

TEST(Components, UnknownOrMalformedComponentsAreRefused) {
  json j = tokenizer_with(unigram_model());
  j["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", "yes"}};
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(j);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("lowercase"), std::string::npos);
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", 5}};
  EXPECT_FALSE(Tokenizer::from_json(j));
  j["normalizer"] = nullptr;
  j["decoder"] = {{"type", "Telepathy"}};
  t = Tokenizer::from_json(j);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("Telepathy"), std::string::npos);
  j["decoder"] = nullptr;
  j["post_processor"] = {{"type", "BertProcessing"}, {"sep", "x"}};
  EXPECT_FALSE(Tokenizer::from_json(j));
}

}  // namespace
}  // namespace tf::text
