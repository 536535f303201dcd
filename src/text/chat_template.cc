// Chat-template rendering with transformers' variables (see chat_template.h).
#include "text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/json_parse.h"

namespace tf {
namespace {

using nlohmann::ordered_json;

Expected<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> token_string(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

std::string_view rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && (s[e - 1] == ' ' || s[e - 1] == '\n' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(0, e);
}

// vLLM-style normalisation of one message (see chat_template.h).
Status normalise_message(ordered_json& m, size_t index) {
  if (!m.is_object()) return invalid_argument("messages[" + std::to_string(index) + "]: must be an object");
  if (m.contains("role") && m["role"] == "developer") m["role"] = "system";
  // No content (null, as OpenAI's clients send a turn of tool calls, or none) is empty text, as
  // vLLM's message parsing makes it: Jinja would print a null as "None" into the prompt.
  // Set before reasoning_content is added: the key order of tests/tools/render_templates.py, which
  // a template printing a whole message (tojson) shows.
  if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
  if (m.contains("reasoning") && !m.contains("reasoning_content") && m["reasoning"].is_string())
    m["reasoning_content"] = m["reasoning"];
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    for (auto& tc : m["tool_calls"]) {
      ordered_json* fn =
          tc.is_object() && tc.contains("function") && tc["function"].is_object() ? &tc["function"] : &tc;
      if (!fn->is_object()) continue;
      // A call without arguments (none, null or blank text, as clients store no-argument calls)
      // renders as an empty object, as vLLM does: templates iterate them.
      auto args = fn->find("arguments");
      const bool blank = args == fn->end() || args->is_null() ||
                         (args->is_string() && args->get_ref<const std::string&>().find_first_not_of(
                                                   " \t\r\n") == std::string::npos);
      if (blank && fn != &tc) {
        (*fn)["arguments"] = ordered_json::object();
        continue;
      }
      if (args == fn->end() || !args->is_string()) continue;
      // Bounded: the arguments are client text, and rendering recurses into them.
      Expected<ordered_json> parsed = text::parse_json(args->get<std::string>());
      if (parsed && parsed->is_object()) *args = std::move(*parsed);
    }
  }
  return Status::ok();
}

}  // namespace

bool thinking_disabled(const ordered_json& kwargs) {
  if (!kwargs.is_object()) return false;
  auto effort = kwargs.find("reasoning_effort");
  if (effort != kwargs.end() && effort->is_string() && effort->get<std::string>() == "none") return true;
  auto enable = kwargs.find("enable_thinking");
  return enable != kwargs.end() && enable->is_boolean() && !enable->get<bool>();
}

Expected<ChatTemplate> ChatTemplate::create(std::string_view source, const nlohmann::json& tokenizer_config,
                                            std::string name) {
  jinja::TemplateOptions options;
  options.name = std::move(name);
  TF_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::parse(source, options));
  // A template that fails to load names its whole path (the operator's log); one that fails on a
  // request names only its file, since the message goes to the client, who need not learn our folders.
  tmpl.rename(std::filesystem::path(tmpl.options().name).filename().string());
  return ChatTemplate(std::move(tmpl), token_string(tokenizer_config, "bos_token"),
                      token_string(tokenizer_config, "eos_token"));
}

Expected<ChatTemplate> ChatTemplate::load(const std::string& template_path,
                                          const std::string& tokenizer_config_path) {
  TF_ASSIGN_OR_RETURN(std::string source, read_text_file(template_path));
  nlohmann::json config = nlohmann::json::object();
  if (!tokenizer_config_path.empty()) {
    TF_ASSIGN_OR_RETURN(std::string text, read_text_file(tokenizer_config_path));
    config = nlohmann::json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return invalid_argument(tokenizer_config_path + ": not a JSON object");
  }
  return create(source, config, template_path);
}

Expected<ordered_json> ChatTemplate::make_context(ChatTemplateRequest request) const {
  if (!request.messages.is_array()) return invalid_argument("messages: must be an array");
  if (!request.tools.is_null() && !request.tools.is_array())
    return invalid_argument("tools: must be an array or null");
  if (!request.kwargs.is_object()) return invalid_argument("chat template kwargs: must be an object");
  ordered_json& messages = request.messages;
  for (size_t i = 0; i < messages.size(); ++i) TF_RETURN_IF_ERROR(normalise_message(messages[i], i));
  // Same variables, in the same order, as transformers' render call. Room for all of them first:
  // a growing ordered_json copies its members (const keys), the messages with them.
  ordered_json context = ordered_json::object();
  context.get_ref<ordered_json::object_t&>().reserve(6 + request.kwargs.size());
  context["messages"] = std::move(messages);
  context["tools"] = std::move(request.tools);
  context["documents"] = nullptr;
  context["add_generation_prompt"] = request.add_generation_prompt;
  if (bos_token_) context["bos_token"] = *bos_token_;
  if (eos_token_) context["eos_token"] = *eos_token_;
  for (auto it = request.kwargs.begin(); it != request.kwargs.end(); ++it) context[it.key()] = it.value();
  return context;
}

Expected<ChatPrompt> ChatTemplate::render(ChatTemplateRequest request,
                                          const jinja::RenderOptions& options) const {
  const bool add_generation_prompt = request.add_generation_prompt;
  const bool no_thinking = thinking_disabled(request.kwargs);
  TF_ASSIGN_OR_RETURN(ordered_json context, make_context(std::move(request)));
  TF_ASSIGN_OR_RETURN(std::string text, template_.render(std::move(context), options));
  ChatPrompt prompt;
  prompt.text = std::move(text);
  if (add_generation_prompt && ends_with(rstrip(prompt.text), kThinkStart) && no_thinking) {
    prompt.text += kThinkEnd;
    prompt.thinking_disabled = true;
  }
  prompt.reasoning_open = ends_with(rstrip(prompt.text), kThinkStart);
  return prompt;
}

const std::vector<SpecialToken>& glm53_special_tokens() {
  static const std::vector<SpecialToken> tokens = [] {
    const char* texts[] = {"<|endoftext|>",
                           "[MASK]",
                           "[gMASK]",
                           "[sMASK]",
                           "<sop>",
                           "<eop>",
                           "<|system|>",
                           "<|user|>",
                           "<|assistant|>",
                           "<|observation|>",
                           "<|begin_of_image|>",
                           "<|end_of_image|>",
                           "<|begin_of_video|>",
                           "<|end_of_video|>",
                           "<|begin_of_audio|>",
                           "<|end_of_audio|>",
                           "<|begin_of_transcription|>",
                           "<|end_of_transcription|>",
                           "<|code_prefix|>",
                           "<|code_middle|>",
                           "<|code_suffix|>",
                           "<think>",
                           "</think>",
                           "<tool_call>",
                           "</tool_call>",
                           "<tool_response>",
                           "</tool_response>",
                           "<arg_key>",
                           "</arg_key>",
                           "<arg_value>",
                           "</arg_value>",
                           "/nothink",
                           "<|begin_of_box|>",
                           "<|end_of_box|>",
                           "<|image|>",
                           "<|video|>"};
    std::vector<SpecialToken> out;
    int32_t id = 154820;
    for (const char* t : texts) out.push_back(SpecialToken{id++, t});
    return out;
  }();
  return tokens;
}

const std::vector<int32_t>& glm53_eos_token_ids() {
  static const std::vector<int32_t> ids = {154820, 154827, 154829};
  return ids;
}

}  // namespace tf
