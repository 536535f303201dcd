// Byte-level BPE training: a small, deterministic counterpart of Hugging Face's BpeTrainer, used
// to build the built-in demo checkpoint's tokenizer (src/engine/demo_checkpoint.h) from a corpus
// embedded in the binary.
//
// Algorithm:
//  1. Each text is pre-tokenized the way the resulting tokenizer will pre-tokenize it: a Split
//     regex (GLM's by default) cuts it into words, and every byte of a word becomes one
//     character of the GPT-2 byte alphabet (ByteLevel). Identical words are counted once, with
//     their frequency.
//  2. The vocabulary starts as the 256 byte characters, ids 0..255 in byte order.
//  3. Repeatedly, every adjacent symbol pair inside a word is counted (weighted by the word's
//     frequency); the most frequent pair is merged everywhere, and the concatenation gets the
//     next id unless it is already in the vocabulary. Ties go to the pair whose left symbol, then
//     right symbol, is smallest as a byte string, so training never depends on hash order.
//     Training stops after `num_merges` merges or when no pair occurs `min_frequency` times.
// The cost is O(num_merges x total symbols of the distinct words): meant for corpora of a few
// hundred kilobytes at most, which is all the demo needs.
//
// Because the alphabet holds all 256 bytes, the trained tokenizer encodes any UTF-8 text and
// decodes it back byte for byte.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tf::text {

// The GLM-5.3 pre-tokenizer regex (shared/spec/glm53-checkpoint-facts.md §2.3).
inline constexpr const char* kGlmSplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct BpeTrainerOptions {
  size_t num_merges = 1000;
  // A pair must occur at least this often (counting word frequencies) to be merged.
  int64_t min_frequency = 2;
  std::string split_pattern = kGlmSplitPattern;
};

struct BpeTrainingResult {
  // Token strings (byte-level characters) by id: the 256 byte characters first, in byte order.
  std::vector<std::string> vocab;
  // Merges in rank order, as byte-level strings.
  std::vector<std::pair<std::string, std::string>> merges;
};

// Trains on `texts` (each pre-tokenized separately). Fails only on a bad split pattern.
Expected<BpeTrainingResult> train_byte_level_bpe(std::span<const std::string_view> texts,
                                                 const BpeTrainerOptions& options = {});

// One tokenizer.json "added_tokens" entry.
struct AddedTokenSpec {
  std::string content;
  bool special = true;
};

// A complete tokenizer.json document for a trained model: the BPE model (ignore_merges true, no
// unk, no byte fallback), no normalizer, pre-tokenizer Sequence[Split(pattern, Isolated),
// ByteLevel(no prefix space, no regex)], ByteLevel post-processor and decoder, and `added` as
// added tokens with ids following the model's vocabulary, in the order given.
nlohmann::ordered_json byte_level_tokenizer_json(const BpeTrainingResult& model,
                                                 const std::vector<AddedTokenSpec>& added,
                                                 const std::string& split_pattern = kGlmSplitPattern);

}  // namespace tf::text
