// The streaming encode path gives exactly what the whole-list implementations it replaced gave.
// Each test runs the streaming code against a plain reference kept here (the earlier code, or a
// naive version of the algorithm) over random and adversarial inputs long enough to cross every
// internal boundary: Split behaviours cut one part at a time, the Unigram Viterbi flushes settled
// prefixes of long words, BPE merges words longer than a few kilobytes in chunks, the Unicode
// normal forms work a chunk at a time, and a Sequence pre-tokenizer runs its stages depth-first.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/split_behavior.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;
using testing::build;
using testing::tokenizer_with;

std::string random_text(std::mt19937& rng, const std::vector<std::string>& alphabet, size_t chars) {
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string s;
  for (size_t i = 0; i < chars; ++i) s += alphabet[pick(rng)];
  return s;
}

// ---- Split behaviours: the list implementation the streaming one replaced. ----

std::vector<std::string> reference_split(const Regex& re, SplitBehavior behavior, bool invert,
                                         std::string_view text) {
  struct Seg {
    size_t b, e;
    bool is_match;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(text)) {
    if (b > prev) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), false});
  if (invert) {
    for (Seg& s : segs) s.is_match = !s.is_match;
  }
  std::vector<std::pair<size_t, size_t>> parts;
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Seg& s : segs) {
        if (!s.is_match) parts.emplace_back(s.b, s.e);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Seg& s : segs) parts.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Seg& s : segs) {
        if (s.is_match && !prev_match && !parts.empty()) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        prev_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !prev_match && !parts.empty()) {
          parts.back().first = it->b;
        } else {
          parts.emplace_back(it->b, it->e);
        }
        prev_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Seg& s : segs) {
        if (s.is_match == prev_match && !parts.empty()) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        prev_match = s.is_match;
      }
      break;
  }
  std::vector<std::string> out;
  for (auto [b, e] : parts) {
    if (e > b) out.emplace_back(text.substr(b, e - b));
  }
  return out;
}

TEST(TokenizerStreaming, SplitBehavioursCutLikeTheListImplementation) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"-", "-", "a", "b", " ", "\u00e9", "\u4e2d"};
  for (const char* pattern : {"-", "-+", "a|-", "\\s+", "(?=b)"}) {
    Expected<Regex> re = Regex::compile(pattern);
    ASSERT_TRUE(re.has_value()) << pattern;
    for (SplitBehavior behavior :
         {SplitBehavior::kRemoved, SplitBehavior::kIsolated, SplitBehavior::kMergedWithPrevious,
          SplitBehavior::kMergedWithNext, SplitBehavior::kContiguous}) {
      for (bool invert : {false, true}) {
        for (int trial = 0; trial < 40; ++trial) {
          const std::string text = random_text(rng, alphabet, static_cast<size_t>(trial));
          std::vector<std::string> got;
          split_by_matches(*re, behavior, invert, text, [&](std::string_view p) { got.emplace_back(p); });
          EXPECT_EQ(got, reference_split(*re, behavior, invert, text))
              << pattern << " behaviour " << static_cast<int>(behavior) << " invert " << invert << " text \""
              << text << "\"";
        }
      }
    }
  }
}

// ---- Sequence: depth-first stages give the words of stage-by-stage rewriting. ----

