// Incremental reasoning/content splitter (see reasoning_parser.h).
#include "text/reasoning_parser.h"

#include <algorithm>

namespace tf {

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  size_t max = std::min(text.size(), tag.size() - 1);
  for (size_t len = max; len > 0; --len) {
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  }
  return 0;
}

size_t incomplete_utf8_suffix(std::string_view text) {
  // Walk back over at most 3 continuation bytes to the lead byte and check its declared length.
  size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

ReasoningParser::ReasoningParser(bool starts_in_reasoning, std::string start_tag, std::string end_tag,
                                 std::string tool_call_tag)
    : state_(starts_in_reasoning ? State::kReasoningStart : State::kMaybeStart),
      start_tag_(std::move(start_tag)),
      end_tag_(std::move(end_tag)),
      tool_call_tag_(std::move(tool_call_tag)) {}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  pending_.append(text);
  ReasoningDelta out;
  process(out, false);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  process(out, true);
  return out;
}

static bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

void ReasoningParser::process(ReasoningDelta& out, bool final) {
  while (true) {
    switch (state_) {
      case State::kMaybeStart: {
        size_t i = 0;
        while (i < pending_.size() &&
               (pending_[i] == ' ' || pending_[i] == '\n' || pending_[i] == '\t' || pending_[i] == '\r'))
          ++i;
        std::string_view rest = std::string_view(pending_).substr(i);
        if (starts_with(rest, start_tag_)) {
          pending_.erase(0, i + start_tag_.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && starts_with(start_tag_, rest)) return;  // undecided: whitespace or a partial tag
        state_ = State::kContent;
        continue;
      }
      case State::kReasoningStart: {
        if (starts_with(pending_, start_tag_)) {
          pending_.erase(0, start_tag_.size());
          state_ = State::kReasoning;
          continue;
        }
        if (!final && starts_with(start_tag_, pending_)) return;
        state_ = State::kReasoning;
        continue;
      }
      case State::kReasoning: {
        size_t end = pending_.find(end_tag_);
        size_t call = tool_call_tag_.empty() ? std::string::npos : pending_.find(tool_call_tag_);
        if (end != std::string::npos && (call == std::string::npos || end < call)) {
          out.reasoning.append(pending_, 0, end);
          pending_.erase(0, end + end_tag_.size());
          state_ = State::kContent;
          continue;
        }
        if (call != std::string::npos) {
          out.reasoning.append(pending_, 0, call);
          pending_.erase(0, call);  // the tool-call tag stays, as content
          state_ = State::kContent;
          continue;
        }
        size_t hold = 0;
        if (!final) {
          hold = partial_tag_suffix(pending_, end_tag_);
          if (!tool_call_tag_.empty()) hold = std::max(hold, partial_tag_suffix(pending_, tool_call_tag_));
          hold = std::max(hold, incomplete_utf8_suffix(pending_));
        }
        out.reasoning.append(pending_, 0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      case State::kContent: {
        size_t hold = final ? 0 : incomplete_utf8_suffix(pending_);
        out.content.append(pending_, 0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
    }
  }
}

ReasoningResult ReasoningParser::parse(std::string_view text, bool starts_in_reasoning) {
  ReasoningParser parser(starts_in_reasoning);
  ReasoningDelta a = parser.feed(text);
  ReasoningDelta b = parser.finish();
  ReasoningResult result;
  std::string reasoning = a.reasoning + b.reasoning;
  std::string content = a.content + b.content;
  if (!reasoning.empty()) result.reasoning = std::move(reasoning);
  bool blank = std::all_of(content.begin(), content.end(),
                           [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; });
  if (!blank) result.content = std::move(content);
  return result;
}

}  // namespace tf
