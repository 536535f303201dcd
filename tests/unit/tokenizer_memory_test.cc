// Tokenizer::encode holds the input and the ids, and little else, however long the text: the
// words of the pre-tokenizer stream into the model one at a time, the Unigram Viterbi keeps a
// window, and long BPE words are merged in chunks. This binary replaces the global operator new /
// delete with counting ones (hence a binary of its own) and checks the peak of live heap bytes
// during encode against what the result itself holds. Byte counts, not timings or RSS, so the
// bounds are exact and the same on every machine; they are loose (a few hundred kilobytes for the
// work in progress) but far below what holding every word at once costs (tens of bytes per word).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "text/tokenizer.h"
#include "tokenizer_test_util.h"

namespace {

// Live and peak bytes requested through operator new. A header in front of each block keeps its
// size for operator delete.
std::atomic<size_t> g_live{0};
std::atomic<size_t> g_peak{0};
constexpr size_t kHeader = alignof(std::max_align_t);

void* counted_alloc(size_t n) {
  void* p = std::malloc(n + kHeader);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const size_t live = g_live.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kHeader;
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  void* block = static_cast<char*>(p) - kHeader;
  g_live.fetch_sub(*static_cast<size_t*>(block));
  std::free(block);
}

}  // namespace

// libstdc++ routes the array, nothrow and sized forms through these two.
void* operator new(size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void* operator new[](size_t n) { return counted_alloc(n); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }

namespace tf::text {
namespace {

using json = nlohmann::json;
using testing::build;
using testing::tokenizer_with;

struct EncodeMemory {
  size_t transient;  // peak live bytes during encode, above what is live once it returns
  size_t ids_bytes;  // what the returned ids hold
  size_t num_ids;
};

EncodeMemory measure_encode(const Tokenizer& t, const std::string& text) {
  // A first call fills the model's caches (BPE keeps short words), which are not per-call work.
  (void)t.encode(text.substr(0, 1 << 16), false);
  g_peak.store(g_live.load());
  std::vector<TokenId> ids = t.encode(text, false);
  const size_t after = g_live.load();
  return {g_peak.load() - after, ids.capacity() * sizeof(TokenId), ids.size()};
}

// Words from a small list (so that the BPE cache stays small), digits, CJK, emoji and long
// whitespace runs.
std::string mixed_text(size_t bytes) {
  std::mt19937 rng(1);
  const std::vector<std::string> words = {
      "the ",  "quick ",        "brown ",      "fox ",       "don't ", "Hello ", "12345 ",
      "3.14 ", "\u4e2d\u6587 ", "\U0001F600 ", "caf\u00e9 ", "\n",     "    ",   "!? "};
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::string s;
  while (s.size() < bytes) {
    s += words[pick(rng)];
    if (pick(rng) == 0) s += std::string(200, ' ');
  }
  return s;
}

constexpr size_t kWorkBytes = 512 * 1024;  // slack for the word in hand, regex state, small buffers

TEST(TokenizerMemory, ByteLevelBpeHoldsOnlyTheIdsAndOneWord) {
  // The GLM-5.3 layout: Split regex, then ByteLevel, then BPE.
  auto t = build(testing::byte_level_tokenizer({{"t", "h"}, {"th", "e"}, {" ", "q"}, {"o", "x"}}));
  const std::string text = mixed_text(8 << 20);
  const EncodeMemory m = measure_encode(*t, text);
  ASSERT_GT(m.num_ids, text.size() / 8);
  // The ids' last reallocation (old buffer beside the new one) is the largest legitimate extra.
  EXPECT_LE(m.transient, m.ids_bytes + kWorkBytes) << m.num_ids << " ids";
}

TEST(TokenizerMemory, UnigramOnOneLongWordKeepsAWindow) {
  // Metaspace does not split (as in transformers.js): the whole text is one word for Viterbi.
  json vocab = json::array({json::array({"<unk>", 0.0})});
  for (const char* p : {"\u2581", "\u2581the", "the", "qu", "ick", "\u2581quick", "o", "x", "f",
                        "b",      "r",         "w",   "n",  "e",   "t",           "h", "q", "u",
                        "i",      "c",         "k",   "1",  "2",   "3",           "4", "5", "\u2581fox"}) {
    vocab.push_back(json::array({p, -2.0 - static_cast<double>(std::string(p).size()) * 0.25}));
  }
  auto t =
      build(tokenizer_with({{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}},
                           {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}));
  const std::string text = mixed_text(4 << 20);
  const EncodeMemory m = measure_encode(*t, text);
  ASSERT_GT(m.num_ids, text.size() / 16);
  // Metaspace's rewritten copy of the text (each space becomes three bytes) is the one big buffer.
  EXPECT_LE(m.transient, 3 * text.size() + m.ids_bytes + kWorkBytes) << m.num_ids << " ids";
}

TEST(TokenizerMemory, BpeWithoutPreTokenizerMergesLongWordsInChunks) {
  // SentencePiece-style BPE (Llama 2): no pre-tokenizer, the whole text is one word.
  json vocab = json::object();
  int next = 0;
  for (const char* c : {"\u2581", "t", "h", "e", "q", "u", "i", "c", "k", "b", "r",  "o", "w", "n", "f", "x",
                        "d",      "'", "H", "l", "1", "2", "3", "4", "5", ".", "\n", "!", "?", "a", " "}) {
    vocab[c] = next++;
  }
  vocab["<unk>"] = next++;
  json merges = json::array();
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{"t", "h"},
                                                                             {"th", "e"},
                                                                             {"\u2581", "th"},
                                                                             {"\u2581", "the"},
                                                                             {"q", "u"},
                                                                             {"i", "c"},
                                                                             {"ic", "k"},
                                                                             {"o", "x"}}) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merges.push_back(a + " " + b);
  }
  json j = tokenizer_with(
      {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", "<unk>"}, {"fuse_unk", true}});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  auto t = build(j);
  const std::string text = mixed_text(4 << 20);
  const EncodeMemory m = measure_encode(*t, text);
  ASSERT_GT(m.num_ids, text.size() / 8);
  // The normalized copy of the text (spaces become three bytes) is the one big buffer.
  EXPECT_LE(m.transient, 3 * text.size() + m.ids_bytes + kWorkBytes) << m.num_ids << " ids";
}

}  // namespace
}  // namespace tf::text
