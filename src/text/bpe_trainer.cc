#include "text/bpe_trainer.h"

#include <map>
#include <memory>
#include <unordered_map>

#include "text/pre_tokenizer.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

using ojson = nlohmann::ordered_json;

// The pre-tokenizer of the trained tokenizer, so that training sees exactly the words that
// encoding will see.
ojson pre_tokenizer_config(const std::string& pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Expected<BpeTrainingResult> train_byte_level_bpe(std::span<const std::string_view> texts,
                                                 const BpeTrainerOptions& options) {
  Expected<std::unique_ptr<PreTokenizer>> pre = make_pre_tokenizer(nlohmann::json::parse(pre_tokenizer_config(options.split_pattern).dump()));
  if (!pre.has_value()) return pre.status().with_context("BPE trainer: split pattern");

  BpeTrainingResult result;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    result.vocab.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
    ids.emplace(result.vocab.back(), b);
  }

  // Distinct words with their counts; std::map keeps the word order independent of hashing.
  std::map<std::string, int64_t> word_counts;
  for (std::string_view text : texts) {
    std::vector<std::string> pieces{std::string(text)};
    (*pre)->pre_tokenize(pieces, true);
    for (std::string& p : pieces)
      if (!p.empty()) ++word_counts[std::move(p)];
  }
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [text, count] : word_counts) {
    Word w;
    w.count = count;
    for (char32_t cp : to_code_points(text)) {
      std::string ch;
      append_utf8(ch, cp);
      auto it = ids.find(ch);
      // ByteLevel output only holds alphabet characters; anything else would be a bug upstream.
      if (it == ids.end()) return internal_error("BPE trainer: pre-tokenizer produced a non-byte-level character");
      w.symbols.push_back(it->second);
    }
    words.push_back(std::move(w));
  }

  std::unordered_map<uint64_t, int64_t> pair_counts;
  while (result.merges.size() < options.num_merges) {
    pair_counts.clear();
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) pair_counts[pair_key(w.symbols[i], w.symbols[i + 1])] += w.count;
    // Highest count; ties to the smallest (left, right) as byte strings.
    bool found = false;
    int32_t best_a = 0, best_b = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pair_counts) {
      if (count < options.min_frequency) continue;
      const int32_t a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xffffffffu);
      bool better = !found || count > best_count;
      if (found && count == best_count) {
        const std::string& va = result.vocab[static_cast<size_t>(a)];
        const std::string& vba = result.vocab[static_cast<size_t>(best_a)];
        better = va < vba || (va == vba && result.vocab[static_cast<size_t>(b)] < result.vocab[static_cast<size_t>(best_b)]);
      }
      if (better) {
        found = true;
        best_a = a;
        best_b = b;
        best_count = count;
      }
    }
    if (!found) break;

    const std::string left = result.vocab[static_cast<size_t>(best_a)];
    const std::string right = result.vocab[static_cast<size_t>(best_b)];
    const std::string merged = left + right;
    int32_t merged_id;
    if (auto it = ids.find(merged); it != ids.end()) {
      merged_id = it->second;  // reachable by another split already: keep its first id
    } else {
      merged_id = static_cast<int32_t>(result.vocab.size());
      result.vocab.push_back(merged);
      ids.emplace(merged, merged_id);
    }
    result.merges.emplace_back(left, right);

    for (Word& w : words) {
      std::vector<int32_t>& s = w.symbols;
      size_t out = 0;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == best_a && s[i + 1] == best_b) {
          s[out++] = merged_id;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      s.resize(out);
    }
  }
  return result;
}

ojson byte_level_tokenizer_json(const BpeTrainingResult& model, const std::vector<AddedTokenSpec>& added,
                                const std::string& split_pattern) {
  ojson doc = ojson::object();
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  ojson added_json = ojson::array();
  for (size_t i = 0; i < added.size(); ++i) {
    ojson t = ojson::object();
    t["id"] = model.vocab.size() + i;
    t["content"] = added[i].content;
    t["single_word"] = false;
    t["lstrip"] = false;
    t["rstrip"] = false;
    t["normalized"] = false;
    t["special"] = added[i].special;
    added_json.push_back(std::move(t));
  }
  doc["added_tokens"] = std::move(added_json);
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = pre_tokenizer_config(split_pattern);
  doc["post_processor"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ojson m = ojson::object();
  m["type"] = "BPE";
  m["dropout"] = nullptr;
  m["unk_token"] = nullptr;
  m["continuing_subword_prefix"] = nullptr;
  m["end_of_word_suffix"] = nullptr;
  m["fuse_unk"] = false;
  m["byte_fallback"] = false;
  m["ignore_merges"] = true;
  ojson vocab = ojson::object();
  for (size_t id = 0; id < model.vocab.size(); ++id) vocab[model.vocab[id]] = id;
  m["vocab"] = std::move(vocab);
  ojson merges = ojson::array();
  for (const auto& [a, b] : model.merges) merges.push_back(ojson::array({a, b}));
  m["merges"] = std::move(merges);
  doc["model"] = std::move(m);
  return doc;
}

}  // namespace tf::text
