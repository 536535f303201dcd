// PromptIndex: which kept prompt states a new prompt can start from (prompt reuse).
//
// The engine keeps the model state of some prompts' first L tokens (a kept prompt:
// L a whole number of prefill chunks, so that a reply resumed from it is bit for bit
// the reply of a fresh run, whose chunks end there too). This index holds their token
// ids only and answers, for a new prompt: the longest kept prompt it starts with
// (resume from there), and how far it agrees with any kept prompt (a place worth
// keeping: several prompts share it, e.g. a system prompt). Least recently used
// entries are evicted first. Matching is exact, token by token (no hash can collide);
// a linear scan is enough for the few dozen entries the memory budget allows.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tf {

class PromptIndex {
 public:
  struct Hit {
    uint64_t id = 0;
    int64_t tokens = 0;  // the kept prompt's length: tokens [0, tokens) of the prompt
  };

  // The longest kept prompt that is a prefix of prompt[0, limit); marks it used.
  std::optional<Hit> longest_prefix(std::span<const int32_t> prompt, int64_t limit);
  // The longest run of leading tokens `prompt` shares with any kept prompt.
  int64_t shared_prefix(std::span<const int32_t> prompt) const;
  // A kept prompt with exactly these tokens (marked used when found).
  std::optional<uint64_t> find(std::span<const int32_t> tokens);

  void add(uint64_t id, std::vector<int32_t> tokens);
  void remove(uint64_t id);
  // The entry to evict first (none when empty).
  std::optional<uint64_t> least_recent() const;
  size_t size() const { return entries_.size(); }
  int64_t tokens(uint64_t id) const;  // 0 when unknown
  int64_t total_tokens() const;

 private:
  struct Entry {
    uint64_t id = 0;
    std::vector<int32_t> tokens;
    uint64_t last_use = 0;
  };
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace tf
