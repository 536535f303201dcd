#include "spec/copy_drafter.h"

#include <algorithm>

namespace tf::spec {

namespace {

// The search shared by both: `ends(visit)` calls visit(e) for each candidate end e of an
// occurrence (a position holding the last token), latest first, until visit returns false.
template <typename Ends>
std::vector<int32_t> search(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts,
                            const CopyDraftOptions& options, Ends&& ends) {
  const int64_t n = static_cast<int64_t>(tokens.size()), m = options.min_match;
  if (max_drafts <= 0 || m <= 0 || n < m + 1) return {};
  const int32_t* t = tokens.data();
  const int32_t* suffix = t + n - m;
  const int64_t lowest_end = std::max<int64_t>(m - 1, n - 1 - options.window);
  int64_t best_from = -1, best_len = 0;
  std::vector<int32_t> out;
  ends(lowest_end, [&](int64_t e) {
    if (!std::equal(suffix, suffix + m, t + e - m + 1)) return true;
    const int64_t start = e - m + 1;
    if (start >= prompt_tokens) {
      // Inside the reply: the match must be longer (reply_min_match tokens).
      const int64_t need = options.reply_min_match;
      if (e + 1 < need || n < need) return true;
      if (!std::equal(t + n - need, t + n - m, t + e + 1 - need)) return true;
    }
    const int64_t len = std::min<int64_t>(n - (e + 1), max_drafts);
    if (len >= max_drafts) {
      out.assign(t + e + 1, t + e + 1 + len);
      return false;
    }
    if (len > best_len) {
      best_len = len;
      best_from = e + 1;
    }
    return true;
  });
  if (!out.empty() || best_from < 0) return out;
  return {t + best_from, t + best_from + best_len};
}

}  // namespace

std::vector<int32_t> copy_drafts(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts,
                                 const CopyDraftOptions& options) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  return search(tokens, prompt_tokens, max_drafts, options, [&](int64_t lowest_end, auto&& visit) {
    const int32_t last = tokens[static_cast<size_t>(n - 1)];
    // Occurrences end at e (inclusive) before the suffix's own end; the latest first.
    for (int64_t e = n - 2; e >= lowest_end; --e)
      if (tokens[static_cast<size_t>(e)] == last && !visit(e)) return;
  });
}

std::vector<int32_t> CopyIndex::drafts(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < indexed_) {  // not the sequence it indexed: start again
    latest_.clear();
    previous_.clear();
    indexed_ = first_ = 0;
  }
  if (indexed_ == 0) {
    first_ = std::max<int64_t>(0, n - 1 - options_.window);
    indexed_ = first_;
    latest_.reserve(static_cast<size_t>(std::min<int64_t>(n, options_.window)) / 2 + 16);
  }
  // Index every position but the last (an occurrence ends before the suffix's own end).
  for (int64_t e = indexed_; e < n - 1; ++e) {
    auto [it, fresh] = latest_.try_emplace(tokens[static_cast<size_t>(e)], e);
    previous_.push_back(fresh ? -1 : it->second);
    it->second = e;
  }
  indexed_ = std::max(indexed_, n - 1);
  if (n == 0) return {};
  return search(tokens, prompt_tokens, max_drafts, options_, [&](int64_t lowest_end, auto&& visit) {
    auto it = latest_.find(tokens[static_cast<size_t>(n - 1)]);
    for (int64_t e = it == latest_.end() ? -1 : it->second; e >= lowest_end && e >= first_;
         e = previous_[static_cast<size_t>(e - first_)])
      if (!visit(e)) return;
  });
}

}  // namespace tf::spec
