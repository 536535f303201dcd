// POST /v1/responses request (api.md §3): input items, instructions, flat tools and
// text.format are mapped onto an equivalent chat request, so validation, templating
// and sampling are shared with /v1/chat/completions.
#include "server/api_error.h"
#include "server/media_parts.h"
#include "server/openai_requests.h"
#include "server/responses_reasoning.h"

namespace tf::server {

namespace {

Json content_to_chat(const Json& content, const std::string& param, MediaUrlPolicy policy) {
  if (content.is_string()) return content;
  if (!content.is_array()) throw bad_request("'" + param + "' must be a string or an array", param);
  Json parts = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& p = content[i];
    std::string pp = param + "[" + std::to_string(i) + "]";
    if (!p.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    std::string type = json_string(p, "type").value_or("input_text");
    if (type == "input_text" || type == "output_text" || type == "text") {
      auto text = json_string(p, "text");
      if (!text) throw bad_request("'" + pp + ".text' is required", pp + ".text");
      parts.push_back({{"type", "text"}, {"text", *text}});
    } else if (type == "reasoning_text") {
      continue;
    } else if (is_media_part_type(type)) {
      parts.push_back(normalized_media_part(p, type, pp, policy));
    } else {
      throw bad_request("content part type '" + type + "' is not supported (text, images and videos are)",
                        pp + ".type");
    }
  }
  return parts;
}

Json input_to_messages(const Json& input, MediaUrlPolicy policy) {
  Json messages = Json::array();
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array()) throw bad_request("'input' must be a string or a list of items", "input");
  // A reasoning item's text goes to the assistant turn that follows it (its message or function
  // calls); one followed by no assistant item is a turn of its own.
  std::optional<std::string> reasoning;
  auto take_reasoning = [&](Json& assistant) {  // a turn made here, with no reasoning yet
    if (!reasoning) return;
    assistant["reasoning_content"] = *reasoning;
    reasoning.reset();
  };
  auto flush_reasoning = [&] {
    if (!reasoning) return;
    Json turn = {{"role", "assistant"}, {"content", ""}};
    take_reasoning(turn);
    messages.push_back(std::move(turn));
  };
  // Function calls join the assistant turn right before them (the reply they came with).
  auto open_assistant = [&]() -> bool {
    return !messages.empty() && messages.back()["role"] == "assistant" && !reasoning;
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    std::string pp = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
    std::string type = json_string(item, "type").value_or("message");
    if (type == "message") {
      auto role = json_string(item, "role");
      if (!role) throw bad_request("'" + pp + ".role' is required", pp + ".role");
      const Json* content = json_field(item, "content");
      if (!content) throw bad_request("'" + pp + ".content' is required", pp + ".content");
      Json msg = {{"role", *role}, {"content", content_to_chat(*content, pp + ".content", policy)}};
      if (*role == "assistant")
        take_reasoning(msg);
      else
        flush_reasoning();
      messages.push_back(std::move(msg));
    } else if (type == "function_call") {
      auto call_id = json_string(item, "call_id");
      auto name = json_string(item, "name");
      auto args = json_string(item, "arguments");
      if (!call_id || !name || !args)
        throw bad_request("'" + pp + "' function_call needs call_id, name and arguments", pp);
      check_call_arguments(*args, pp + ".arguments");
      Json call = {{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", *args}}}};
      if (open_assistant()) {
        Json& turn = messages.back();
        if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
        turn["tool_calls"].push_back(call);
      } else {
        Json turn = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}};
        take_reasoning(turn);
        messages.push_back(std::move(turn));
      }
    } else if (type == "function_call_output") {
      auto call_id = json_string(item, "call_id");
      const Json* output = json_field(item, "output");
      if (!call_id || !output) throw bad_request("'" + pp + "' function_call_output needs call_id and output", pp);
      flush_reasoning();
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", *call_id},
                          {"content", output->is_string() ? *output : Json(output->dump())}});
    } else if (type == "reasoning") {
      if (auto text = reasoning_item_text(item, pp))
        reasoning = reasoning ? *reasoning + "\n\n" + *text : *text;
    } else {
      throw bad_request("input item type '" + type + "' is not supported", pp + ".type");
    }
  }
  flush_reasoning();
  return messages;
}

// `input` as a list of items (a string is one user message).
Json input_items(const Json& input) {
  if (input.is_string()) return Json::array({{{"type", "message"}, {"role", "user"}, {"content", input}}});
  return input;
}

}  // namespace

