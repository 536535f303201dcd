// `tensorfold chat-template --model DIR --messages FILE [--tools FILE] [--kwargs JSON]
//  [--no-generation-prompt]`: prints the prompt that the model folder's own chat template renders
// for a conversation, exactly as the server would build it (ChatTemplate: transformers'
// apply_chat_template variables plus vLLM's message normalisation and the thinking switch).
//
// The template is DIR/chat_template.jinja when present, else tokenizer_config.json's
// `chat_template` (a string, or the "default" entry of a named list), as transformers loads it;
// bos_token/eos_token come from tokenizer_config.json. --messages takes a JSON array of messages
// or a request object with "messages" (and "tools", used when --tools is absent); "-" is stdin.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/text_command_util.h"
#include "text/chat_template.h"

namespace tf::apps {
namespace {

namespace fs = std::filesystem;

ChatTemplate load_template_or_fail(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) fail(model_dir + ": not a model folder");
  const fs::path config_path = fs::path(model_dir) / "tokenizer_config.json";
  const fs::path jinja_path = fs::path(model_dir) / "chat_template.jinja";
  nlohmann::json config = nlohmann::json::object();
  if (fs::exists(config_path, ec)) {
    auto j = text::read_json_file(config_path);
    if (!j) fail(j.status().to_string());
    if (!j->is_object()) fail(config_path.string() + ": not a JSON object");
    config = std::move(*j);
  }
  std::string source, name;
  if (fs::exists(jinja_path, ec)) {
    auto s = text::read_text_file(jinja_path);
    if (!s) fail(s.status().to_string());
    source = std::move(*s);
    name = jinja_path.string();
  } else {
    auto parsed = text::parse_tokenizer_config(config);
    if (!parsed) fail(config_path.string() + ": " + parsed.status().to_string());
    if (!parsed->chat_template)
      fail(model_dir + ": no chat template (neither chat_template.jinja nor a chat_template field in " +
           config_path.string() + ")");
    source = *parsed->chat_template;
    name = config_path.string() + ": chat_template";
  }
  auto tmpl = ChatTemplate::create(source, config, name);
  if (!tmpl) fail(tmpl.status().to_string());
  return std::move(*tmpl);
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat-template", "Print the prompt a model folder's chat template renders");
  struct Options {
    std::string model, messages;
    std::optional<std::string> tools, kwargs;
    bool no_generation_prompt = false;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("--model", opt->model, "model folder (chat_template.jinja and/or tokenizer_config.json)")
      ->required();
  cmd->add_option("--messages", opt->messages,
                  "JSON file: array of messages, or an object with \"messages\" ('-': stdin)")
      ->required();
  cmd->add_option("--tools", opt->tools, "JSON file: array of tool schemas");
  cmd->add_option("--kwargs", opt->kwargs,
                  "JSON object of extra template variables, e.g. '{\"enable_thinking\":false}'");
  cmd->add_flag("--no-generation-prompt", opt->no_generation_prompt,
                "render with add_generation_prompt=False");
  cmd->callback([opt] {
    const ChatTemplate tmpl = load_template_or_fail(opt->model);
    ChatTemplateRequest request;
    nlohmann::ordered_json messages = read_json_or_fail(opt->messages);
    if (messages.is_object()) {
      if (!messages.contains("messages")) fail(opt->messages + ": object has no \"messages\" field");
      if (!opt->tools && messages.contains("tools")) request.tools = messages["tools"];
      messages = nlohmann::ordered_json(messages["messages"]);
    }
    if (!messages.is_array()) fail(opt->messages + ": \"messages\" must be a JSON array of messages");
    for (size_t i = 0; i < messages.size(); ++i)
      if (!messages[i].is_object())
        fail(opt->messages + ": message " + std::to_string(i) + " is not a JSON object");
    request.messages = std::move(messages);
    if (opt->tools) {
      request.tools = read_json_or_fail(*opt->tools);
      if (!request.tools.is_array() && !request.tools.is_null())
        fail(*opt->tools + ": tools must be a JSON array of tool schemas");
    }
    if (opt->kwargs) {
      request.kwargs = parse_json_or_fail(*opt->kwargs, "--kwargs");
      if (!request.kwargs.is_object()) fail("--kwargs: must be a JSON object, got " + request.kwargs.dump());
    }
    request.add_generation_prompt = !opt->no_generation_prompt;
    auto prompt = tmpl.render(request);
    if (!prompt) fail(prompt.status().to_string());
    std::cout << prompt->text;
  });
}

}  // namespace tf::apps
