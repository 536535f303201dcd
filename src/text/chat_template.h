// Chat templates: turn an OpenAI-style request (messages, tools, template kwargs) into the prompt
// string the model expects, by rendering the model's Jinja chat template the way transformers'
// apply_chat_template does (jinja_template.h), with the same variables: messages, tools (or None),
// documents (None), add_generation_prompt, the special tokens bos_token/eos_token from
// tokenizer_config.json, and every extra kwarg (enable_thinking, reasoning_effort, ...).
//
// Before rendering, messages are normalised the way vLLM does it for templates:
//  - tool-call `arguments` given as a JSON string (the OpenAI wire format) are parsed into an object,
//    since templates iterate them (`tc.arguments.items()`); a string that is not a JSON object stays;
//    a call without arguments (none, null or blank text) gets an empty object;
//  - an assistant `reasoning` field is copied to `reasoning_content` when that is absent;
//  - a null or missing `content` (a turn of tool calls) is "" (Jinja would print "None");
//  - the `developer` role becomes `system` (api.md: "treat as system").
//
// Thinking switch (GLM-5.3-Flash, docs/decisions.md): the official template always opens `<think>`
// in the generation prompt and knows no "off" level. When the request disables thinking
// (`reasoning_effort: "none"` or `enable_thinking: false`) and the prompt ends with the open think
// tag, the tag is closed in the prompt (`<think></think>`), so the model answers without reasoning.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/jinja_template.h"

namespace tf {

struct ChatTemplateRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null, or an array of tool schemas
  bool add_generation_prompt = true;
  // Extra template variables, e.g. {"enable_thinking": false, "reasoning_effort": "high"}.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

struct ChatPrompt {
  std::string text;
  // The prompt ends inside an open reasoning block: generated text starts as reasoning
  // (give this to ReasoningParser).
  bool reasoning_open = false;
  // Thinking was switched off and the prompt's open think tag was closed here.
  bool thinking_disabled = false;
};

class ChatTemplate {
 public:
  // `tokenizer_config` is tokenizer_config.json (bos_token/eos_token may be strings or
  // {"content": ...} objects); pass an empty object when there is none.
  static Expected<ChatTemplate> create(std::string_view source, const nlohmann::json& tokenizer_config,
                                       std::string name = "chat_template");
  // Reads the template file (and tokenizer_config.json when the path is not empty).
  static Expected<ChatTemplate> load(const std::string& template_path,
                                     const std::string& tokenizer_config_path);

  // Taken by value: a caller that moves its request in (Engine::render_chat) lends its messages'
  // text to the template without another copy of them.
  Expected<ChatPrompt> render(ChatTemplateRequest request, const jinja::RenderOptions& options = {}) const;

  // The context render() passes to the template (exposed for tests and debugging).
  Expected<nlohmann::ordered_json> make_context(ChatTemplateRequest request) const;

  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

  static constexpr const char* kThinkStart = "<think>";
  static constexpr const char* kThinkEnd = "</think>";

 private:
  ChatTemplate(jinja::Template tmpl, std::optional<std::string> bos, std::optional<std::string> eos)
      : template_(std::move(tmpl)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}
  jinja::Template template_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
};

// True when the request asks for no reasoning: reasoning_effort "none" or enable_thinking false.
bool thinking_disabled(const nlohmann::ordered_json& kwargs);

// GLM-5.3-Flash's 36 added special tokens, ids 154820..154855 in order (glm53-checkpoint-facts.md
// §2.2; the first 18 are tokenizer_config.json's extra_special_tokens). The markers the chat
// template writes and the parsers look for (<think>, <tool_call>, <arg_key>, ...) are among them.
struct SpecialToken {
  int32_t id;
  const char* text;
};
const std::vector<SpecialToken>& glm53_special_tokens();
// generation_config.json eos_token_id: <|endoftext|>, <|user|>, <|observation|> (a turn ends by
// opening the next one).
const std::vector<int32_t>& glm53_eos_token_ids();

}  // namespace tf