TEST(TokenizerStreaming, SequenceStagesRunDepthFirstWithTheSameWords) {
  // Stage by stage on the whole list (what the pipeline did before) vs the streaming Sequence.
  const json stages = json::array({{{"type", "Split"},
                                    {"pattern", {{"Regex", testing::kGlmPattern}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}},
                                   {{"type", "Digits"}, {"individual_digits", true}},
                                   {{"type", "Metaspace"},
                                    {"replacement", "\u2581"},
                                    {"add_prefix_space", true},
                                    {"prepend_scheme", "first"}},
                                   {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}});
  Expected<std::unique_ptr<PreTokenizer>> sequence =
      make_pre_tokenizer({{"type", "Sequence"}, {"pretokenizers", stages}});
  ASSERT_TRUE(sequence.has_value()) << sequence.status().to_string();
  std::vector<std::unique_ptr<PreTokenizer>> each;
  for (const json& s : stages) {
    Expected<std::unique_ptr<PreTokenizer>> p = make_pre_tokenizer(s);
    ASSERT_TRUE(p.has_value()) << p.status().to_string();
    each.push_back(std::move(*p));
  }
  std::mt19937 rng(11);
  const std::vector<std::string> alphabet = {"a",  "B",  " ",  " ", "  ",     "7",
                                             "42", "\n", "'s", ",", "\u4e2d", "\U0001F600"};
  for (bool first : {true, false}) {
    for (int trial = 0; trial < 30; ++trial) {
      const std::string text = random_text(rng, alphabet, 200 + static_cast<size_t>(trial) * 37);
      std::vector<std::string> stage_by_stage{text};
      for (const auto& p : each) p->pre_tokenize(stage_by_stage, first);
      std::vector<std::string> streamed;
      (*sequence)->pre_tokenize(text, first, [&](std::string_view w) { streamed.emplace_back(w); });
      EXPECT_EQ(streamed, stage_by_stage) << "first=" << first << " text \"" << text << "\"";
    }
  }
}

// ---- Unigram: the whole-lattice Viterbi the streaming one replaced. ----

struct UnigramVocab {
  std::vector<std::string> pieces;
  std::vector<double> scores;
  std::optional<TokenId> unk;
};

json unigram_json(const UnigramVocab& v) {
  json vocab = json::array();
  for (size_t i = 0; i < v.pieces.size(); ++i) vocab.push_back(json::array({v.pieces[i], v.scores[i]}));
  return {{"type", "Unigram"}, {"unk_id", v.unk ? json(*v.unk) : json(nullptr)}, {"vocab", vocab}};
}

// The earlier UnigramModel::encode_word (every node of the word's lattice held at once), then the
// tokenizer's fusing of consecutive unks.
Ids reference_unigram(const UnigramVocab& v, std::string_view word) {
  std::unordered_map<std::string, TokenId> vocab;
  size_t max_piece_chars = 0;
  std::vector<double> scores = v.scores;
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    vocab[v.pieces[i]] = static_cast<TokenId>(i);
    max_piece_chars = std::max(max_piece_chars, to_code_points(v.pieces[i]).size());
  }
  const double unk_score = *std::min_element(scores.begin(), scores.end()) - 10.0;
  if (v.unk) scores[static_cast<size_t>(*v.unk)] = unk_score;
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    const size_t n = utf8_sequence_length(word, i);
    i += n == 0 ? 1 : n;
  }
  const size_t n = bounds.size();
  bounds.push_back(word.size());
  struct Node {
    TokenId id;
    size_t pos, len;
    double score;
    double best = 0;
    int prev = -1;
  };
  std::vector<Node> nodes;
  std::vector<std::vector<int>> ends(n + 1), begins(n + 1);
  for (size_t pos = 0; pos < n; ++pos) {
    bool single = false;
    for (size_t len = 1; len <= std::min(max_piece_chars, n - pos); ++len) {
      auto it = vocab.find(std::string(word.substr(bounds[pos], bounds[pos + len] - bounds[pos])));
      if (it == vocab.end()) continue;
      const int idx = static_cast<int>(nodes.size());
      nodes.push_back({it->second, pos, len, scores[static_cast<size_t>(it->second)]});
      begins[pos].push_back(idx);
      ends[pos + len].push_back(idx);
      if (len == 1) single = true;
    }
    if (!single) {
      const int idx = static_cast<int>(nodes.size());
      nodes.push_back({v.unk ? *v.unk : -1, pos, 1, unk_score});
      begins[pos].push_back(idx);
      ends[pos + 1].push_back(idx);
    }
  }
  for (size_t pos = 0; pos < n; ++pos) {
    for (int r : begins[pos]) {
      Node& rn = nodes[static_cast<size_t>(r)];
      if (pos == 0) {
        rn.best = 0.0 + rn.score;
        continue;
      }
      bool have = false;
      for (int l : ends[pos]) {
        const double s = nodes[static_cast<size_t>(l)].best + rn.score;
        if (!have || s > rn.best) {
          have = true;
          rn.best = s;
          rn.prev = l;
        }
      }
    }
  }
  int last = -1;
  for (int l : ends[n]) {
    if (last < 0 || nodes[static_cast<size_t>(l)].best > nodes[static_cast<size_t>(last)].best) last = l;
  }
  Ids ids;
  for (int i = last; i >= 0; i = nodes[static_cast<size_t>(i)].prev) {
    if (nodes[static_cast<size_t>(i)].id >= 0) ids.push_back(nodes[static_cast<size_t>(i)].id);
  }
  std::reverse(ids.begin(), ids.end());
  if (v.unk) {
    Ids fused;
    for (TokenId id : ids) {
      if (id == *v.unk && !fused.empty() && fused.back() == *v.unk) continue;
      fused.push_back(id);
    }
    ids = std::move(fused);
  }
  return ids;
}

