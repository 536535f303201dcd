// Viterbi over a lattice of code-point positions. Candidates are the pieces that start at each
// position (found by hash lookups of every length up to the longest piece), inserted in the order
// transformers.js's trie yields them (shorter first), then the unk node; a node's best predecessor
// is the first, in insertion order, of the highest-scoring nodes ending where it starts. The sums
// are done in the same order as transformers.js, in doubles, so ties resolve identically.
#include "text/unigram.h"

#include <limits>
#include <nlohmann/json.hpp>

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
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    const size_t n = utf8_sequence_length(word, i);
    i += n == 0 ? 1 : n;
  }
  const size_t n = bounds.size();
  bounds.push_back(word.size());

  struct Node {
    TokenId id;  // -1: an unknown character without an unk id
    size_t pos, len;
    double score;
    double best = 0;  // backtrace score
    int prev = -1;    // best predecessor (node index), -1 for the start
  };
  std::vector<Node> nodes;
  // ends[p]: the nodes ending at p, in insertion order; ends[0] holds only the start (-1).
  std::vector<std::vector<int>> ends(n + 1);
  std::vector<std::vector<int>> begins(n + 1);
  std::string key;
  for (size_t pos = 0; pos < n; ++pos) {
    bool single = false;
    const size_t max_len = std::min(max_piece_chars_, n - pos);
    for (size_t len = 1; len <= max_len; ++len) {
      key.assign(word.substr(bounds[pos], bounds[pos + len] - bounds[pos]));
      auto it = vocab_.find(key);
      if (it == vocab_.end()) continue;
      const int idx = static_cast<int>(nodes.size());
      nodes.push_back({it->second, pos, len, scores_[static_cast<size_t>(it->second)]});
      begins[pos].push_back(idx);
      ends[pos + len].push_back(idx);
      if (len == 1) single = true;
    }
    if (!single) {
      const int idx = static_cast<int>(nodes.size());
      nodes.push_back({unk_ ? *unk_ : -1, pos, 1, unk_score_});
      begins[pos].push_back(idx);
      ends[pos + 1].push_back(idx);
    }
  }
  // Forward pass: every node starting at pos picks its predecessor among the nodes ending at pos.
  for (size_t pos = 0; pos < n; ++pos) {
    for (int r : begins[pos]) {
      Node& rn = nodes[static_cast<size_t>(r)];
      if (pos == 0) {
        rn.best = 0.0 + rn.score;
        rn.prev = -1;
        continue;
      }
      bool have = false;
      double best = 0;
      int best_node = -1;
      for (int l : ends[pos]) {
        const double s = nodes[static_cast<size_t>(l)].best + rn.score;
        if (!have || s > best) {
          have = true;
          best = s;
          best_node = l;
        }
      }
      rn.best = best;
      rn.prev = best_node;
    }
  }
  // The end node's predecessor: the first best-scoring node ending at n.
  int last = -1;
  double best = 0;
  for (int l : ends[n]) {
    if (last < 0 || nodes[static_cast<size_t>(l)].best > best) {
      best = nodes[static_cast<size_t>(l)].best;
      last = l;
    }
  }
  std::vector<TokenId> ids;
  for (int i = last; i >= 0; i = nodes[static_cast<size_t>(i)].prev) {
    const Node& nd = nodes[static_cast<size_t>(i)];
    // transformers.js maps the piece's text back to an id; an unknown character is not in the
    // vocabulary, so it becomes unk.
    if (nd.id >= 0) ids.push_back(nd.id);
  }
  out.insert(out.end(), ids.rbegin(), ids.rend());
}

}  // namespace tf::text
