// Splits generated text into reasoning and visible content at `<think>` / `</think>`, incrementally,
// for GLM-style models (docs: /work/shared/spec/api.md §6, "Reasoning parser"):
//  - when the prompt already opened `<think>` (ChatPrompt::reasoning_open), output starts as
//    reasoning; a repeated leading `<think>` is dropped;
//  - otherwise output is content, unless it starts (after optional whitespace) with `<think>`;
//  - `</think>` ends reasoning (the tag itself is dropped); so does `<tool_call>`, which is kept and
//    passed on as content for the tool-call parser (a call emitted before `</think>` must not be
//    swallowed as reasoning);
//  - a possible partial tag at the end of a delta is held back until the next delta resolves it,
//    and so is an incomplete UTF-8 sequence, so that the result is the same however the text is
//    split into deltas (one token, many tokens, speculative bursts).
// finish() flushes what was held back. parse() is the non-streaming form (feed + finish).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tf {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

struct ReasoningResult {
  std::optional<std::string> reasoning;  // nullopt when there was none
  std::optional<std::string> content;    // nullopt when empty or only whitespace
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning, std::string start_tag = "<think>",
                           std::string end_tag = "</think>", std::string tool_call_tag = "<tool_call>");

  ReasoningDelta feed(std::string_view text);
  ReasoningDelta finish();
  bool in_reasoning() const { return state_ == State::kReasoning || state_ == State::kReasoningStart; }
  // True once reasoning has ended (or never started); later text is all content.
  bool reasoning_ended() const { return state_ == State::kContent; }

  static ReasoningResult parse(std::string_view text, bool starts_in_reasoning);

 private:
  enum class State { kMaybeStart, kReasoningStart, kReasoning, kContent };
  void process(ReasoningDelta& out, bool final);

  State state_;
  std::string start_tag_, end_tag_, tool_call_tag_;
  std::string pending_;  // text not yet routed
};

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag);
// Length of an incomplete UTF-8 sequence at the end of `text` (0 when it ends on a boundary).
size_t incomplete_utf8_suffix(std::string_view text);

}  // namespace tf
