// The BPE model of a Hugging Face tokenizer.json: vocabulary, ranked merges (both the "a b"
// string form and the ["a", "b"] pair form), unk token, byte_fallback (<0xNN> tokens),
// ignore_merges (a word found whole in the vocabulary is one token), continuing_subword_prefix
// and end_of_word_suffix. Words are merged with a priority queue over (rank, position), so a word
// of n symbols costs O(n log n); results for short words are cached. A long word (a whole text,
// when there is no pre-tokenizer) is merged in chunks of a few kilobytes, cut between two
// characters that no merge joins (see merge_junctions_), which gives the same tokens while
// holding the merge state of one chunk only.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "text/model.h"

namespace tf::text {

class BpeModel final : public Model {
 public:
  // Reads a tokenizer.json "model" object whose "type" is "BPE" (or absent, with merges).
  static Expected<BpeModel> from_json(const nlohmann::json& model);

  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&&) = delete;

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const override;

  std::optional<TokenId> token_to_id(std::string_view token) const override;
  // Empty optional for ids outside the vocabulary.
  const std::string* id_to_token(TokenId id) const override;
  // One past the largest id of the vocabulary.
  size_t vocab_size() const override { return id_to_token_.size(); }
  std::optional<TokenId> unk_id() const override { return unk_; }
  bool fuse_unk() const override { return fuse_unk_; }
  const std::string& end_of_word_suffix() const override { return end_of_word_suffix_; }

 private:
  BpeModel() = default;
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
  };
  struct Merge {
    uint32_t rank;
    TokenId merged;
  };
  static uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;
  // Where the chunk of `word` that starts at `begin` ends: at the first boundary at least
  // kChunkBytes on where no merge can join the characters on either side, else the word's end.
  size_t chunk_end(std::string_view word, size_t begin) const;
  static uint64_t code_point_pair(char32_t a, char32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

  std::unordered_map<std::string, TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge, PairHash> merges_;
  std::optional<TokenId> unk_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  // The (last code point of a, first code point of b) of every merge a + b. A token can only span
  // two adjacent characters x y of a word if some merge joins a part ending in x to a part
  // starting with y; when (x, y) is not listed and x and y are tokens themselves, the merges on
  // either side never interact, so the word can be merged as two independent chunks. Filled only
  // when chunking is exact: without continuing_subword_prefix and end_of_word_suffix.
  std::unordered_set<uint64_t> merge_junctions_;
  bool chunked_merges_ = false;
  static constexpr size_t kChunkBytes = 4096;
  // <0xNN> ids; kNoByteToken where the vocabulary lacks that byte (some vocabularies miss a few).
  static constexpr TokenId kNoByteToken = -1;
  TokenId byte_tokens_[256];

  // word -> ids, for words up to kMaxCachedWordBytes; cleared when it grows past kCacheCapacity.
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kCacheCapacity = 100000;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache_;
};

}  // namespace tf::text
