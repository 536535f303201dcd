// BPE merging as in the Hugging Face implementation: the word starts as one symbol per character
// (a character missing from the vocabulary becomes <0xNN> byte tokens with byte_fallback, else
// unk); then the pair with the lowest merge rank is merged, ties going to the leftmost pair, until
// no adjacent pair has a merge. Symbols live in a vector with prev/next links; the heap holds
// candidate merges that are re-validated when popped.
#include "text/bpe.h"

#include <nlohmann/json.hpp>
#include <queue>

#include "text/utf8.h"

namespace tf::text {

using json = nlohmann::json;

namespace {

// The first / last code point of a non-empty string; a byte that starts no valid sequence counts
// as U+FFFD (such a string matches no text character either).
char32_t first_code_point(std::string_view s) {
  const size_t n = utf8_sequence_length(s, 0);
  return n == 0 ? kReplacementChar : decode_utf8_at(s, 0, n);
}
char32_t last_code_point(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && s.size() - i < 4 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  const size_t n = utf8_sequence_length(s, i);
  return n == 0 || i + n != s.size() ? kReplacementChar : decode_utf8_at(s, i, n);
}

}  // namespace

BpeModel::BpeModel(BpeModel&& o) noexcept
    : vocab_(std::move(o.vocab_)),
      id_to_token_(std::move(o.id_to_token_)),
      has_token_(std::move(o.has_token_)),
      merges_(std::move(o.merges_)),
      unk_(o.unk_),
      continuing_subword_prefix_(std::move(o.continuing_subword_prefix_)),
      end_of_word_suffix_(std::move(o.end_of_word_suffix_)),
      byte_fallback_(o.byte_fallback_),
      ignore_merges_(o.ignore_merges_),
      fuse_unk_(o.fuse_unk_),
      merge_junctions_(std::move(o.merge_junctions_)),
      chunked_merges_(o.chunked_merges_) {
  std::copy(std::begin(o.byte_tokens_), std::end(o.byte_tokens_), std::begin(byte_tokens_));
}

Expected<BpeModel> BpeModel::from_json(const json& m) {
  try {
    if (m.contains("type") && m.at("type").get<std::string>() != "BPE") {
      return unimplemented("tokenizer model type \"" + m.at("type").get<std::string>() +
                           "\" is not supported (only BPE)");
    }
    BpeModel bpe;
    const json& vocab = m.at("vocab");
    if (!vocab.is_object()) return invalid_argument("model.vocab: expected an object of token -> id");
    bpe.vocab_.reserve(vocab.size());
    TokenId max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const int64_t id = it.value().get<int64_t>();
      if (id < 0 || id > (1 << 30)) return invalid_argument("model.vocab: id " + std::to_string(id) + " of \"" + it.key() + "\" out of range");
      bpe.vocab_[it.key()] = static_cast<TokenId>(id);
      max_id = std::max(max_id, static_cast<TokenId>(id));
    }
    bpe.id_to_token_.resize(static_cast<size_t>(max_id + 1));
    bpe.has_token_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [tok, id] : bpe.vocab_) {
      bpe.id_to_token_[static_cast<size_t>(id)] = tok;
      bpe.has_token_[static_cast<size_t>(id)] = true;
    }
    auto str_or_empty = [&](const char* key) {
      return (m.contains(key) && m.at(key).is_string()) ? m.at(key).get<std::string>() : std::string();
    };
    bpe.continuing_subword_prefix_ = str_or_empty("continuing_subword_prefix");
    bpe.end_of_word_suffix_ = str_or_empty("end_of_word_suffix");
    const std::string unk = str_or_empty("unk_token");
    if (!unk.empty()) {
      auto u = bpe.vocab_.find(unk);
      if (u == bpe.vocab_.end()) return invalid_argument("model.unk_token \"" + unk + "\" is not in the vocabulary");
      bpe.unk_ = u->second;
    }
    bpe.byte_fallback_ = m.value("byte_fallback", false) == true;
    bpe.ignore_merges_ = m.contains("ignore_merges") && m.at("ignore_merges").is_boolean() && m.at("ignore_merges").get<bool>();
    bpe.fuse_unk_ = m.contains("fuse_unk") && m.at("fuse_unk").is_boolean() && m.at("fuse_unk").get<bool>();
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = bpe.vocab_.find(name);
      bpe.byte_tokens_[b] = it == bpe.vocab_.end() ? kNoByteToken : it->second;
    }

    const json& merges = m.contains("merges") ? m.at("merges") : json::array();
    bpe.merges_.reserve(merges.size());
    const size_t prefix_len = bpe.continuing_subword_prefix_.size();
    uint32_t rank = 0;
    for (const json& mg : merges) {
      std::string a, b;
      if (mg.is_array()) {
        if (mg.size() != 2) return invalid_argument("model.merges[" + std::to_string(rank) + "]: expected a pair");
        a = mg[0].get<std::string>();
        b = mg[1].get<std::string>();
      } else {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) return invalid_argument("model.merges[" + std::to_string(rank) + "]: \"" + s + "\" is not \"a b\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      }
      auto ia = bpe.vocab_.find(a);
      auto ib = bpe.vocab_.find(b);
      // The merged token drops the continuation prefix of its right half.
      std::string merged = a + (prefix_len > 0 && b.rfind(bpe.continuing_subword_prefix_, 0) == 0 ? b.substr(prefix_len) : b);
      auto im = bpe.vocab_.find(merged);
      if (ia == bpe.vocab_.end() || ib == bpe.vocab_.end() || im == bpe.vocab_.end()) {
        return invalid_argument("model.merges[" + std::to_string(rank) + "]: \"" + a + "\" + \"" + b +
                                "\" uses or makes a token missing from the vocabulary");
      }
      bpe.merges_.emplace(pair_key(ia->second, ib->second), Merge{rank, im->second});
      if (!a.empty() && !b.empty())
        bpe.merge_junctions_.insert(code_point_pair(last_code_point(a), first_code_point(b)));
      ++rank;
    }
    bpe.chunked_merges_ = bpe.continuing_subword_prefix_.empty() && bpe.end_of_word_suffix_.empty();
    if (!bpe.chunked_merges_) bpe.merge_junctions_.clear();
    return bpe;
  } catch (const json::exception& e) {
    return invalid_argument(std::string("tokenizer model: ") + e.what());
  }
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    for (size_t begin = 0; begin < word.size();) {
      const size_t end = chunk_end(word, begin);
      merge_word(word.substr(begin, end - begin), out);
      begin = end;
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

size_t BpeModel::chunk_end(std::string_view word, size_t begin) const {
  if (!chunked_merges_ || word.size() - begin <= 2 * kChunkBytes) return word.size();
  // The character boundary at or before begin + kChunkBytes (text is valid UTF-8 here).
  size_t i = begin + kChunkBytes;
  while (i > begin && (static_cast<uint8_t>(word[i]) & 0xC0) == 0x80) --i;
  // A boundary is safe when both neighbours are valid characters that are tokens themselves (so
  // their symbols are those characters) and no merge joins them.
  std::string left, right;
  const auto is_token = [&](const std::string& ch) { return vocab_.find(ch) != vocab_.end(); };
  size_t left_begin = i;
  do {
    --left_begin;
  } while (left_begin > begin && (static_cast<uint8_t>(word[left_begin]) & 0xC0) == 0x80);
  while (i < word.size()) {
    const size_t left_len = utf8_sequence_length(word, left_begin);
    const size_t right_len = utf8_sequence_length(word, i);
    if (left_len == i - left_begin && right_len != 0) {
      const char32_t a = decode_utf8_at(word, left_begin, left_len);
      const char32_t b = decode_utf8_at(word, i, right_len);
      if (!merge_junctions_.contains(code_point_pair(a, b))) {
        left.assign(word.substr(left_begin, left_len));
        right.assign(word.substr(i, right_len));
        if (is_token(left) && is_token(right)) return i;
      }
    }
    left_begin = i;
    i += right_len == 0 ? 1 : right_len;
  }
  return word.size();
}

void BpeModel::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  // One symbol per character (a valid UTF-8 sequence, or one byte when invalid).
  bool last_unk = false;
  std::string piece;
  for (size_t begin = 0, len; begin < word.size(); begin += len) {
    len = utf8_sequence_length(word, begin);
    if (len == 0) len = 1;
    piece.clear();
    if (begin > 0) piece += continuing_subword_prefix_;
    piece.append(word.substr(begin, len));
    if (begin + len == word.size()) piece += end_of_word_suffix_;
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      syms.push_back({it->second, static_cast<int>(syms.size()) - 1, -1, true});
      last_unk = false;
      continue;
    }
    // Byte fallback only when every byte of the character has its token, else unk (as both the Rust
    // tokenizers and transformers.js do).
    bool bytes_ok = byte_fallback_;
    for (size_t k = 0; bytes_ok && k < len; ++k)
      bytes_ok = byte_tokens_[static_cast<uint8_t>(word[begin + k])] != kNoByteToken;
    if (bytes_ok) {
      for (size_t k = 0; k < len; ++k) {
        syms.push_back({byte_tokens_[static_cast<uint8_t>(word[begin + k])],
                        static_cast<int>(syms.size()) - 1, -1, true});
      }
      last_unk = false;
      continue;
    }
    if (unk_) {
      if (fuse_unk_ && last_unk) continue;  // consecutive unknowns fuse into one unk
      syms.push_back({*unk_, static_cast<int>(syms.size()) - 1, -1, true});
      last_unk = true;
    }
  }
  for (size_t i = 0; i + 1 < syms.size(); ++i) syms[i].next = static_cast<int>(i + 1);

  struct Cand {
    uint32_t rank;
    int pos;
    TokenId left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int i) {
    if (i < 0 || syms[static_cast<size_t>(i)].next < 0) return;
    const Symbol& a = syms[static_cast<size_t>(i)];
    const Symbol& b = syms[static_cast<size_t>(a.next)];
    auto it = merges_.find(pair_key(a.id, b.id));
    if (it != merges_.end()) heap.push({it->second.rank, i, a.id, b.id, it->second.merged});
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Symbol& a = syms[static_cast<size_t>(c.pos)];
    // Stale entry: either side changed since it was pushed.
    if (!a.alive || a.id != c.left || a.next < 0) continue;
    Symbol& b = syms[static_cast<size_t>(a.next)];
    if (b.id != c.right) continue;
    a.id = c.merged;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) syms[static_cast<size_t>(b.next)].prev = c.pos;
    push(a.prev);
    push(c.pos);
  }
  for (const Symbol& s : syms) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace tf::text