// Every string over {a, b} up to four characters, "▁" pieces, and scores drawn from a few values,
// so that many segmentations tie exactly (e.g. "aa" = 2 x "a").
UnigramVocab tie_heavy_vocab(std::mt19937& rng, bool with_unk) {
  UnigramVocab v;
  if (with_unk) {
    v.pieces.push_back("<unk>");
    v.scores.push_back(0);
    v.unk = 0;
  }
  std::uniform_int_distribution<int> score(1, 4);
  std::vector<std::string> level = {""};
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : level) {
      for (const char* c : {"a", "b"}) next.push_back(s + c);
    }
    for (const std::string& s : next) {
      v.pieces.push_back(s);
      v.scores.push_back(-static_cast<double>(score(rng)) * (len == 1 ? 1.0 : 0.5 * len));
    }
    level = std::move(next);
  }
  for (const char* p : {"\u2581", "\u2581a", "\u2581ab", "b\u2581"}) {
    v.pieces.push_back(p);
    v.scores.push_back(-static_cast<double>(score(rng)));
  }
  return v;
}

TEST(TokenizerStreaming, UnigramLongWordsMatchTheWholeLatticeViterbi) {
  std::mt19937 rng(3);
  for (bool with_unk : {true, false}) {
    for (int trial = 0; trial < 12; ++trial) {
      const UnigramVocab v = tie_heavy_vocab(rng, with_unk);
      auto t = build(tokenizer_with(unigram_json(v)));
      // Mixed text (paths agree often, so prefixes are flushed), long runs of one letter (where
      // the best segmentations of successive prefixes keep disagreeing), and unknown characters.
      const std::string mixed = random_text(rng, {"a", "b", "\u2581", "ab", "x", "\u00e9"}, 3000);
      const std::string runs =
          std::string(1500 + static_cast<size_t>(trial), 'a') + "b" + std::string(700, 'b') + mixed;
      for (const std::string& word : {mixed, runs}) {
        EXPECT_EQ(t->encode(word, false), reference_unigram(v, word))
            << "trial " << trial << " unk " << with_unk;
      }
    }
  }
}

// ---- BPE: a naive merge loop (lowest rank first, leftmost on ties) over the whole word. ----

struct BpeVocab {
  std::vector<std::string> tokens;                          // id = index
  std::vector<std::pair<std::string, std::string>> merges;  // rank = index
};

json bpe_json(const BpeVocab& v) {
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  json merges = json::array();
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  return {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
}

Ids reference_bpe(const BpeVocab& v, std::string_view word) {
  std::unordered_map<std::string, TokenId> id;
  for (size_t i = 0; i < v.tokens.size(); ++i) id[v.tokens[i]] = static_cast<TokenId>(i);
  const size_t n = v.tokens.size();
  std::vector<int> rank(n * n, -1);
  std::vector<TokenId> merged(n * n, -1);
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const size_t k =
        static_cast<size_t>(id.at(v.merges[r].first)) * n + static_cast<size_t>(id.at(v.merges[r].second));
    if (rank[k] < 0) {
      rank[k] = static_cast<int>(r);
      merged[k] = id.at(v.merges[r].first + v.merges[r].second);
    }
  }
  Ids syms;
  for (size_t i = 0; i < word.size();) {
    const size_t len = utf8_sequence_length(word, i);
    syms.push_back(id.at(std::string(word.substr(i, len))));
    i += len;
  }
  while (true) {
    size_t best = 0;
    int best_rank = -1;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const int r = rank[static_cast<size_t>(syms[i]) * n + static_cast<size_t>(syms[i + 1])];
      if (r >= 0 && (best_rank < 0 || r < best_rank)) {
        best_rank = r;
        best = i;
      }
    }
    if (best_rank < 0) break;
    syms[best] = merged[static_cast<size_t>(syms[best]) * n + static_cast<size_t>(syms[best + 1])];
    syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return syms;
}

