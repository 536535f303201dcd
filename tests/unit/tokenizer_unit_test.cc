// Tokenizer pieces on small synthetic tokenizers: UTF-8 handling, NFC, BPE merging rules, added
// token flags, post-processing, decoders, config files, and a robustness run on random bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "text/tokenizer.h"
#include "text/tokenizer_config.h"
#include "text/unicode.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;
using testing::added_token;
using testing::build;
using testing::byte_level_tokenizer;

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(sanitize_utf8("abc"), "abc");
  EXPECT_EQ(sanitize_utf8("a\xF0\x9F\x98"), "a" + kFffd);             // truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), kFffd + kFffd + kFffd);     // overlong: E0 needs A0..BF
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);     // surrogate
  EXPECT_EQ(sanitize_utf8("\xFF" "a\xC3\xA9"), kFffd + "a\xC3\xA9");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Utf8, StablePrefixHoldsBackOnlyCompletableTails) {
  EXPECT_EQ(utf8_stable_prefix("ab\xE4\xBD"), 2u);
  EXPECT_EQ(utf8_stable_prefix("ab\xE4\xBD\xA0"), 5u);
  EXPECT_EQ(utf8_stable_prefix("ab\xFF"), 3u);          // can never become valid
  EXPECT_EQ(utf8_stable_prefix("\xE4\xE4\xBD"), 1u);    // first E4 is already a lost cause
  EXPECT_EQ(utf8_stable_prefix("\xF0\x9F\x98"), 0u);
}

TEST(Unicode, NfcComposesAndReorders) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("a\u0323\u0302"), "\u1ead");  // ậ: dot below (220) sorts before circumflex (230)
  EXPECT_EQ(nfc("a\u0302\u0323"), "\u1ead");
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");  // Hangul jamo -> syllable
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // Angstrom sign: singleton decomposition
  EXPECT_EQ(nfc("\u0915\u093c"), "\u0915\u093c");   // composition exclusion (U+0958 is not recomposed)
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");
  EXPECT_EQ(nfd("\u00e9"), "e\u0301");
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(to_lower("ÀBC \u0130x"), "àbc i\u0307x");
}

// Expected strings from Python's unicodedata.normalize (the tables' source).
TEST(Unicode, NfkcAndNfkdApplyCompatibilityMappings) {
  EXPECT_EQ(nfkc("\ufb01"), "fi");                      // ligature
  EXPECT_EQ(nfkc("\u2460 x\u00b2"), "1 x2");            // circled digit, superscript
  EXPECT_EQ(nfkc("\u3231"), "(\u682a)");                // parenthesized ideograph: several code points
  EXPECT_EQ(nfkc("\uff76\uff9e"), "\u30ac");             // half-width kana + voiced mark compose
  EXPECT_EQ(nfkd("\uff76\uff9e"), "\u30ab\u3099");
  EXPECT_EQ(nfkc("\u1e9b\u0323"), "\u1e69");             // compat mapping of a decomposed letter, reordered
  EXPECT_EQ(nfkd("\u1e9b\u0323"), "s\u0323\u0307");
  EXPECT_EQ(nfkc("\ufdfa"), "\u0635\u0644\u0649 \u0627\u0644\u0644\u0647 \u0639\u0644\u064a\u0647 \u0648\u0633\u0644\u0645");
  EXPECT_EQ(nfc("\ufb01"), "\ufb01");                   // NFC keeps compatibility characters
  EXPECT_EQ(nfkc("plain ascii"), "plain ascii");
}

