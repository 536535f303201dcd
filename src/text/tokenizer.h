// Tokenizer: a Hugging Face tokenizer.json (BPE, WordPiece, Unigram or WordLevel model, normalizer,
// pre-tokenizer, added tokens, post-processor, decoder) plus tokenizer_config.json / generation_config.json
// when present.
//
// Encoding: added tokens are cut out of the raw text first (leftmost-longest); each remaining
// segment is normalized, cut again on "normalized" added tokens, pre-tokenized into words, and
// each word is encoded by the model; the post-processor then adds BOS/EOS when asked to. These
// steps stream: each word reaches the model as soon as it is cut and is dropped after, so encode
// holds the input, one normalized segment, the word in hand and the ids, however long the text.
// Decoding: ids -> token strings (added tokens override the model vocabulary) -> decoder chain ->
// optional clean-up of tokenization spaces. Invalid UTF-8 input is replaced (U+FFFD per maximal
// subpart) before anything else, so encode never fails on user text.
// A Tokenizer is immutable after loading and safe to use from many threads.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/added_tokens.h"
#include "text/model.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer_config.h"

namespace tf::text {

class Tokenizer {
 public:
  // Builds from a parsed tokenizer.json and an optional tokenizer_config.
  static Expected<std::unique_ptr<Tokenizer>> from_json(const nlohmann::json& tokenizer_json,
                                                        TokenizerConfig config = {},
                                                        GenerationConfig generation = {});
  // Reads tokenizer.json at `path` (no config files).
  static Expected<std::unique_ptr<Tokenizer>> from_file(const std::filesystem::path& path);
  // Reads tokenizer.json from `dir`, plus tokenizer_config.json, chat_template.jinja and
  // generation_config.json when they exist.
  static Expected<std::unique_ptr<Tokenizer>> from_directory(const std::filesystem::path& dir);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // The bytes a token stands for, before any UTF-8 repair: a byte-level token that is
  // part of a multi-byte character gives that byte, not U+FFFD (the `bytes` of an
  // OpenAI logprob). Unknown ids give an empty string.
  std::string token_bytes(TokenId id) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(TokenId id) const;
  // One past the largest id known to the model or the added tokens.
  size_t vocab_size() const { return vocab_size_; }

  // The added token with this id, or null.
  const AddedToken* added_token(TokenId id) const;
  bool is_special(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  const TokenizerConfig& config() const { return config_; }
  const GenerationConfig& generation_config() const { return generation_; }
  std::optional<TokenId> bos_token_id() const;
  // generation_config's eos_token_id list when present, else tokenizer_config's eos_token.
  std::vector<TokenId> eos_token_ids() const;

  // Pieces used by IncrementalDetokenizer.
  bool decoder_is_byte_level() const { return decoder_ && decoder_->is_byte_level(); }
  bool clean_up_tokenization_spaces() const { return config_.clean_up_tokenization_spaces; }
  // The decoder output before clean-up.
  std::string decode_raw(std::span<const TokenId> ids, bool skip_special_tokens) const;

 private:
  Tokenizer() = default;
  Status init(const nlohmann::json& j);
  void encode_segment(std::string_view text, bool first_section, std::vector<TokenId>& out) const;
  void encode_sections(std::string_view input, std::vector<TokenId>& ids) const;
  // transformers.js's LlamaTokenizer with legacy false (SentencePiece's non-legacy prefix): the
  // text gets one leading "▁" (its own "▁" become spaces), only the first section a Metaspace
  // prefix, and a lone "▁" before a special token is dropped.
  bool spm_non_legacy() const {
    return config_.tokenizer_class == "LlamaTokenizer" && config_.legacy.has_value() && !*config_.legacy;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<TokenId, size_t> added_by_id_;
  std::unordered_map<std::string, TokenId> added_by_content_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  TokenizerConfig config_;
  GenerationConfig generation_;
  size_t vocab_size_ = 0;
};

// transformers' clean_up_tokenization: " ." -> ".", " ?" -> "?", " !" -> "!", " ," -> ",",
// " ' " -> "'", " n't" -> "n't", " 'm" -> "'m", " 's" -> "'s", " 've" -> "'ve", " 're" -> "'re",
// applied in that order, each to the whole string.
std::string clean_up_tokenization(std::string_view text);

}  // namespace tf::text
