// Greedy longest-match-first WordPiece, as transformers.js does it: for each start position the
// longest substring (prefixed after the first piece) found in the vocabulary is taken; one part
// without any match turns the whole word into unk.
#include "text/wordpiece.h"

#include <nlohmann/json.hpp>

#include "text/utf8.h"

namespace tf::text {

using json = nlohmann::json;

Status read_vocab_object(const json& vocab, const std::string& field, std::unordered_map<std::string, TokenId>& map,
                         std::vector<std::string>& id_to_token, std::vector<bool>& has_token) {
  if (!vocab.is_object()) return invalid_argument(field + ": expected an object of token -> id");
  map.reserve(vocab.size());
  TokenId max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return invalid_argument(field + ": the id of \"" + it.key() + "\" is not an integer");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 30)) {
      return invalid_argument(field + ": id " + std::to_string(id) + " of \"" + it.key() + "\" out of range");
    }
    map[it.key()] = static_cast<TokenId>(id);
    max_id = std::max(max_id, static_cast<TokenId>(id));
  }
  id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  has_token.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : map) {
    id_to_token[static_cast<size_t>(id)] = tok;
    has_token[static_cast<size_t>(id)] = true;
  }
  return Status::ok();
}

Expected<std::unique_ptr<WordPieceModel>> WordPieceModel::from_json(const json& m) {
  try {
    std::unique_ptr<WordPieceModel> wp(new WordPieceModel());
    if (!m.contains("vocab")) return invalid_argument("model.vocab: missing");
    TF_RETURN_IF_ERROR(read_vocab_object(m.at("vocab"), "model.vocab", wp->vocab_, wp->id_to_token_, wp->has_token_));
    if (!m.contains("unk_token") || !m.at("unk_token").is_string()) {
      return invalid_argument("model.unk_token: WordPiece needs a string unk_token");
    }
    const std::string unk = m.at("unk_token").get<std::string>();
    auto u = wp->vocab_.find(unk);
    if (u == wp->vocab_.end()) return invalid_argument("model.unk_token \"" + unk + "\" is not in the vocabulary");
    wp->unk_ = u->second;
    if (m.contains("continuing_subword_prefix") && !m.at("continuing_subword_prefix").is_null()) {
      if (!m.at("continuing_subword_prefix").is_string()) {
        return invalid_argument("model.continuing_subword_prefix: expected a string");
      }
      wp->prefix_ = m.at("continuing_subword_prefix").get<std::string>();
    }
    if (m.contains("max_input_chars_per_word") && !m.at("max_input_chars_per_word").is_null()) {
      const json& v = m.at("max_input_chars_per_word");
      if (!v.is_number_integer() || v.get<int64_t>() < 0) {
        return invalid_argument("model.max_input_chars_per_word: expected a non-negative integer");
      }
      wp->max_chars_ = static_cast<size_t>(v.get<int64_t>());
    }
    wp->fuse_unk_ = m.contains("fuse_unk") && m.at("fuse_unk").is_boolean() && m.at("fuse_unk").get<bool>();
    for (const auto& [tok, id] : wp->vocab_) wp->max_token_bytes_ = std::max(wp->max_token_bytes_, tok.size());
    return wp;
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer model (WordPiece): ") + e.what());
  }
}

std::optional<TokenId> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void WordPieceModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  // Byte offsets of the code point boundaries (invalid bytes count as one character each); a word
  // past the limit is unk before any of it is listed.
  const auto char_end = [&](size_t i) {
    const size_t n = utf8_sequence_length(word, i);
    return i + (n == 0 ? 1 : n);
  };
  size_t nchars = 0;
  for (size_t i = 0; i < word.size() && nchars <= max_chars_; i = char_end(i)) ++nchars;
  if (nchars > max_chars_) {
    out.push_back(unk_);
    return;
  }
  std::vector<size_t> bounds;
  bounds.reserve(nchars + 1);
  for (size_t i = 0; i < word.size(); i = char_end(i)) bounds.push_back(i);
  bounds.push_back(word.size());
  const size_t first = out.size();
  std::string key;
  size_t start = 0;
  while (start < nchars) {
    bool found = false;
    for (size_t end = nchars; end > start; --end) {
      const size_t b = bounds[start], e = bounds[end];
      const size_t len = (start > 0 ? prefix_.size() : 0) + (e - b);
      if (len > max_token_bytes_) continue;
      key.clear();
      if (start > 0) key = prefix_;
      key.append(word.substr(b, e - b));
      auto it = vocab_.find(key);
      if (it != vocab_.end()) {
        out.push_back(it->second);
        start = end;
        found = true;
        break;
      }
    }
    if (!found) {
      out.resize(first);
      out.push_back(unk_);
      return;
    }
  }
}

}  // namespace tf::text