TEST(Bpe, MergesInStringAndPairFormGiveTheSameIds) {
  json pair_form = byte_level_tokenizer({{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  json string_form = pair_form;
  json merges = json::array();
  for (const json& m : pair_form["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  string_form["model"]["merges"] = merges;
  auto a = build(pair_form), b = build(string_form);
  for (const char* s : {"abc", "bc", "abcabc", "cab"}) EXPECT_EQ(a->encode(s), b->encode(s)) << s;
}

TEST(Bpe, LowestRankMergesFirstAndTiesGoLeft) {
  // "abc": (b,c) has rank 0, so b+c merges before a+b could.
  auto t = build(byte_level_tokenizer({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(t->encode("abc"), (Ids{'a', 256}));
  // "aaa" with only (a,a): the leftmost pair merges first.
  auto u = build(byte_level_tokenizer({{"a", "a"}}));
  EXPECT_EQ(u->encode("aaa"), (Ids{256, 'a'}));
}

TEST(Bpe, IgnoreMergesUsesWholeWordsFromTheVocabulary) {
  json j = byte_level_tokenizer({{"a", "b"}});
  j["model"]["vocab"]["abc"] = 300;  // reachable only as a whole word
  EXPECT_EQ(build(j)->encode("abc"), (Ids{256, 'c'}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(build(j)->encode("abc"), (Ids{300}));
}

json spm_tokenizer() {
  // A Llama-2-style SentencePiece BPE: Metaspace-like normalizer, byte fallback, unk.
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"h", 4}, {"i", 5}, {"\u2581h", 6}, {"\u2581hi", 7}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 8 + b;
  }
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"\u2581 h", "\u2581h i"}}, {"unk_token", "<unk>"},
                {"byte_fallback", true}, {"fuse_unk", true}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  j["added_tokens"] = {added_token(0, "<unk>", true), added_token(1, "<s>", true), added_token(2, "</s>", true)};
  return j;
}

TEST(Bpe, ByteFallbackTemplateAndSentencePieceDecoders) {
  auto t = build(spm_tokenizer());
  // "hi" -> "▁hi"; "é" has no token: its two UTF-8 bytes become <0xC3><0xA9>.
  EXPECT_EQ(t->encode("hi", true), (Ids{1, 7}));
  EXPECT_EQ(t->encode("hi", false), (Ids{7}));
  EXPECT_EQ(t->encode("hi é", false), (Ids{7, 3, 8 + 0xC3, 8 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("hi é", true), true), "hi é");
  EXPECT_EQ(t->decode(Ids{1, 7}, false), "<s> hi");  // Strip removes one leading space only
  // An invalid byte run decodes to one U+FFFD per byte token (Rust ByteFallback).
  EXPECT_EQ(t->decode(Ids{7, 8 + 0xC3}, false), "hi" + kFffd);
  // Unknown ids are dropped rather than crashing.
  EXPECT_EQ(t->decode(Ids{7, 99999, -5}, false), "hi");
}

TEST(Decoders, MetaspaceRestoresSpacesAndDropsThePrefix) {
  // The first token loses one leading space unless nothing was prepended: prepend_scheme "never",
  // or the legacy add_prefix_space false (the Rust library's reading of the two keys).
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", {{"\u2581Hey", 0}, {"\u2581friend", 1}, {"!", 2}, {"\u2581\u2581", 3}}}, {"merges", json::array()}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}, {"prepend_scheme", "always"}};
  auto t = build(j);
  EXPECT_EQ(t->decode(Ids{0, 1, 2}), "Hey friend!");
  EXPECT_EQ(t->decode(Ids{3, 0}), "  Hey");  // "▁▁" first: one space dropped, one kept
  j["decoder"]["add_prefix_space"] = false;
  EXPECT_EQ(build(j)->decode(Ids{0, 1, 2}), " Hey friend!");
  j["decoder"].erase("add_prefix_space");  // prepend_scheme "always" alone, as current files write it
  EXPECT_EQ(build(j)->decode(Ids{0, 1, 2}), "Hey friend!");
  j["decoder"]["prepend_scheme"] = "never";
  EXPECT_EQ(build(j)->decode(Ids{0, 1, 2}), " Hey friend!");
}

TEST(Bpe, UnknownCharactersFuseIntoOneUnk) {
  json j = spm_tokenizer();
  j["model"]["byte_fallback"] = false;
  auto t = build(j);
  EXPECT_EQ(t->encode("hiéé", false), (Ids{7, 0}));
}

TEST(AddedTokens, SpecialTokensAreSplitBeforeTheModel) {
  json j = byte_level_tokenizer();
  j["added_tokens"] = {added_token(300, "<|im_start|>", true), added_token(301, "<|im_end|>", true),
                       added_token(302, "<|im", false)};
  auto t = build(j);
  const Ids ids = t->encode("<|im_start|>hi<|im_end|>", false);
  EXPECT_EQ(ids, (Ids{300, 'h', 'i', 301}));
  // Leftmost-longest: "<|im" is a token, but "<|im_end|>" is longer at the same place.
  EXPECT_EQ(t->encode("<|im_x", false), (Ids{302, '_', 'x'}));
  EXPECT_EQ(t->decode(ids, false), "<|im_start|>hi<|im_end|>");
  EXPECT_EQ(t->decode(ids, true), "hi");
  EXPECT_EQ(t->token_to_id("<|im_end|>"), 301);
  EXPECT_EQ(t->id_to_token(300), "<|im_start|>");
  EXPECT_EQ(t->vocab_size(), 303u);
  EXPECT_TRUE(t->is_special(300));
  EXPECT_FALSE(t->is_special(302));
}

TEST(AddedTokens, LstripAndRstripSwallowWhitespace) {
  json j = byte_level_tokenizer();
  j["added_tokens"] = {added_token(300, "<mask>", true, /*lstrip=*/true, /*rstrip=*/false),
                       added_token(301, "<sep>", true, false, /*rstrip=*/true)};
  auto t = build(j);
  // Byte-level ids of this tokenizer are the byte values.
  EXPECT_EQ(t->encode("a  <mask> b", false), (Ids{'a', 300, ' ', 'b'}));
  EXPECT_EQ(t->encode("a <sep> \n b", false), (Ids{'a', ' ', 301, 'b'}));
}

TEST(AddedTokens, SingleWordOnlyMatchesOutsideWords) {
  json j = byte_level_tokenizer();
  j["added_tokens"] = {added_token(300, "ing", false, false, false, false, /*single_word=*/true)};
  auto t = build(j);
  EXPECT_EQ(t->encode("ing", false), (Ids{300}));
  EXPECT_EQ(t->encode("a ing.", false).at(2), 300);
  const Ids inside = t->encode("sing", false);
  EXPECT_EQ(std::count(inside.begin(), inside.end(), 300), 0);
}

TEST(AddedTokens, NormalizedTokensMatchTheNormalizedText) {
  json j = byte_level_tokenizer();
  j["normalizer"] = {{"type", "Lowercase"}};
  j["added_tokens"] = {added_token(300, "hello", false, false, false, /*normalized=*/true),
                       added_token(301, "WORLD", true, false, false, /*normalized=*/false)};
  auto t = build(j);
  EXPECT_EQ(t->encode("HeLLo", false), (Ids{300}));
  EXPECT_EQ(t->encode("WORLD", false), (Ids{301}));  // raw match, before lowercasing
  EXPECT_NE(t->encode("world", false), (Ids{301}));
}

// added_tokens_decoder entries tokenizer.json lacks are added, but not over a vocab word's id: a
// config declaring "  " at id 256 (the vocab's "  " merge here is 256 too, so use "ab" at 257)
// leaves the vocab's token there, as transformers.js and the Rust library read the files.
TEST(TokenizerConfig, AddedTokensDecoderAddsNewIdsButDoesNotShadowTheVocab) {
  const json j = byte_level_tokenizer({{" ", " "}, {"a", "b"}});  // "  " = 256, "ab" = 257
  Expected<TokenizerConfig> cfg = parse_tokenizer_config(json::parse(R"({"added_tokens_decoder": {
    "257": {"content": "  ", "special": false, "normalized": true},
    "300": {"content": "<extra>", "special": true}}})"));
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  auto t = build(j, *cfg);
  EXPECT_EQ(t->encode("ab  ", false), (Ids{257, 256}));
  EXPECT_EQ(t->encode("x<extra>", false), (Ids{'x', 300}));
  EXPECT_EQ(t->decode(Ids{257, 300}, true), "ab");
  EXPECT_EQ(t->vocab_size(), 301u);
}

TEST(TokenizerConfig, ReadsTokensTemplatesAndGenerationConfig) {
  const json c = json::parse(R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>", "pad_token": null, "clean_up_tokenization_spaces": true,
    "additional_special_tokens": ["<x>"], "tokenizer_class": "LlamaTokenizerFast", "legacy": false,
    "added_tokens_decoder": {"5": {"content": "<x>", "special": true}},
    "chat_template": [{"name": "default", "template": "{{ messages }}"}, {"name": "tool_use", "template": "T"}]
  })");
  Expected<TokenizerConfig> cfg = parse_tokenizer_config(c);
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  EXPECT_EQ(cfg->bos_token, "<s>");
  EXPECT_EQ(cfg->eos_token, "</s>");
  EXPECT_FALSE(cfg->pad_token.has_value());
  EXPECT_TRUE(cfg->clean_up_tokenization_spaces);
  EXPECT_EQ(cfg->added_tokens_decoder.at(5).content, "<x>");
  EXPECT_EQ(cfg->tokenizer_class, "LlamaTokenizer");  // "Fast" dropped, as transformers.js does
  EXPECT_EQ(cfg->legacy, false);
  EXPECT_EQ(cfg->chat_template, "{{ messages }}");
  EXPECT_EQ(cfg->named_chat_templates.at("tool_use"), "T");

  Expected<GenerationConfig> g1 = parse_generation_config(json::parse(R"({"eos_token_id": 7})"));
  ASSERT_TRUE(g1.has_value());
  EXPECT_EQ(g1->eos_token_ids, (Ids{7}));
  Expected<GenerationConfig> g2 = parse_generation_config(json::parse(R"({"eos_token_id": [154820, 154827, 154829], "pad_token_id": 154820})"));
  ASSERT_TRUE(g2.has_value());
  EXPECT_EQ(g2->eos_token_ids, (Ids{154820, 154827, 154829}));
  EXPECT_EQ(g2->pad_token_id, 154820);
  EXPECT_FALSE(parse_generation_config(json::parse(R"({"eos_token_id": "x"})")));
  EXPECT_FALSE(parse_generation_config(json::parse(R"({"eos_token_id": [1, "x"]})")));
}

TEST(TokenizerConfig, DirectoryWithChatTemplateFileAndGlmConfigs) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tf_tok_dir_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  json j = byte_level_tokenizer();
  j["added_tokens"] = {added_token(300, "<|endoftext|>", true), added_token(301, "<|user|>", true)};
  std::ofstream(dir / "tokenizer.json") << j.dump();
  // The real GLM-5.3 tokenizer_config.json and generation_config.json (shared/data/glm53).
  const fs::path glm = fs::path(TF_TEST_DATA_DIR) / ".." / ".." / ".." / "shared" / "data" / "glm53";
  const fs::path glm_tc = fs::exists(glm / "tokenizer_config.json") ? glm / "tokenizer_config.json" : fs::path();
  if (!glm_tc.empty()) {
    fs::copy_file(glm_tc, dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(glm / "generation_config.json", dir / "generation_config.json", fs::copy_options::overwrite_existing);
  } else {
    std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|endoftext|>", "clean_up_tokenization_spaces": false})";
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [154820, 154827, 154829]})";
  }
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}{{ m.content }}{% endfor %}";
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_directory(dir);
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  EXPECT_EQ((*t)->config().chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ((*t)->config().eos_token, "<|endoftext|>");
  EXPECT_EQ((*t)->eos_token_ids(), (Ids{154820, 154827, 154829}));
  EXPECT_FALSE((*t)->clean_up_tokenization_spaces());
  fs::remove_all(dir);
}

TEST(Tokenizer, BadFilesAreErrorsNamingTheProblem) {
  Expected<std::unique_ptr<Tokenizer>> missing = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
  EXPECT_FALSE(Tokenizer::from_json(json::parse(R"({"model": {"type": "BPE", "vocab": [1, 2]}})")));
  EXPECT_FALSE(Tokenizer::from_json(json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})")));
  Expected<std::unique_ptr<Tokenizer>> uni = Tokenizer::from_json(json::parse(R"({"model": {"type": "Unigram", "vocab": []}})"));
  ASSERT_FALSE(uni);
  EXPECT_NE(uni.status().message().find("model.vocab"), std::string::npos) << uni.status().to_string();
  Expected<std::unique_ptr<Tokenizer>> odd = Tokenizer::from_json(json::parse(R"({"model": {"type": "Hexagram", "vocab": {}}})"));
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(odd.status().message().find("Hexagram"), std::string::npos);
  json bad_norm = byte_level_tokenizer();
  bad_norm["normalizer"] = {{"type", "Precompiled"}};  // no precompiled_charsmap
  EXPECT_FALSE(Tokenizer::from_json(bad_norm));
  bad_norm["normalizer"] = {{"type", "Replace"}, {"pattern", 5}};
  EXPECT_FALSE(Tokenizer::from_json(bad_norm));
  json bad_added = byte_level_tokenizer();
  bad_added["added_tokens"] = {added_token(400, "<|x|>", true), 7};
  Expected<std::unique_ptr<Tokenizer>> added = Tokenizer::from_json(bad_added);
  ASSERT_FALSE(added);
  EXPECT_NE(added.status().message().find("added_tokens[1]: expected an object"), std::string::npos)
      << added.status().to_string();
}

TEST(Tokenizer, CleanUpTokenizationSpaces) {
  // Expected value produced by transformers.js's clean_up_tokenization (rules applied in order).
  EXPECT_EQ(clean_up_tokenization("a . b , c ! d ? I 'm we 've they 're it 's don n't ' x ' y"),
            "a. b, c! d? I'm we've they're it's donn't'x'y");
}

// A tokenizer_config.json without the key cleans up, as transformers.js reads it (an older BERT or
// GPT-2 config often lacks it); false in the file keeps the spaces.
TEST(Tokenizer, CleanUpIsOnWhenTheConfigDoesNotSayAndOffWhenItSaysFalse) {
  Expected<TokenizerConfig> silent = parse_tokenizer_config(json::parse(R"({"eos_token": "</s>"})"));
  ASSERT_TRUE(silent.has_value());
  EXPECT_TRUE(silent->clean_up_tokenization_spaces);
  Expected<TokenizerConfig> off =
      parse_tokenizer_config(json::parse(R"({"clean_up_tokenization_spaces": false})"));
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->clean_up_tokenization_spaces);

  const json j = byte_level_tokenizer();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() /
                       ("tf_cleanup_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  std::ofstream(dir / "tokenizer_config.json") << "{}";
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_directory(dir);
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  EXPECT_EQ((*t)->decode((*t)->encode("Hello , world . it 's", false)), "Hello, world. it's");
  std::ofstream(dir / "tokenizer_config.json") << R"({"clean_up_tokenization_spaces": false})";
  t = Tokenizer::from_directory(dir);
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  EXPECT_EQ((*t)->decode((*t)->encode("Hello , world . it 's", false)), "Hello , world . it 's");
  fs::remove_all(dir);
}

// Robustness: random bytes (mostly invalid UTF-8) never crash, and encode/decode round-trips the
// sanitized text, on a byte-level tokenizer with the GLM regex and some special tokens.
TEST(Tokenizer, RandomBytesDoNotCrashAndRoundTripSanitized) {
  json j = byte_level_tokenizer({{"a", "b"}, {" ", "t"}, {"\xE4", "\xB8"}});
  j["added_tokens"] = {added_token(400, "<|x|>", true), added_token(401, "<", false, true, true)};
  j["normalizer"] = {{"type", "NFC"}};
  TokenizerConfig verbatim;  // a round trip: no clean-up of spaces before punctuation
  verbatim.clean_up_tokenization_spaces = false;
  auto t = build(j, verbatim);
  std::mt19937 rng(12345);
  const std::string alphabet = "ab t<|x>\n\xE4\xB8\xAD\xC3\xA9\xF0\x9F\x98\x80\xFF\xFE\xCC\x81";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const size_t n = rng() % 64;
    for (size_t i = 0; i < n; ++i) {
      s.push_back(rng() % 3 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()]);
    }
    const Ids ids = t->encode(s, true);
    for (TokenId id : ids) ASSERT_TRUE(t->id_to_token(id).has_value());
    const std::string out = t->decode(ids, false);
    ASSERT_TRUE(is_valid_utf8(out));
    if (s.find('<') == std::string::npos) {
      // lstrip/rstrip of "<" drop whitespace, and NFC may recompose: compare modulo those.
      EXPECT_EQ(out, nfc(sanitize_utf8(s))) << iter;
    }
    // Random ids, including out-of-range ones, decode without crashing.
    Ids random_ids;
    for (int k = 0; k < 16; ++k) random_ids.push_back(static_cast<TokenId>(rng() % 600) - 50);
    ASSERT_TRUE(is_valid_utf8(t->decode(random_ids, rng() % 2 == 0)));
  }
}

}  // namespace
}  // namespace tf::text
