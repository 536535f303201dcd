// Viterbi over a lattice of code-point positions (unigram_viterbi.h). Candidates are the pieces
// that start at each position (found by hash lookups of every length up to the longest piece),
// inserted in the order transformers.js's trie yields them (shorter first), then the unk node; a
// node's best predecessor is the first, in insertion order, of the highest-scoring nodes ending
// where it starts. The sums are done in the same order as transformers.js, in doubles, so ties
// resolve identically.
#include "text/unigram.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "text/unigram_viterbi.h"
#include "text/utf8.h"

namespace tf::text {

using json = nlohmann::json;

Expected<std::unique_ptr<UnigramModel>> UnigramModel::from_json(const json& m) {
  try {
    std::unique_ptr<UnigramModel> u(new UnigramModel());
    if (!m.contains("vocab")) return invalid_argument("model.vocab: missing");
    const json& vocab = m.at("vocab");
    if (!vocab.is_array()) return invalid_argument("model.vocab: Unigram expects a list of [piece, score] pairs");
    u->pieces_.reserve(vocab.size());
    u->scores_.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i) {
      const json& e = vocab[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number()) {
        return invalid_argument("model.vocab[" + std::to_string(i) + "]: expected [piece, score], got " + e.dump());
      }
      u->pieces_.push_back(e[0].get<std::string>());
      u->scores_.push_back(e[1].get<double>());
    }
    if (u->pieces_.empty()) return invalid_argument("model.vocab: a Unigram vocabulary cannot be empty");
    if (u->pieces_.size() > (1u << 30)) return invalid_argument("model.vocab: too many pieces");
    for (size_t i = 0; i < u->pieces_.size(); ++i) {
      u->vocab_[u->pieces_[i]] = static_cast<TokenId>(i);
      size_t n = 0;
      for (size_t k = 0; k < u->pieces_[i].size();) {
        const size_t l = utf8_sequence_length(u->pieces_[i], k);
        k += l == 0 ? 1 : l;
        ++n;
      }
      u->max_piece_chars_ = std::max(u->max_piece_chars_, n);
    }
    if (m.contains("unk_id") && !m.at("unk_id").is_null()) {
      const json& id = m.at("unk_id");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || static_cast<size_t>(id.get<int64_t>()) >= u->pieces_.size()) {
        return invalid_argument("model.unk_id: " + id.dump() + " is not an index into the vocabulary (" +
                                std::to_string(u->pieces_.size()) + " pieces)");
      }
      u->unk_ = static_cast<TokenId>(id.get<int64_t>());
    }
    double min_score = std::numeric_limits<double>::infinity();
    for (double s : u->scores_) min_score = std::min(min_score, s);
    u->unk_score_ = min_score - 10.0;
    if (u->unk_) u->scores_[static_cast<size_t>(*u->unk_)] = u->unk_score_;
    u->byte_fallback_ = m.contains("byte_fallback") && m.at("byte_fallback").is_boolean() && m.at("byte_fallback").get<bool>();
    return u;
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer model (Unigram): ") + e.what());
  }
}

std::optional<TokenId> UnigramModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* UnigramModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return nullptr;
  return &pieces_[static_cast<size_t>(id)];
}

void UnigramModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  const auto char_end = [&](size_t i) {
    const size_t n = utf8_sequence_length(word, i);
    return i + (n == 0 ? 1 : n);
  };
  size_t num_chars = 0;
  for (size_t i = 0; i < word.size(); i = char_end(i)) ++num_chars;
  StreamingViterbi viterbi(num_chars, std::min(max_piece_chars_, num_chars), out);
  std::string key;
  size_t begin = 0;  // byte offset of the character at `pos`
  for (size_t pos = 0; pos < num_chars; ++pos) {
    bool single = false;
    size_t end = begin;
    for (size_t len = 1; len <= max_piece_chars_ && end < word.size(); ++len) {
      end = char_end(end);
      key.assign(word.substr(begin, end - begin));
      auto it = vocab_.find(key);
      if (it == vocab_.end()) continue;
      viterbi.add_node(pos, len, it->second, scores_[static_cast<size_t>(it->second)]);
      if (len == 1) single = true;
    }
    if (!single) viterbi.add_node(pos, 1, unk_ ? *unk_ : -1, unk_score_);
    viterbi.end_position(pos);
    begin = char_end(begin);
  }
  viterbi.finish();
}

}  // namespace tf::text
