// Small synthetic tokenizer.json documents for the tokenizer unit tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace tf::text::testing {

// Ids as "[1,2,3]", for failure messages.
inline std::string show_ids(const std::vector<TokenId>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// The GLM-5.3 pre-tokenizer regex (shared/spec/glm53-checkpoint-facts.md §2.3).
inline const char* kGlmPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A byte-level BPE whose vocabulary is the 256 byte characters (ids 0..255, in byte order) plus
// the merged tokens of `merges` (given as pairs of byte strings), numbered from 256.
inline nlohmann::json byte_level_tokenizer(
    const std::vector<std::pair<std::string, std::string>>& merges = {},
    const std::string& pattern = kGlmPattern) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  nlohmann::json m = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    const std::string ea = byte_level_encode(a), eb = byte_level_encode(b);
    if (!vocab.contains(ea + eb)) vocab[ea + eb] = next++;
    m.push_back(nlohmann::json::array({ea, eb}));
  }
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"ignore_merges", false}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = nlohmann::json::array();
  return j;
}

inline nlohmann::json added_token(int id, const std::string& content, bool special, bool lstrip = false,
                                  bool rstrip = false, bool normalized = false, bool single_word = false) {
  return {{"id", id},         {"content", content},       {"special", special},        {"lstrip", lstrip},
          {"rstrip", rstrip}, {"normalized", normalized}, {"single_word", single_word}};
}

inline std::unique_ptr<Tokenizer> build(const nlohmann::json& j, TokenizerConfig config = {}) {
  Expected<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(j, std::move(config));
  if (!t) throw std::runtime_error(t.status().to_string());
  return std::move(t).value();
}

// A tokenizer.json of `model` (and `pre_tokenizer`) alone: no normalizer, post-processor, decoder or added
// tokens.
inline nlohmann::json tokenizer_with(nlohmann::json model, nlohmann::json pre_tokenizer = nullptr) {
  nlohmann::json j;
  j["model"] = std::move(model);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = std::move(pre_tokenizer);
  j["post_processor"] = nullptr;
  j["decoder"] = nullptr;
  j["added_tokens"] = nlohmann::json::array();
  return j;
}

}  // namespace tf::text::testing
