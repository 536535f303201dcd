// Finds a reply that has fallen into a loop: its tokens so far end in `min_count` exact
// copies of one block of `min_pattern`..`max_pattern` tokens (vLLM's repetition_detection:
// tail[-p:] == tail[-2p:-p] == ... for min_count copies), covering at least `min_tokens`.
//
// Checked after every token in O(max_pattern): for each block length p the detector keeps
// how many of the last tokens equal the token p before them; the tail is c copies of a
// p-block exactly when that run reaches (c - 1) * p. So a verify step's several tokens, a
// long reply and a large max_pattern cost the same per token, and nothing is searched again.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"

namespace tf {

struct RepetitionRule {
  int32_t min_pattern = 1;                      // vLLM's min_pattern_size (0 means 1)
  int32_t max_pattern = 0;                      // max_pattern_size; 0: off
  int32_t min_count = 0;                        // copies of the block (>= 2 to be on)
  int64_t min_tokens = 0;                       // and the copies cover at least this many tokens
  static constexpr int32_t kMaxPattern = 4096;  // the per-token cost is one compare per length

  bool enabled() const { return max_pattern > 0 && min_count >= 2 && min_pattern <= max_pattern; }
  // Ranges a request may set (the server names the field in its 400).
  [[nodiscard]] Status validate() const;
};

struct Repetition {
  int32_t pattern = 0;  // the block's length in tokens (the shortest that matched)
  int64_t tokens = 0;   // tokens of the periodic tail (at least min_count copies of the block)
};

class RepetitionDetector {
 public:
  explicit RepetitionDetector(const RepetitionRule& rule);

  // The next token; the loop when the tokens so far now end in one.
  std::optional<Repetition> push(int32_t token);
  int64_t pushed() const { return pushed_; }

 private:
  RepetitionRule rule_;
  std::vector<int32_t> recent_;  // the last max_pattern tokens, a ring stored twice over
  std::vector<int32_t> run_;     // [p - min_pattern]: trailing tokens equal to the one p before
  std::vector<int32_t> need_;    // [p - min_pattern]: the run that makes a loop of p-blocks
  int64_t pushed_ = 0;
};

}  // namespace tf
