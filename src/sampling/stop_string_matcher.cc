// See stop_string_matcher.h for the hold-back rules.
#include "sampling/stop_string_matcher.h"

#include <algorithm>

namespace tf {

namespace {

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // invalid lead or stray continuation: a unit of its own
}

}  // namespace

size_t incomplete_utf8_tail(std::string_view text) {
  // Look back at most 3 bytes for the lead byte of the last sequence.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const char c = text[n - back];
    if (is_continuation(c)) continue;
    const size_t need = sequence_length(static_cast<unsigned char>(c));
    return need > back ? back : 0;
  }
  return 0;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop_str_in_output)
    : stops_(std::move(stops)), include_stop_(include_stop_str_in_output) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const auto& s : stops_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view piece) {
  Result out;
  if (stopped_) {
    out.stopped = true;
    out.stop_index = stop_index_;
    return out;
  }
  pending_.append(piece);

  // Everything emitted so far was checked not to start a stop string, so a
  // match lies entirely inside pending_.
  // The stop string that completes first wins (the order a stream reveals
  // them, so the result does not depend on how the text was split); among
  // those ending at the same byte, the longest (it starts earliest).
  size_t best_end = std::string::npos;
  size_t best_pos = 0;
  int32_t best = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = pending_.find(stops_[i]);
    if (pos == std::string::npos) continue;
    const size_t end = pos + stops_[i].size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      best = static_cast<int32_t>(i);
    }
  }
  if (best >= 0) {
    const size_t end = include_stop_ ? best_end : best_pos;
    out.text = pending_.substr(0, end);
    pending_.clear();
    stopped_ = true;
    stop_index_ = best;
    out.stopped = true;
    out.stop_index = best;
    return out;
  }

  // Longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  const size_t limit = std::min(pending_.size(), max_stop_len_ > 0 ? max_stop_len_ - 1 : 0);
  for (size_t len = limit; len > 0 && hold == 0; --len) {
    const std::string_view suffix = std::string_view(pending_).substr(pending_.size() - len);
    for (const auto& s : stops_) {
      if (s.size() > len && std::string_view(s).substr(0, len) == suffix) {
        hold = len;
        break;
      }
    }
  }
  hold = std::max(hold, incomplete_utf8_tail(pending_));
  size_t cut = pending_.size() - hold;
  // Never end the emitted text inside a character (only possible with
  // malformed input; bounded to one sequence).
  for (int i = 0; i < 3 && cut > 0 && cut < pending_.size() && is_continuation(pending_[cut]); ++i) --cut;
  out.text = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  const size_t tail = incomplete_utf8_tail(out);
  if (tail > 0) {
    out.resize(out.size() - tail);
    out += "\xEF\xBF\xBD";  // U+FFFD
  }
  return out;
}

}  // namespace tf
