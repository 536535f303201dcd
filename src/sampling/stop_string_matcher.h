// Incremental stop-string matching on detokenized output text.
//
// Text arrives in pieces (one or more tokens' worth). feed() returns the part
// that is safe to show now:
// - a stop string may span pieces, so a suffix that is a prefix of some stop
//   string is held back until the next piece decides it;
// - an incomplete multi-byte UTF-8 sequence at the end is held back too, and
//   the emitted text never ends inside a character;
// - on a match, the text before the stop string is emitted (and the stop
//   string itself when include_stop_str_in_output), and the matcher stops:
//   later pieces are ignored.
// When several stop strings match, the one that completes first in the text
// wins (then the longest, then the first listed), so the result never depends
// on how the text was split into pieces; vLLM checks them in list order
// instead, which can cut later than the first visible stop string.
// Only generated text is searched, never the prompt (as in vLLM/OpenAI).
// flush() releases what is held when generation ends for another reason;
// an incomplete UTF-8 tail becomes U+FFFD, as a lenient decoder would show it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;         // safe to emit now
    bool stopped = false;     // a stop string matched (now or earlier)
    int32_t stop_index = -1;  // which one, in the order given
  };

  StopStringMatcher(std::vector<std::string> stops, bool include_stop_str_in_output);

  [[nodiscard]] Result feed(std::string_view piece);
  [[nodiscard]] std::string flush();

  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_;
  size_t max_stop_len_ = 0;
  std::string pending_;  // not yet emitted
  bool stopped_ = false;
  int32_t stop_index_ = -1;
};

// Bytes at the end of `text` that begin a UTF-8 sequence not yet complete
// (0..3). A stray continuation byte or an invalid lead counts as complete.
[[nodiscard]] size_t incomplete_utf8_tail(std::string_view text);

}  // namespace tf
