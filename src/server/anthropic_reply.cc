// Anthropic replies: message objects, SSE events and error objects (see anthropic_messages.h).
#include "server/anthropic_messages.h"
#include "text/json_parse.h"

namespace tf::server {

namespace {

const char* stop_reason(const ChoiceState& c, AnthropicLimit limit) {
  switch (c.finish_reason) {
    case FinishReason::kLength: return limit == AnthropicLimit::kContextWindow ? "model_context_window_exceeded" : "max_tokens";
    case FinishReason::kToolCalls: return "tool_use";
    // A forced call (tool_choice tool) ends with "stop" on the OpenAI side; Anthropic says tool_use.
    case FinishReason::kStop:
      return !c.tool_calls.empty() ? "tool_use" : c.stop_string.empty() ? "end_turn" : "stop_sequence";
    case FinishReason::kAbort:
    case FinishReason::kRepetition:
      break;
  }
  return "end_turn";
}

Json stop_sequence(const ChoiceState& c) {
  return c.finish_reason == FinishReason::kStop && !c.stop_string.empty() ? Json(c.stop_string) : Json();
}

// Anthropic counts cache reads apart from input_tokens (their sum is the prompt).
Json usage_json(const UsageTotals& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"output_tokens", u.completion_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens_details", {{"thinking_tokens", u.reasoning_tokens}}}};
}

// A tool call's arguments (a JSON text from the tool-call parser) as tool_use.input.
Json tool_input(const std::string& arguments) {
  Expected<Json> input = text::parse_json(arguments.empty() ? "{}" : arguments);
  return input && input->is_object() ? std::move(*input) : Json::object();
}

Json message_shell(const ResponseMeta& meta) {
  return {{"id", meta.id},           {"type", "message"},       {"role", "assistant"},
          {"model", meta.model},     {"content", Json::array()}, {"stop_reason", nullptr},
          {"stop_sequence", nullptr}};
}

}  // namespace

int anthropic_http_status(const ApiError& e) {
  // A full queue or a stopping server is Anthropic's "overloaded" (clients retry it).
  return e.http_status() == 429 || e.http_status() == 503 ? 529 : e.http_status();
}

Json anthropic_error_json(const ApiError& e) {
  const int status = anthropic_http_status(e);
  const char* type = status == 400 || status == 499 ? "invalid_request_error"
                     : status == 401                ? "authentication_error"
                     : status == 403                ? "permission_error"
                     : status == 404                ? "not_found_error"
                     : status == 413                ? "request_too_large"
                     : status == 529                ? "overloaded_error"
                                                    : "api_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
}

Json anthropic_message_json(const ResponseMeta& meta, const ChoiceState& c, const UsageTotals& usage,
                            AnthropicLimit limit) {
  Json m = message_shell(meta);
  if (!c.reasoning.empty()) m["content"].push_back({{"type", "thinking"}, {"thinking", c.reasoning}, {"signature", ""}});
  if (!c.content.empty()) m["content"].push_back({{"type", "text"}, {"text", c.content}});
  for (const ToolCallState& t : c.tool_calls)
    m["content"].push_back({{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", tool_input(t.arguments)}});
  m["stop_reason"] = stop_reason(c, limit);
  m["stop_sequence"] = stop_sequence(c);
  m["usage"] = usage_json(usage);
  return m;
}

// ---- streaming ----

std::string AnthropicStreamFormatter::start() {
  Json m = message_shell(meta_);
  m["usage"] = usage_json({prompt_tokens_, 0, 0, 0});
  return sse_event("message_start", {{"type", "message_start"}, {"message", m}}) +
         sse_event("ping", {{"type", "ping"}});
}

std::string AnthropicStreamFormatter::close_block() {
  if (open_ == Open::kNone) return "";
  open_ = Open::kNone;
  return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicStreamFormatter::open_block(Open kind, const Json& block) {
  std::string out = close_block();
  open_ = kind;
  ++index_;
  return out + sse_event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
}

std::string AnthropicStreamFormatter::on_event(const GenerationEvent& ev, const ChoiceState&) {
  if (ev.kind != GenerationEvent::Kind::kDelta || ev.choice != 0) return "";
  auto delta = [this](const Json& d) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  };
  std::string out;
  if (!ev.reasoning.empty()) {
    if (open_ != Open::kThinking) out += open_block(Open::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    out += delta({{"type", "thinking_delta"}, {"thinking", ev.reasoning}});
  }
  if (!ev.content.empty()) {
    if (open_ != Open::kText) out += open_block(Open::kText, {{"type", "text"}, {"text", ""}});
    out += delta({{"type", "text_delta"}, {"text", ev.content}});
  }
  for (const ToolCallDelta& t : ev.tool_calls) {
    if (open_ != Open::kToolUse || t.index != tool_call_) {
      tool_call_ = t.index;
      out += open_block(Open::kToolUse, {{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", Json::object()}});
    }
    if (!t.arguments.empty()) out += delta({{"type", "input_json_delta"}, {"partial_json", t.arguments}});
  }
  return out;
}

std::string AnthropicStreamFormatter::on_error(const Status& error) {
  return close_block() + sse_event("error", anthropic_error_json(api_error_from_status(error)));
}

std::string AnthropicStreamFormatter::on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) {
  std::string out = close_block();
  const ChoiceState done;
  const ChoiceState& c = choices.empty() ? done : choices[0];
  out += sse_event("message_delta", {{"type", "message_delta"},
                                     {"delta", {{"stop_reason", stop_reason(c, limit_)}, {"stop_sequence", stop_sequence(c)}}},
                                     {"usage", usage_json(usage)}});
  return out + sse_event("message_stop", {{"type", "message_stop"}});
}

}  // namespace tf::server
