// See completion_stream.h.
#include "bench/completion_stream.h"

namespace tf::bench {

using Json = nlohmann::json;

namespace {

std::string string_field(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The message of an OpenAI error object ({"error": {"message": ...}}), else "".
std::string error_message(const Json& j) {
  if (!j.is_object() || !j.contains("error")) return "";
  const Json& e = j["error"];
  std::string m = e.is_string() ? e.get<std::string>() : string_field(e, "message");
  return m.empty() ? e.dump(-1, ' ', false, Json::error_handler_t::replace) : m;
}

}  // namespace

std::string CompletionStreamReader::choice_text(const Json& choice) const {
  if (!choice.is_object()) return "";
  if (!chat_) return string_field(choice, "text");
  const Json* part = nullptr;
  if (choice.contains("delta")) part = &choice["delta"];
  else if (choice.contains("message")) part = &choice["message"];
  if (!part || !part->is_object()) return "";
  std::string text = string_field(*part, "content");
  // Servers send reasoning as reasoning_content, reasoning, or both (same text).
  std::string reasoning = string_field(*part, "reasoning_content");
  text += reasoning.empty() ? string_field(*part, "reasoning") : reasoning;
  auto calls = part->find("tool_calls");
  if (calls != part->end() && calls->is_array())
    for (const Json& c : *calls)
      if (c.is_object() && c.contains("function")) text += string_field(c["function"], "arguments") + string_field(c["function"], "name");
  return text;
}

void CompletionStreamReader::take_usage(const Json& chunk) {
  auto u = chunk.find("usage");
  if (u == chunk.end() || !u->is_object()) return;
  auto ct = u->find("completion_tokens");
  if (ct != u->end() && ct->is_number_integer()) usage_completion_tokens_ = ct->get<int64_t>();
  auto pt = u->find("prompt_tokens");
  if (pt != u->end() && pt->is_number_integer()) usage_prompt_tokens_ = pt->get<int64_t>();
}

void CompletionStreamReader::on_payload(const std::string& payload, double now_s) {
  if (!error_.empty()) return;
  if (payload == "[DONE]") {
    done_ = true;
    return;
  }
  if (done_) {
    error_ = "data after [DONE]";
    return;
  }
  Json j = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "malformed SSE chunk: " + payload.substr(0, 200);
    return;
  }
  if (std::string m = error_message(j); !m.empty()) {
    error_ = "error in stream: " + m;
    return;
  }
  take_usage(j);
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return;
  for (const Json& c : *choices) {
    // One choice per request (n = 1); index 0 is the one measured.
    if (c.is_object() && c.contains("index") && c["index"] != 0) continue;
    if (!choice_text(c).empty()) {
      if (first_token_s_ < 0) first_token_s_ = now_s;
      token_times_s_.push_back(now_s);
    }
    std::string reason = string_field(c, "finish_reason");
    if (!reason.empty()) finish_reason_ = reason;
  }
}

void CompletionStreamReader::on_body(const std::string& body, double now_s) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    error_ = "malformed JSON response: " + body.substr(0, 200);
    return;
  }
  if (std::string m = error_message(j); !m.empty()) {
    error_ = m;
    return;
  }
  take_usage(j);
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) {
    error_ = "response has no choices";
    return;
  }
  const Json& c = (*choices)[0];
  if (!choice_text(c).empty()) {
    first_token_s_ = now_s;
    token_times_s_.push_back(now_s);
  }
  finish_reason_ = string_field(c, "finish_reason");
  done_ = true;
}

void CompletionStreamReader::finish(RequestRecord& record, bool streamed) const {
  record.first_token_s = first_token_s_;
  record.token_times_s = token_times_s_;
  record.finish_reason = finish_reason_;
  if (usage_prompt_tokens_ >= 0) record.prompt_tokens = usage_prompt_tokens_;
  record.output_tokens_from_usage = usage_completion_tokens_ >= 0;
  record.output_tokens = record.output_tokens_from_usage ? usage_completion_tokens_
                                                          : static_cast<int64_t>(token_times_s_.size());
  record.ok = error_.empty() && (done_ || !streamed);
  if (!error_.empty()) record.error = error_;
  else if (streamed && !done_) record.error = "stream ended without [DONE]";
}

}  // namespace tf::bench
