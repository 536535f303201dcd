#include "check/chat_reply.h"

namespace tf::check {
namespace {

using Json = nlohmann::json;

std::string str_or_empty(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

void take_usage(const Json& body, ChatReply& r) {
  if (!body.contains("usage") || !body["usage"].is_object()) return;
  const Json& u = body["usage"];
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
    r.prompt_tokens = u["prompt_tokens"];
  if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
    r.completion_tokens = u["completion_tokens"];
  if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
    const Json& d = u["prompt_tokens_details"];
    if (d.contains("cached_tokens") && d["cached_tokens"].is_number_integer())
      r.cached_tokens = d["cached_tokens"];
  }
}

const Json* choice0(const Json& body) {
  if (!body.is_object() || !body.contains("choices") || !body["choices"].is_array()) return nullptr;
  for (const Json& c : body["choices"])
    if (c.is_object() && c.value("index", 0) == 0) return &c;
  return nullptr;
}

std::string error_of(const Json& body) {
  if (!body.is_object() || !body.contains("error")) return "";
  const Json& e = body["error"];
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    return e["message"].get<std::string>();
  return e.dump();
}

std::string first_difference(const std::string& what, const std::string& a, const std::string& b) {
  if (a == b) return "";
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return what + " differs at byte " + std::to_string(i) + " (lengths " + std::to_string(a.size()) + " and " +
         std::to_string(b.size()) + ")";
}

}  // namespace

Expected<ChatReply> parse_chat_reply(const Json& body) {
  if (std::string e = error_of(body); !e.empty()) return invalid_argument("the reply is an error: " + e);
  const Json* c = choice0(body);
  if (!c) return invalid_argument("the reply has no choice 0");
  if (!c->contains("message") || !(*c)["message"].is_object())
    return invalid_argument("choice 0 has no message");
  const Json& m = (*c)["message"];
  ChatReply r;
  r.content = str_or_empty(m, "content");
  r.reasoning = str_or_empty(m, "reasoning_content");
  if (r.reasoning.empty()) r.reasoning = str_or_empty(m, "reasoning");
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    for (const Json& tc : m["tool_calls"]) {
      if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
        return invalid_argument("a tool call without a function object");
      r.tool_calls.push_back({str_or_empty(tc, "id"), str_or_empty(tc["function"], "name"),
                              str_or_empty(tc["function"], "arguments")});
    }
  }
  r.finish_reason = str_or_empty(*c, "finish_reason");
  r.token_sha256 = str_or_empty(*c, "token_sha256");
  take_usage(body, r);
  return r;
}

Expected<ChatReply> assemble_chat_stream(const std::vector<Json>& chunks) {
  ChatReply r;
  for (size_t n = 0; n < chunks.size(); ++n) {
    const Json& chunk = chunks[n];
    const std::string where = "chunk " + std::to_string(n);
    if (std::string e = error_of(chunk); !e.empty()) return invalid_argument(where + " is an error: " + e);
    take_usage(chunk, r);
    const Json* c = choice0(chunk);
    if (!c) continue;  // the usage chunk has no choices
    if (std::string f = str_or_empty(*c, "finish_reason"); !f.empty()) r.finish_reason = f;
    if (std::string s = str_or_empty(*c, "token_sha256"); !s.empty()) r.token_sha256 = s;
    if (!c->contains("delta")) continue;
    const Json& d = (*c)["delta"];
    if (!d.is_object()) return invalid_argument(where + ": delta is not an object");
    r.content += str_or_empty(d, "content");
    std::string reasoning = str_or_empty(d, "reasoning_content");
    r.reasoning += reasoning.empty() ? str_or_empty(d, "reasoning") : reasoning;
    if (!d.contains("tool_calls") || d["tool_calls"].is_null()) continue;
    if (!d["tool_calls"].is_array()) return invalid_argument(where + ": delta.tool_calls is not an array");
    for (const Json& tc : d["tool_calls"]) {
      if (!tc.is_object() || !tc.contains("index") || !tc["index"].is_number_integer())
        return invalid_argument(where + ": a tool_calls delta without an integer index");
      const int64_t index = tc["index"];
      if (index < 0 || index > static_cast<int64_t>(r.tool_calls.size()))
        return invalid_argument(where + ": tool call index " + std::to_string(index) + " skips ahead");
      if (index == static_cast<int64_t>(r.tool_calls.size())) r.tool_calls.emplace_back();
      ToolCall& call = r.tool_calls[static_cast<size_t>(index)];
      if (std::string id = str_or_empty(tc, "id"); !id.empty()) {
        if (!call.id.empty() && call.id != id)
          return invalid_argument(where + ": tool call " + std::to_string(index) + " changed its id");
        call.id = id;
      }
      if (tc.contains("function") && tc["function"].is_object()) {
        call.name += str_or_empty(tc["function"], "name");
        call.arguments += str_or_empty(tc["function"], "arguments");
      }
    }
  }
  return r;
}

std::string reply_difference(const ChatReply& a, const ChatReply& b) {
  if (std::string d = first_difference("content", a.content, b.content); !d.empty()) return d;
  if (std::string d = first_difference("reasoning", a.reasoning, b.reasoning); !d.empty()) return d;
  if (a.tool_calls.size() != b.tool_calls.size())
    return "tool calls: " + std::to_string(a.tool_calls.size()) + " vs " +
           std::to_string(b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const std::string which = "tool call " + std::to_string(i);
    if (a.tool_calls[i].name != b.tool_calls[i].name)
      return which + " name: " + a.tool_calls[i].name + " vs " + b.tool_calls[i].name;
    if (std::string d =
            first_difference(which + " arguments", a.tool_calls[i].arguments, b.tool_calls[i].arguments);
        !d.empty())
      return d;
  }
  if (a.finish_reason != b.finish_reason)
    return "finish_reason: " + a.finish_reason + " vs " + b.finish_reason;
  return "";
}

Expected<std::string> completion_text(const Json& body) {
  if (std::string e = error_of(body); !e.empty()) return invalid_argument("the reply is an error: " + e);
  const Json* c = choice0(body);
  if (!c || !c->contains("text") || !(*c)["text"].is_string())
    return invalid_argument("the reply has no choice 0 text");
  return (*c)["text"].get<std::string>();
}

}  // namespace tf::check
