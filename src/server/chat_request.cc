// POST /v1/chat/completions request: messages, tools, tool_choice, reasoning
// controls and templating extras (api.md §1.1-§1.2). Image and video parts are
// normalized (media_parts.h); other media (audio, files) get a 400 rather than being
// silently dropped.
#include <set>

#include "server/api_error.h"
#include "server/media_parts.h"
#include "server/openai_requests.h"

namespace tf::server {

namespace {

// chat_template_kwargs become the template's global variables, a dict the template engine
// searches linearly on every lookup and every insert: 100,000 keys took 40 s of CPU. Real
// templates read a handful (enable_thinking, reasoning_effort, ...).
constexpr size_t kMaxTemplateKwargs = 256;

// The content as the template and the engine read it (image/video parts normalized).
Json validated_content(const Json& content, const std::string& param, bool allow_null, MediaUrlPolicy policy) {
  if (content.is_null()) {
    if (!allow_null) throw bad_request("'" + param + "' must not be null", param);
    return content;
  }
  if (content.is_string()) return content;
  if (!content.is_array()) throw bad_request("'" + param + "' must be a string or an array of content parts", param);
  Json out = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    std::string type = json_string(part, "type").value_or(part.contains("text") ? "text" : "");
    if (type == "text" || type == "input_text" || type == "output_text") {
      if (!json_string(part, "text")) throw bad_request("'" + pp + ".text' is required", pp + ".text");
      out.push_back(part);
    } else if (is_media_part_type(type)) {
      out.push_back(normalized_media_part(part, type, pp, policy));
    } else if (type == "input_audio" || type == "file" || type == "audio_url" || type == "image_embeds" ||
               type == "input_file") {
      throw bad_request("content part type '" + type + "' is not supported (text, images and videos are)",
                        pp + ".type");
    } else {
      throw bad_request("unknown content part type '" + type + "'", pp + ".type");
    }
  }
  return out;
}

void validate_tool_calls(const Json& calls, const std::string& param) {
  if (!calls.is_array()) throw bad_request("'" + param + "' must be an array", param);
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string pp = param + "[" + std::to_string(i) + "]";
    const Json& c = calls[i];
    if (!c.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    const Json* f = json_field(c, "function");
    if (!f || !f->is_object()) throw bad_request("'" + pp + ".function' is required", pp + ".function");
    if (!json_string(*f, "name")) throw bad_request("'" + pp + ".function.name' is required", pp + ".function.name");
    const Json* args = json_field(*f, "arguments");
    if (args && !args->is_string() && !args->is_object())
      throw bad_request("'" + pp + ".function.arguments' must be a JSON string", pp + ".function.arguments");
    if (args && args->is_string()) check_call_arguments(args->get<std::string>(), pp + ".function.arguments");
  }
}

Json validate_tools(const Json& tools) {
  if (!tools.is_array()) throw bad_request("'tools' must be an array", "tools");
  if (tools.empty()) throw bad_request("'tools' must not be an empty array", "tools", "empty_array");
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string pp = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    auto type = json_string(t, "type").value_or("function");
    if (type != "function") throw bad_request("tool type '" + type + "' is not supported", pp + ".type");
    const Json* f = json_field(t, "function");
    if (!f || !f->is_object()) throw bad_request("'" + pp + ".function' is required", pp + ".function");
    auto name = json_string(*f, "name");
    if (!name || name->empty()) throw bad_request("'" + pp + ".function.name' is required", pp + ".function.name");
    json_string(*f, "description");
    const Json* params = json_field(*f, "parameters");
    if (params && !params->is_object())
      throw bad_request("'" + pp + ".function.parameters' must be an object", pp + ".function.parameters");
  }
  return tools;
}

// A string member of message `pp`, with the error naming the full path (messages[i].role).
std::optional<std::string> message_string(const Json& m, const char* name, const std::string& pp) {
  const Json* v = json_field(m, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request("'" + pp + "." + name + "' must be a string", pp + "." + name);
  return v->get<std::string>();
}

}  // namespace

Json validate_messages(const Json& messages, const std::string& param, MediaUrlPolicy policy) {
  if (!messages.is_array()) throw bad_request("'" + param + "' must be an array of messages", param);
  if (messages.empty()) throw bad_request("'" + param + "' must not be empty", param);
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string pp = param + "[" + std::to_string(i) + "]";
    const Json& m = messages[i];
    if (!m.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    auto role = message_string(m, "role", pp);
    if (!role) throw bad_request("'" + pp + ".role' is required", pp + ".role");
    if (!kRoles.count(*role)) throw bad_request("unknown role '" + *role + "'", pp + ".role");
    const Json* tc = json_field(m, "tool_calls");
    if (tc) {
      if (*role != "assistant") throw bad_request("'tool_calls' is only allowed on assistant messages", pp + ".tool_calls");
      validate_tool_calls(*tc, pp + ".tool_calls");
    }
    bool allow_null = *role == "assistant";
    if (!m.contains("content") && !allow_null)
      throw bad_request("'" + pp + ".content' is required", pp + ".content");
    // The message's members in its order, the content checked on the way: copying the message
    // whole and then its content again held the content (up to the whole body) twice more.
    Json msg = Json::object();
    auto& members = static_cast<Json::object_t::Container&>(msg.get_ref<Json::object_t&>());
    members.reserve(m.size());  // no growth: it would copy the members so far (their keys are const)
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "content")
        members.emplace_back(it.key(), validated_content(it.value(), pp + ".content", allow_null, policy));
      else
        members.emplace_back(it.key(), it.value());
    }
    if (*role == "developer") msg["role"] = "system";
    message_string(m, "name", pp);
    // Both spellings of the reasoning field reach the template (api.md §1.1).
    auto rc = message_string(m, "reasoning_content", pp);
    auto r = message_string(m, "reasoning", pp);
    if (!rc && r) msg["reasoning_content"] = *r;
    if (*role == "tool") message_string(m, "tool_call_id", pp);
    out.push_back(std::move(msg));
  }
  return out;
}

