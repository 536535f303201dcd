// POST /v1/messages request -> the equivalent chat request (see anthropic_messages.h).
// Every block is checked here, so errors name the Anthropic field (messages[2].content[1]),
// not the chat message it became.
#include <set>

#include "server/anthropic_messages.h"
#include "server/media_parts.h"

namespace tf::server {

namespace {

std::string block_type(const Json& block, const std::string& pp) {
  if (!block.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
  auto type = json_string(block, "type");
  if (!type) throw bad_request("'" + pp + ".type' is required", pp + ".type");
  return *type;
}

std::string required_string(const Json& obj, const char* name, const std::string& pp) {
  auto v = json_string(obj, name);
  if (!v) throw bad_request("'" + pp + "." + name + "' is required and must be a string", pp + "." + name);
  return *v;
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& pp) {
  if (type == "image")
    throw bad_request("image blocks are supported in user messages only, not here", pp + ".type");
  static const std::set<std::string> kMedia = {"document", "search_result", "container_upload"};
  if (kMedia.count(type))
    throw bad_request("content block type '" + type + "' is not supported (text and images are)", pp + ".type");
  throw bad_request("content block type '" + type + "' is not supported here", pp + ".type");
}

// Text of a system prompt or a tool_result: a string or text blocks (joined by newlines).
std::string text_of(const Json& content, const std::string& pp) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_request("'" + pp + "' must be a string or an array of text blocks", pp);
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bp = pp + "[" + std::to_string(j) + "]";
    const std::string type = block_type(content[j], bp);
    if (type != "text") unsupported_block(type, bp);
    if (!out.empty()) out += "\n";
    out += required_string(content[j], "text", bp);
  }
  return out;
}

void user_message(const Json& content, const std::string& pp, Json& messages, MediaUrlPolicy policy) {
  if (content.is_string()) {
    messages.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array() || content.empty())
    throw bad_request("'" + pp + "' must be a string or a non-empty array of content blocks", pp);
  Json parts = Json::array();
  auto flush = [&] {
    if (!parts.empty()) messages.push_back({{"role", "user"}, {"content", parts}});
    parts = Json::array();
  };
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bp = pp + "[" + std::to_string(j) + "]";
    const std::string type = block_type(content[j], bp);
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", required_string(content[j], "text", bp)}});
    } else if (type == "image") {
      parts.push_back(anthropic_image_part(content[j], bp, policy));
    } else if (type == "tool_result") {
      flush();  // blocks keep their order
      const std::string id = required_string(content[j], "tool_use_id", bp);
      const Json* c = json_field(content[j], "content");
      std::string text = c ? text_of(*c, bp + ".content") : "";
      if (json_bool(content[j], "is_error").value_or(false)) text = "Error: " + text;
      messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", text}});
    } else {
      unsupported_block(type, bp);
    }
  }
  flush();
}

void assistant_message(const Json& content, const std::string& pp, Json& messages) {
  Json msg = {{"role", "assistant"}};
  if (content.is_string()) {
    msg["content"] = content;
    messages.push_back(msg);
    return;
  }
  if (!content.is_array()) throw bad_request("'" + pp + "' must be a string or an array of content blocks", pp);
  std::string text, reasoning;
  Json calls = Json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bp = pp + "[" + std::to_string(j) + "]";
    const std::string type = block_type(content[j], bp);
    if (type == "text") {
      text += required_string(content[j], "text", bp);
    } else if (type == "thinking") {
      reasoning += required_string(content[j], "thinking", bp);
    } else if (type == "redacted_thinking") {
      continue;  // opaque to us
    } else if (type == "tool_use") {
      const Json* input = json_field(content[j], "input");
      if (!input || !input->is_object()) throw bad_request("'" + bp + ".input' must be an object", bp + ".input");
      calls.push_back({{"id", required_string(content[j], "id", bp)},
                       {"type", "function"},
                       {"function", {{"name", required_string(content[j], "name", bp)}, {"arguments", *input}}}});
    } else {
      unsupported_block(type, bp);
    }
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = calls;
  messages.push_back(msg);
}

