// The WordPiece model of a Hugging Face tokenizer.json (BERT and its family): each word is cut
// greedily into the longest vocabulary entries from the left, pieces after the first carrying
// continuing_subword_prefix ("##"); a word with a part that matches nothing, or longer than
// max_input_chars_per_word code points (default 100), becomes the single unk token.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/model.h"

namespace tf::text {

class WordPieceModel final : public Model {
 public:
  // Reads a tokenizer.json "model" object of type "WordPiece": "vocab" (token -> id), "unk_token"
  // (required, must be in the vocabulary), "continuing_subword_prefix" (default "##") and
  // "max_input_chars_per_word" (default 100).
  static Expected<std::unique_ptr<WordPieceModel>> from_json(const nlohmann::json& model);

  void encode_word(std::string_view word, std::vector<TokenId>& out) const override;
  std::optional<TokenId> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(TokenId id) const override;
  size_t vocab_size() const override { return id_to_token_.size(); }
  std::optional<TokenId> unk_id() const override { return unk_; }
  bool fuse_unk() const override { return fuse_unk_; }

 private:
  WordPieceModel() = default;
  std::unordered_map<std::string, TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  TokenId unk_ = 0;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
  size_t max_token_bytes_ = 0;  // the longest vocabulary entry, to skip hopeless lookups
  bool fuse_unk_ = false;
};

// Reads a {token: id} vocabulary object into `vocab` / `id_to_token` / `has_token` (shared by
// the models whose vocabulary is an object). The error names `field`.
Status read_vocab_object(const nlohmann::json& vocab, const std::string& field,
                         std::unordered_map<std::string, TokenId>& map, std::vector<std::string>& id_to_token,
                         std::vector<bool>& has_token);

}  // namespace tf::text
