// The Unigram model of a Hugging Face tokenizer.json (SentencePiece unigram: T5, ALBERT, XLM-R,
// ...): "vocab" is a list of [piece, log-probability] pairs whose index is the id, and each word is
// cut by Viterbi into the pieces whose scores add up highest. Like transformers.js (the
// reference): a position that no single-character piece covers gets an unk node of one character
// scored min(score) - 10 (the unk piece itself is rescored so too), ties go to the candidate
// found first (the one starting earliest), consecutive unks fuse into one (always on for Unigram),
// and byte_fallback is read but not applied (transformers.js ignores it: unknown characters
// become unk, not <0xNN> tokens).
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

class UnigramModel final : public Model {
 public:
  // Reads a tokenizer.json "model" object of type "Unigram": "vocab" ([[piece, score], ...]),
  // "unk_id" (null or an index into vocab), "byte_fallback".
  static Expected<std::unique_ptr<UnigramModel>> from_json(const nlohmann::json& model);

  void encode_word(std::string_view word, std::vector<TokenId>& out) const override;
  std::optional<TokenId> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(TokenId id) const override;
  size_t vocab_size() const override { return pieces_.size(); }
  std::optional<TokenId> unk_id() const override { return unk_; }
  bool fuse_unk() const override { return true; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  UnigramModel() = default;
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  // piece -> id; a piece listed twice maps to its last index (as a JavaScript Map built in order).
  std::unordered_map<std::string, TokenId> vocab_;
  std::optional<TokenId> unk_;
  double unk_score_ = 0;
  size_t max_piece_chars_ = 0;  // the longest piece, in code points
  bool byte_fallback_ = false;
};

}  // namespace tf::text