BpeVocab make_bpe_vocab(const std::vector<std::string>& alphabet,
                        const std::vector<std::pair<std::string, std::string>>& merges) {
  BpeVocab v;
  v.tokens = alphabet;
  for (const auto& [a, b] : merges) {
    if (std::find(v.tokens.begin(), v.tokens.end(), a + b) == v.tokens.end()) v.tokens.push_back(a + b);
    v.merges.emplace_back(a, b);
  }
  return v;
}

TEST(TokenizerStreaming, LongBpeWordsMergeInChunksLikeOneWord) {
  const std::vector<std::string> alphabet = {"a", "b", "c", "\u2581", "\u00e9"};
  // Merges that never join "c" to what follows it, nor anything to a following "\u2581": the word is
  // cut there. "é" is joined on both sides, so runs of it are never cut.
  const BpeVocab sparse = make_bpe_vocab(alphabet, {{"a", "b"},
                                                    {"b", "a"},
                                                    {"ab", "c"},
                                                    {"\u2581", "a"},
                                                    {"\u2581a", "b"},
                                                    {"b", "c"},
                                                    {"a", "\u00e9"},
                                                    {"\u00e9", "\u00e9"},
                                                    {"\u00e9", "a"},
                                                    {"a", "a"},
                                                    {"aa", "aa"},
                                                    {"\u00e9\u00e9", "\u00e9\u00e9"}});
  // Every pair joins: no safe cut anywhere, the word is merged whole.
  const BpeVocab dense = make_bpe_vocab(
      {"a", "b"}, {{"a", "b"}, {"b", "a"}, {"a", "a"}, {"b", "b"}, {"ab", "ab"}, {"ba", "ab"}});
  std::mt19937 rng(5);
  for (const BpeVocab* v : {&sparse, &dense}) {
    auto t = build(tokenizer_with(bpe_json(*v)));
    const std::vector<std::string> letters = v == &sparse ? alphabet : std::vector<std::string>{"a", "b"};
    for (int trial = 0; trial < 3; ++trial) {
      // Above twice the chunk size (4 KiB), so that the word is cut at least once, plus a long run
      // of one repeated pair that has no cut of its own.
      std::string word = random_text(rng, letters, 9000 + static_cast<size_t>(trial) * 1234);
      for (int i = 0; i < 3000; ++i) word += letters[static_cast<size_t>(i % 2)];
      EXPECT_EQ(t->encode(word, false), reference_bpe(*v, word)) << "trial " << trial;
    }
  }
}

// ---- Normal forms: long texts are normalized in chunks, cut before characters that start an
// independent run. A newline is such a character by Unicode's rules (an ASCII starter that no
// composition takes as its second), so normalizing line by line, each line shorter than a chunk,
// is the whole-text reference; the chunk cuts themselves fall inside lines. ----

TEST(TokenizerStreaming, NormalFormsOfLongTextsMatchLineByLine) {
  std::mt19937 rng(9);
  const std::vector<std::vector<std::string>> alphabets = {
      // Base letters, combining marks of different classes (reordered), precomposed letters, Hangul
      // jamo and syllables, kana with a voiced mark, compatibility characters, CJK.
      {"a",      "e",      "A",      "\u0301", "\u0308", "\u0323", "\u031b", "\u00e9", "\u1e69", "\u1100",
       "\u1161", "\u11a8", "\uac00", "\ud55c", "\u304b", "\u3099", "\ufb01", "\u2460", "\uff21", "\u4e2d"},
      // Starters that compose with the starter before them (Oriya U+0B47 + U+0B3E / U+0B57, Hangul
      // L + V and LV + T): a cut before one of those seconds would split a composition.
      {"\u0b47", "\u0b3e", "\u0b57", "\u0301", "\u1100", "\u1161", "\u11a8", "\uac00"}};
  using Form = std::string (*)(std::string_view);
  for (const std::vector<std::string>& alphabet : alphabets) {
    std::uniform_int_distribution<size_t> line_chars(1, 3000);
    std::string text;
    std::vector<std::string> lines;
    while (text.size() < (1u << 20)) {
      lines.push_back(random_text(rng, alphabet, line_chars(rng)));
      text += lines.back() + "\n";
    }
    for (Form form : {Form{&nfc}, Form{&nfd}, Form{&nfkc}, Form{&nfkd}}) {
      std::string line_by_line;
      for (const std::string& line : lines) line_by_line += form(line) + "\n";
      EXPECT_EQ(form(text), line_by_line);
    }
  }
}

}  // namespace
}  // namespace tf::text
