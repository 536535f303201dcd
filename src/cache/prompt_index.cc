// PromptIndex (see prompt_index.h).
#include "cache/prompt_index.h"

#include <algorithm>

namespace tf {

std::optional<PromptIndex::Hit> PromptIndex::longest_prefix(std::span<const int32_t> prompt, int64_t limit) {
  limit = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()));
  Entry* best = nullptr;
  for (Entry& e : entries_) {
    const auto n = static_cast<int64_t>(e.tokens.size());
    if (n == 0 || n > limit || (best && n <= static_cast<int64_t>(best->tokens.size()))) continue;
    if (std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin())) best = &e;
  }
  if (!best) return std::nullopt;
  best->last_use = ++clock_;
  return Hit{best->id, static_cast<int64_t>(best->tokens.size())};
}

int64_t PromptIndex::shared_prefix(std::span<const int32_t> prompt) const {
  int64_t best = 0;
  for (const Entry& e : entries_) {
    const size_t n = std::min(e.tokens.size(), prompt.size());
    const auto at = std::mismatch(e.tokens.begin(), e.tokens.begin() + static_cast<std::ptrdiff_t>(n), prompt.begin());
    best = std::max<int64_t>(best, at.first - e.tokens.begin());
  }
  return best;
}

std::optional<uint64_t> PromptIndex::find(std::span<const int32_t> tokens) {
  for (Entry& e : entries_) {
    if (std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) {
      e.last_use = ++clock_;
      return e.id;
    }
  }
  return std::nullopt;
}

void PromptIndex::add(uint64_t id, std::vector<int32_t> tokens) {
  entries_.push_back(Entry{id, std::move(tokens), ++clock_});
}

void PromptIndex::remove(uint64_t id) {
  std::erase_if(entries_, [id](const Entry& e) { return e.id == id; });
}

std::optional<uint64_t> PromptIndex::least_recent() const {
  const auto it = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
  if (it == entries_.end()) return std::nullopt;
  return it->id;
}

int64_t PromptIndex::tokens(uint64_t id) const {
  for (const Entry& e : entries_)
    if (e.id == id) return static_cast<int64_t>(e.tokens.size());
  return 0;
}

int64_t PromptIndex::total_tokens() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += static_cast<int64_t>(e.tokens.size());
  return n;
}

}  // namespace tf
