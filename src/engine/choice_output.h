// ChoiceOutput: turns one choice's sampled tokens into the engine's streaming
// events, in this order:
//   ids -> IncrementalDetokenizer (complete UTF-8 only)
//       -> StopStringMatcher (stop strings end the text; never cut a character)
//       -> ReasoningParser (chat: <think> ... </think> vs content)
//       -> GlmToolCallParser (chat with tools: content vs streamed tool_calls)
// Special tokens: with skip_special_tokens they are dropped before the text,
// except the markers the parsers need (<think>, <tool_call>, <arg_key>, ...),
// which the parsers consume. Stop tokens never reach the text.
// Logprobs travel with their token's event even when its text is held back.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/engine_api.h"
#include "engine/token_digest.h"
#include "sampling/sampler.h"
#include "sampling/stop_string_matcher.h"
#include "text/detokenizer.h"
#include "text/reasoning_parser.h"
#include "text/tokenizer.h"
#include "text/tool_call_parser.h"

namespace tf::engine {

struct ChoiceOutputOptions {
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  bool parse_reasoning = false;
  bool starts_in_reasoning = false;  // the prompt ends with an open <think>
  nlohmann::json tools;              // null: no tool-call parsing
  std::string call_id_prefix;        // tool call ids: prefix + index
  bool logprobs = false;
  bool token_ids = false;  // each token's id on its event (GenerationRequest::return_token_ids)
};

class ChoiceOutput {
 public:
  ChoiceOutput(const text::Tokenizer& tokenizer, ChoiceOutputOptions options, int choice);

  // A generated token that is not a stop token. `stopped` turns true once a
  // stop string matched: the choice ends (the text up to it is in the event).
  GenerationEvent add(int32_t token, const SampledToken& sampled, bool& stopped);
  // The stop token that ended the choice: only its logprobs are reported.
  GenerationEvent add_stop_token(int32_t token, const SampledToken& sampled);
  // Flushes everything held back (the choice ended).
  GenerationEvent finish();

  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  // The generated text is inside the reasoning block (parse_reasoning only).
  bool in_reasoning() const { return reasoning_ && reasoning_->in_reasoning(); }
  // The stop string that ended the choice, "" when none did.
  std::string matched_stop() const {
    return stop_index_ >= 0 && static_cast<size_t>(stop_index_) < opt_.stop.size() ? opt_.stop[static_cast<size_t>(stop_index_)] : "";
  }
  bool made_tool_calls() const { return tool_calls_made_ > 0; }
  // The SHA-256 of the tokens added so far (GenerationEvent::token_sha256).
  std::string token_sha256() const { return digest_.hex(); }

 private:
  void route_text(const std::string& text, bool final, GenerationEvent& ev);
  void route_content(const std::string& content, bool final, GenerationEvent& ev);
  // Every generated token, stop token included: its logprobs, its id, the running count.
  void record(int32_t token, const SampledToken& sampled, GenerationEvent& ev);
  void add_logprobs(int32_t token, const SampledToken& sampled, GenerationEvent& ev) const;
  void count_text(const std::string& piece);
  std::string token_text(int32_t token) const;

  const text::Tokenizer& tok_;
  ChoiceOutputOptions opt_;
  int choice_;
  text::IncrementalDetokenizer detok_;
  StopStringMatcher stops_;
  std::optional<ReasoningParser> reasoning_;
  std::optional<GlmToolCallParser> tools_;
  std::unordered_set<int32_t> parser_markers_;
  int64_t reasoning_tokens_ = 0;
  int64_t tokens_ = 0;  // generated tokens added so far (GenerationEvent::tokens_so_far)
  TokenDigest digest_;  // of the same tokens
  size_t tool_calls_made_ = 0;
  bool stopped_ = false;
  int32_t stop_index_ = -1;
  int64_t text_chars_ = 0;  // code points the detokenizer has produced (TokenLogprob::text_offset)
};

}  // namespace tf::engine
