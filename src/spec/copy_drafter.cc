#include "spec/copy_drafter.h"

#include <algorithm>

namespace tf::spec {

std::vector<int32_t> copy_drafts(std::span<const int32_t> tokens, int64_t prompt_tokens, int max_drafts,
                                 const CopyDraftOptions& options) {
  const int64_t n = static_cast<int64_t>(tokens.size()), m = options.min_match;
  if (max_drafts <= 0 || m <= 0 || n < m + 1) return {};
  const int32_t* t = tokens.data();
  const int32_t* suffix = t + n - m;
  const int64_t lowest_end = std::max<int64_t>(m - 1, n - 1 - options.window);
  int64_t best_from = -1, best_len = 0;
  // Occurrences end at e (inclusive) before the suffix's own end; the latest first.
  for (int64_t e = n - 2; e >= lowest_end; --e) {
    if (t[e] != suffix[m - 1] || !std::equal(suffix, suffix + m, t + e - m + 1)) continue;
    const int64_t start = e - m + 1;
    if (start >= prompt_tokens) {
      // Inside the reply: the match must be longer (reply_min_match tokens).
      const int64_t need = options.reply_min_match;
      if (e + 1 < need || n < need) continue;
      if (!std::equal(t + n - need, t + n - m, t + e + 1 - need)) continue;
    }
    const int64_t len = std::min<int64_t>(n - (e + 1), max_drafts);
    if (len >= max_drafts) return {t + e + 1, t + e + 1 + len};
    if (len > best_len) {
      best_len = len;
      best_from = e + 1;
    }
  }
  if (best_from < 0) return {};
  return {t + best_from, t + best_from + best_len};
}

}  // namespace tf::spec
