// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens), so Anthropic
// clients (the official SDKs, Claude Code) work against this server as they are.
//
// A Messages request is mapped onto the equivalent chat request, so validation,
// templating, sampling, tools and structured output are the chat endpoint's:
//   system (string or text blocks)       -> a system message
//   user text / tool_result blocks       -> user messages / tool messages, in block order
//   assistant text / thinking / tool_use -> content / reasoning_content / tool_calls
//   a final assistant message            -> continued (Anthropic's prefill)
//   stop_sequences, temperature, top_p, top_k, max_tokens (required)
//   tools {name, description, input_schema} -> function tools; tool_choice auto/any/tool/none
//   thinking enabled (budget_tokens = the reasoning budget) / adaptive / disabled (no thinking)
//   output_config {effort, format: json_schema}
// Replies are Anthropic message objects (thinking, text and tool_use blocks; stop_reason
// end_turn / max_tokens / stop_sequence / tool_use) and its SSE events; errors are
// Anthropic error objects ({"type":"error","error":{"type","message"}}; a full queue is
// 529 overloaded_error). Any `model` name is accepted: Anthropic clients send their own
// model ids, and the reply names the served model.
#pragma once

#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/generation_session.h"
#include "server/openai_requests.h"

namespace tf::server {

struct MessagesRequest {
  ChatRequest chat;  // the equivalent chat request (stream, sampling, tools, ...)
};

// count_tokens: the same body without max_tokens (and nothing to generate).
MessagesRequest parse_messages_request(const Json& body, bool count_tokens = false, MediaUrlPolicy policy = {});

// {"type":"error","error":{"type":..., "message":...}} and the HTTP status Anthropic uses.
Json anthropic_error_json(const ApiError& e);
int anthropic_http_status(const ApiError& e);

// What a reply ran into: max_tokens as asked, or the context window (Anthropic lets
// max_tokens reach past the window and then stops with model_context_window_exceeded).
enum class AnthropicLimit { kMaxTokens, kContextWindow };

// The finished message object (non-streaming reply).
Json anthropic_message_json(const ResponseMeta& meta, const ChoiceState& choice, const UsageTotals& usage,
                            AnthropicLimit limit = AnthropicLimit::kMaxTokens);

// Anthropic SSE: message_start, ping, content_block_start/delta/stop per block,
// message_delta (stop_reason, usage), message_stop; an error event on failure.
class AnthropicStreamFormatter : public StreamFormatter {
 public:
  AnthropicStreamFormatter(ResponseMeta meta, int64_t prompt_tokens, AnthropicLimit limit = AnthropicLimit::kMaxTokens)
      : meta_(std::move(meta)), prompt_tokens_(prompt_tokens), limit_(limit) {}
  std::string start() override;
  std::string on_event(const GenerationEvent& ev, const ChoiceState& state) override;
  std::string on_error(const Status& error) override;
  std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) override;

 private:
  enum class Open { kNone, kThinking, kText, kToolUse };
  std::string open_block(Open kind, const Json& block);
  std::string close_block();
  ResponseMeta meta_;
  int64_t prompt_tokens_;
  AnthropicLimit limit_;
  Open open_ = Open::kNone;
  int index_ = -1;       // the open (or last) content block
  int tool_call_ = -1;   // the engine's index of the open tool_use block
};

}  // namespace tf::server
