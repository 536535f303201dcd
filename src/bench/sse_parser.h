// Incremental parser of a text/event-stream body, fed as bytes arrive.
//
// Design: the HTTP client hands over whatever the socket delivered (half a line,
// several events); the parser keeps the unfinished tail and returns the `data:`
// payload of each complete event in order. Multi-line data joins with "\n" as the
// SSE rules say; `event:`, `id:` and comment lines are ignored; CRLF and LF both
// end lines. A bounded buffer keeps a hostile server from growing it without end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tf::bench {

class SseParser {
 public:
  // Longest unfinished line kept; longer input sets overflowed() and is dropped.
  static constexpr size_t kMaxLine = size_t{64} << 20;

  // The data payloads of the events that `bytes` completed.
  std::vector<std::string> feed(std::string_view bytes);
  // Payload of an event left without its blank line at the end of the body.
  std::vector<std::string> finish();
  bool overflowed() const { return overflowed_; }

 private:
  void take_line(std::string_view line, std::vector<std::string>& out);

  std::string pending_;    // bytes after the last line end
  std::string data_;       // data lines of the event being read
  bool has_data_ = false;
  bool overflowed_ = false;
};

}  // namespace tf::bench
