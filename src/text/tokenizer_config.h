// The files beside tokenizer.json that a server needs: tokenizer_config.json (BOS/EOS/PAD/UNK
// tokens, added_tokens_decoder, clean_up_tokenization_spaces, the chat template, or
// chat_template.jinja next to it) and generation_config.json (eos_token_id as an int or a list).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/added_tokens.h"

namespace tf::text {

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::vector<std::string> additional_special_tokens;
  std::map<TokenId, AddedToken> added_tokens_decoder;
  // transformers' decode() option: removes spaces before punctuation (" ." -> ".").
  // Absent from the config it is on, as transformers.js (our tokenizer reference) and
  // transformers' BERT-family classes read it; transformers' base class would say off.
  bool clean_up_tokenization_spaces = true;
  std::optional<bool> add_bos_token, add_eos_token;
  // The class transformers.js picks the tokenizer's behaviour by ("Fast" dropped), and the
  // LlamaTokenizer's legacy flag (absent: legacy, as transformers.js reads it).
  std::optional<std::string> tokenizer_class;
  std::optional<bool> legacy;
  // transformers.js's per-section switches (ALBERT / XLNet set remove_space, XLM the other).
  bool remove_space = false;
  bool do_lowercase_and_remove_accent = false;
  // The default chat template (a "default" entry when the config holds a named list).
  std::optional<std::string> chat_template;
  std::map<std::string, std::string> named_chat_templates;
};

struct GenerationConfig {
  std::vector<TokenId> eos_token_ids;
  std::optional<TokenId> bos_token_id, pad_token_id;
};

Expected<TokenizerConfig> parse_tokenizer_config(const nlohmann::json& j);
// Reads `path`; a chat_template.jinja in the same folder replaces the config's template.
Expected<TokenizerConfig> load_tokenizer_config(const std::filesystem::path& path);

Expected<GenerationConfig> parse_generation_config(const nlohmann::json& j);
Expected<GenerationConfig> load_generation_config(const std::filesystem::path& path);

// Reads a whole file (errors name the path).
Expected<std::string> read_text_file(const std::filesystem::path& path);
// Reads and parses a JSON file (errors name the path and the parse position).
Expected<nlohmann::json> read_json_file(const std::filesystem::path& path);

}  // namespace tf::text