Json tools_to_chat(const Json& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string pp = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    const std::string type = json_string(t, "type").value_or("custom");
    if (type != "custom") throw bad_request("server tool '" + type + "' is not supported; define it as a custom tool", pp + ".type");
    const std::string name = required_string(t, "name", pp);
    const Json* schema = json_field(t, "input_schema");
    if (!schema || !schema->is_object()) throw bad_request("'" + pp + ".input_schema' must be an object", pp + ".input_schema");
    Json f = {{"name", name}, {"parameters", *schema}};
    if (auto d = json_string(t, "description")) f["description"] = *d;
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

void tool_choice_to_chat(const Json& tc, Json& chat) {
  require_object(tc, "tool_choice");
  const std::string type = json_string(tc, "type").value_or("");
  if (type == "auto") chat["tool_choice"] = "auto";
  else if (type == "any") chat["tool_choice"] = "required";
  else if (type == "none") chat["tool_choice"] = "none";
  else if (type == "tool") chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", required_string(tc, "name", "tool_choice")}}}};
  else throw bad_request("'tool_choice.type' must be auto, any, tool or none", "tool_choice.type");
  if (json_bool(tc, "disable_parallel_tool_use").value_or(false)) chat["parallel_tool_calls"] = false;
}

void thinking_to_chat(const Json& thinking, Json& chat) {
  require_object(thinking, "thinking");
  const std::string type = json_string(thinking, "type").value_or("");
  if (type == "disabled") {
    chat["reasoning_effort"] = "none";
  } else if (type == "enabled") {
    auto budget = json_int(thinking, "budget_tokens", 0, int64_t{1} << 40);
    if (!budget) throw bad_request("'thinking.budget_tokens' is required with type enabled", "thinking.budget_tokens");
    chat["thinking_budget"] = *budget;
  } else if (type != "adaptive" && type != "between_tools") {
    throw bad_request("'thinking.type' must be enabled, adaptive or disabled", "thinking.type");
  }
}

void output_config_to_chat(const Json& oc, Json& chat) {
  require_object(oc, "output_config");
  if (auto effort = json_string(oc, "effort")) chat["reasoning_effort"] = *effort;
  if (const Json* format = json_field(oc, "format")) {
    require_object(*format, "output_config.format");
    if (json_string(*format, "type").value_or("") != "json_schema")
      throw bad_request("'output_config.format.type' must be json_schema", "output_config.format.type");
    const Json* schema = json_field(*format, "schema");
    if (!schema || !schema->is_object())
      throw bad_request("'output_config.format.schema' must be an object", "output_config.format.schema");
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
}

}  // namespace

MessagesRequest parse_messages_request(const Json& body, bool count_tokens, MediaUrlPolicy policy) {
  require_object(body, "body");
  const Json* messages = json_field(body, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    throw bad_request("'messages' is required and must be a non-empty array", "messages");
  Json chat_messages = Json::array();
  if (const Json* system = json_field(body, "system"))
    chat_messages.push_back({{"role", "system"}, {"content", text_of(*system, "system")}});
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string pp = "messages[" + std::to_string(i) + "]";
    const Json& m = (*messages)[i];
    if (!m.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    const std::string role = required_string(m, "role", pp);
    const Json* content = json_field(m, "content");
    if (!content) throw bad_request("'" + pp + ".content' is required", pp + ".content");
    if (role == "user") user_message(*content, pp + ".content", chat_messages, policy);
    else if (role == "assistant") assistant_message(*content, pp + ".content", chat_messages);
    else if (role == "system") chat_messages.push_back({{"role", "system"}, {"content", text_of(*content, pp + ".content")}});
    else throw bad_request("'" + pp + ".role' must be user or assistant", pp + ".role");
  }
  Json chat = Json::object();  // the messages go in last (below)
  // A last assistant message is a prefill: the reply continues it.
  if ((*messages).back().value("role", "") == "assistant") {
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  if (!count_tokens) {
    auto max_tokens = json_int(body, "max_tokens", 1, int64_t{1} << 40);
    if (!max_tokens) throw bad_request("'max_tokens' is required", "max_tokens");
    chat["max_tokens"] = *max_tokens;
  }
  for (const char* f : {"model", "temperature", "top_p", "top_k", "stream"})
    if (body.contains(f)) chat[f] = body[f];
  if (const Json* stops = json_field(body, "stop_sequences")) chat["stop"] = *stops;
  if (const Json* tools = json_field(body, "tools")) {
    if (!tools->empty()) chat["tools"] = tools_to_chat(*tools);
  }
  if (const Json* tc = json_field(body, "tool_choice")) tool_choice_to_chat(*tc, chat);
  // auto / none without tools mean "no tool call": nothing for the chat request to check.
  if (chat.contains("tool_choice") && !chat.contains("tools") && chat["tool_choice"].is_string() &&
      chat["tool_choice"] != "required")
    chat.erase("tool_choice");
  if (const Json* thinking = json_field(body, "thinking")) thinking_to_chat(*thinking, chat);
  if (const Json* oc = json_field(body, "output_config")) output_config_to_chat(*oc, chat);
  // Moved in last: a growing ordered_json copies its members (their keys are const), and the
  // messages hold the prompt.
  chat["messages"] = std::move(chat_messages);
  MessagesRequest req;
  req.chat = parse_chat_request(chat, policy);
  return req;
}

}  // namespace tf::server