ChatRequest parse_chat_request(const Json& body, MediaUrlPolicy policy) {
  require_object(body, "body");
  ChatRequest req;
  for (const char* unsupported : {"audio", "prediction", "web_search_options", "functions", "function_call"})
    if (json_field(body, unsupported))
      throw bad_request(std::string("'") + unsupported + "' is not supported", unsupported);
  if (const Json* mod = json_field(body, "modalities")) {
    if (!mod->is_array()) throw bad_request("'modalities' must be an array", "modalities");
    for (const Json& m : *mod)
      if (!m.is_string() || m.get<std::string>() != "text")
        throw bad_request("only the text modality is supported", "modalities");
  }
  const Json* messages = json_field(body, "messages");
  if (!messages) throw bad_request("'messages' is required", "messages");
  req.chat.messages = validate_messages(*messages, "messages", policy);
  parse_common(body, req, /*chat_logprobs=*/true);
  req.max_tokens = parse_max_tokens(body, "max_completion_tokens", "max_tokens", 1);
  check_min_tokens(req.sampling.min_tokens, req.max_tokens);

  if (const Json* tools = json_field(body, "tools")) req.chat.tools = validate_tools(*tools);
  bool has_tools = !req.chat.tools.is_null();
  req.tool_choice = has_tools ? "auto" : "none";
  if (const Json* tc = json_field(body, "tool_choice")) {
    if (tc->is_string()) {
      std::string c = tc->get<std::string>();
      if (c != "none" && c != "auto" && c != "required")
        throw bad_request("'tool_choice' must be none, auto, required or a function object", "tool_choice");
      if (c != "none" && !has_tools) throw bad_request("'tool_choice' " + c + " requires 'tools'", "tool_choice");
      req.tool_choice = c;
    } else if (tc->is_object()) {
      const Json* f = json_field(*tc, "function");
      auto name = f && f->is_object() ? json_string(*f, "name") : std::nullopt;
      if (!name) throw bad_request("'tool_choice.function.name' is required", "tool_choice.function.name");
      bool found = false;
      if (has_tools)
        for (const Json& t : req.chat.tools) found |= t["function"]["name"] == *name;
      if (!found) throw bad_request("tool_choice names function '" + *name + "' which is not in 'tools'", "tool_choice");
      req.tool_choice = *name;
      req.named_tool_choice = true;
      if (req.structured.kind != StructuredOutput::Kind::kNone)
        throw bad_request("a named 'tool_choice' cannot be combined with structured outputs", "tool_choice");
    } else {
      throw bad_request("'tool_choice' must be a string or an object", "tool_choice");
    }
  }
  req.parallel_tool_calls = json_bool(body, "parallel_tool_calls").value_or(true);

  if (auto effort = json_string(body, "reasoning_effort")) {
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (!kEfforts.count(*effort))
      throw bad_request("'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max",
                        "reasoning_effort");
    req.chat.reasoning_effort = *effort;
  }
  if (const Json* kw = json_field(body, "chat_template_kwargs")) {
    require_object(*kw, "chat_template_kwargs");
    if (kw->size() > kMaxTemplateKwargs)
      throw bad_request(
          "'chat_template_kwargs' has more than " + std::to_string(kMaxTemplateKwargs) + " keys",
          "chat_template_kwargs");
    // The template's own variables come from the request's fields; kwargs may set the others (vLLM
    // lets them replace tools, documents and add_generation_prompt too), but never the messages: the
    // prompt would no longer be the conversation that was checked (its roles, media, tool calls).
    if (kw->contains("messages"))
      throw bad_request(
          "'chat_template_kwargs' may not set 'messages': the request's 'messages' are the conversation",
          "chat_template_kwargs.messages");
    req.chat.chat_template_kwargs = *kw;
  }
  // vLLM: enable_thinking follows the effort unless the kwargs set it.
  Json& kw = req.chat.chat_template_kwargs;
  if (!kw.contains("enable_thinking") && !req.chat.reasoning_effort.empty())
    kw["enable_thinking"] = req.chat.reasoning_effort != "none";
  if (kw.contains("enable_thinking") && kw["enable_thinking"].is_boolean())
    req.thinking_enabled = kw["enable_thinking"].get<bool>();
  else if (kw.contains("thinking") && kw["thinking"].is_boolean())
    req.thinking_enabled = kw["thinking"].get<bool>();
  // thinking_budget (the reference deployment's name) or vLLM's thinking_token_budget.
  req.reasoning_budget = json_int(body, "thinking_budget", 0, int64_t{1} << 40);
  if (!req.reasoning_budget)
    req.reasoning_budget = json_int(body, "thinking_token_budget", 0, int64_t{1} << 40);
  req.include_reasoning = json_bool(body, "include_reasoning").value_or(true);
  req.chat.add_generation_prompt = json_bool(body, "add_generation_prompt").value_or(true);
  req.chat.continue_final_message = json_bool(body, "continue_final_message").value_or(false);
  if (req.chat.add_generation_prompt && req.chat.continue_final_message)
    throw bad_request("'add_generation_prompt' and 'continue_final_message' cannot both be true",
                      "continue_final_message");
  return req;
}

}  // namespace tf::server