ResponsesRequest parse_responses_request(const Json& body, MediaUrlPolicy policy, const Json* previous_items) {
  require_object(body, "body");
  if (json_field(body, "prompt")) throw bad_request("'prompt' templates are not supported", "prompt");
  if (json_bool(body, "background").value_or(false))
    throw bad_request("'background' responses are not supported", "background");
  if (json_field(body, "previous_response_id") && !previous_items)
    throw bad_request("'previous_response_id' is not supported here", "previous_response_id");
  const Json* input = json_field(body, "input");
  if (!input) throw bad_request("'input' is required", "input");
  Json chat = Json::object();
  Json messages = input_to_messages(*input, policy);
  ResponsesRequest req;
  req.input_items = previous_items ? *previous_items : Json::array();
  if (previous_items) {
    // The stored conversation comes first (items the server built and checked when stored);
    // the new input keeps its own indices in error messages.
    Json earlier = input_to_messages(*previous_items, policy);
    messages.insert(messages.begin(), earlier.begin(), earlier.end());
  }
  for (Json& item : input_items(*input)) req.input_items.push_back(std::move(item));
  if (auto instructions = json_string(body, "instructions"))
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", *instructions}});
  for (const char* f :
       {"model", "temperature", "top_p", "top_k", "min_p", "seed", "stream", "parallel_tool_calls",
        "presence_penalty", "frequency_penalty", "repetition_penalty", "stop", "chat_template_kwargs",
        "cache_salt", "priority", "draft", "thinking_budget", "thinking_token_budget"})
    if (body.contains(f)) chat[f] = body[f];
  if (auto mot = json_int(body, "max_output_tokens", 1, int64_t{1} << 40)) chat["max_completion_tokens"] = *mot;
  if (const Json* tools = json_field(body, "tools")) {
    if (!tools->is_array()) throw bad_request("'tools' must be an array", "tools");
    Json nested = Json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      std::string pp = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) throw bad_request("'" + pp + "' must be an object", pp);
      if (json_string(t, "type").value_or("function") != "function")
        throw bad_request("only function tools are supported", pp + ".type");
      Json f = {{"name", t.value("name", Json())}};
      if (t.contains("description")) f["description"] = t["description"];
      if (t.contains("parameters")) f["parameters"] = t["parameters"];
      nested.push_back({{"type", "function"}, {"function", f}});
    }
    // The Responses API accepts an empty list (clients send one when no tool is defined);
    // Chat Completions refuses it (api.md check 41), so it is not passed on.
    if (!nested.empty()) chat["tools"] = nested;
  }
  if (const Json* tc = json_field(body, "tool_choice")) {
    if (tc->is_object() && tc->contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    else
      chat["tool_choice"] = *tc;
  }
  if (const Json* text = json_field(body, "text")) {
    require_object(*text, "text");
    if (const Json* format = json_field(*text, "format")) {
      require_object(*format, "text.format");
      std::string type = json_string(*format, "type").value_or("text");
      if (type == "json_schema") {
        Json js = {{"name", format->value("name", Json())}, {"schema", format->value("schema", Json::object())}};
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
      } else {
        chat["response_format"] = {{"type", type}};
      }
    }
  }
  // include: what OpenAI adds to the response on request: the answer's logprobs, and each
  // reasoning item's text as encrypted_content (responses_reasoning.h); other entries name
  // tools this server does not run.
  bool logprobs = false, sealed_reasoning = false;
  if (const Json* include = json_field(body, "include")) {
    if (!include->is_array()) throw bad_request("'include' must be an array of strings", "include");
    for (const Json& v : *include) {
      if (!v.is_string()) throw bad_request("'include' must be an array of strings", "include");
      logprobs = logprobs || v.get<std::string>() == "message.output_text.logprobs";
      sealed_reasoning = sealed_reasoning || v.get<std::string>() == "reasoning.encrypted_content";
    }
  }
  const std::optional<int64_t> top = json_int(body, "top_logprobs", 0, 20);
  if (logprobs) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = top.value_or(0);
  }
  if (const Json* reasoning = json_field(body, "reasoning")) {
    require_object(*reasoning, "reasoning");
    if (auto effort = json_string(*reasoning, "effort")) chat["reasoning_effort"] = *effort;
  }
  // Moved in last: a growing ordered_json copies its members (their keys are const), and the
  // messages hold the prompt.
  chat["messages"] = std::move(messages);
  static_cast<void>(json_bool(body, "store"));  // a boolean or absent: "no" or {} would have stored it anyway
  req.chat = parse_chat_request(chat, policy);
  req.output_logprobs = logprobs;
  req.sealed_reasoning = sealed_reasoning;
  static_cast<CommonRequest&>(req) = static_cast<const CommonRequest&>(req.chat);
  for (const char* f :
       {"instructions", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "text",
        "reasoning", "max_output_tokens", "previous_response_id", "store", "metadata", "top_logprobs"})
    req.echo[f] = body.contains(f) ? body[f] : Json();
  if (req.echo["tools"].is_null()) req.echo["tools"] = Json::array();
  if (req.echo["tool_choice"].is_null()) req.echo["tool_choice"] = "auto";
  if (req.echo["parallel_tool_calls"].is_null()) req.echo["parallel_tool_calls"] = true;
  if (req.echo["store"].is_null()) req.echo["store"] = true;  // OpenAI's default
  if (req.echo["text"].is_null()) req.echo["text"] = {{"format", {{"type", "text"}}}};
  if (req.echo["metadata"].is_null()) req.echo["metadata"] = Json::object();
  return req;
}

}  // namespace tf::server
