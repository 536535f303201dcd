// The model of a Hugging Face tokenizer.json ("model" field): the part that turns one
// pre-tokenized word into token ids. BPE (bpe.h), WordPiece (wordpiece.h), Unigram (unigram.h) and
// WordLevel (wordlevel.h) implement this interface; make_model() picks one by "model.type".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tf::text {

using TokenId = int32_t;

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void encode_word(std::string_view word, std::vector<TokenId>& out) const = 0;
  virtual std::optional<TokenId> token_to_id(std::string_view token) const = 0;
  // Null for ids outside the vocabulary.
  virtual const std::string* id_to_token(TokenId id) const = 0;
  // One past the largest id of the vocabulary.
  virtual size_t vocab_size() const = 0;
  // The unknown token's id, when the model has one.
  virtual std::optional<TokenId> unk_id() const { return std::nullopt; }
  // True when consecutive unknown tokens of one text section fuse into one (transformers.js fuses
  // across the words of a section, after the model ran on each).
  virtual bool fuse_unk() const { return false; }
  // BPE's end_of_word_suffix (e.g. CLIP's "</w>"): transformers.js replaces it by a space when
  // decoding. Empty when none.
  virtual const std::string& end_of_word_suffix() const {
    static const std::string kEmpty;
    return kEmpty;
  }
};

// Builds the model described by a tokenizer.json "model" object. `unk_token` is
// tokenizer_config.json's unk_token (a WordLevel vocabulary falls back to it, as transformers.js
// does). The type is "model.type"; when absent it is inferred the way transformers.js does: a list
// vocabulary is Unigram, an object with "merges" BPE, with "continuing_subword_prefix" and
// "unk_token" but no merges WordPiece, anything else BPE (Hugging Face's default).
// An unknown type is an Unimplemented error naming it.
Expected<std::unique_ptr<Model>> make_model(const nlohmann::json& model,
                                            const std::optional<std::string>& unk_token = std::nullopt);

}  // namespace tf::text
