// Copy drafts (prompt lookup decoding): a sequence that is repeating something it has
// seen (an edit of the prompt's code, a quoted passage, a list it wrote before) will
// likely go on as that earlier occurrence went on. The drafter finds the latest earlier
// occurrence of the sequence's last `min_match` tokens and proposes the tokens that
// followed it; verification keeps only those the model itself would have sampled.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tf::spec {

struct CopyDraftOptions {
  int min_match = 8;         // tokens of the sequence's end that must recur
  int reply_min_match = 16;  // ... when the earlier occurrence starts in the reply (less reliable)
  int64_t window = 65536;    // how far back occurrences are searched
};

// Up to `max_drafts` tokens for `tokens` (prompt then reply so far; the reply starts at
// `prompt_tokens`): the continuation of the latest earlier occurrence of the last
// min_match tokens that has max_drafts tokens after it, else of the one with the longest
// continuation. Empty when nothing recurs.
std::vector<int32_t> copy_drafts(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts,
                                 const CopyDraftOptions& options = {});

// copy_drafts for one sequence that only grows, without scanning the window at every step:
// the positions holding the sequence's last token are the only places an occurrence can
// end, and each indexed position links to the previous one holding the same token (the
// window's positions indexed once, then each appended token). The same drafts as
// copy_drafts, from the same occurrence.
class CopyIndex {
 public:
  explicit CopyIndex(const CopyDraftOptions& options = {}) : options_(options) {}
  // `tokens` extends the tokens of the previous call (the same sequence, more tokens).
  std::vector<int32_t> drafts(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts);

 private:
  CopyDraftOptions options_;
  std::unordered_map<int32_t, int64_t> latest_;  // token id -> its latest indexed position
  std::vector<int64_t> previous_;                // position - first_ -> previous position of its token, or -1
  int64_t first_ = 0;    // the first indexed position (the window's start at the first call)
  int64_t indexed_ = 0;  // positions [first_, indexed_) are indexed
};

}  // namespace tf::spec
