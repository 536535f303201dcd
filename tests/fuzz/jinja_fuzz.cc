// libFuzzer target for the Jinja engine (src/text/jinja_*): chat templates can arrive in requests,
// so any source text must parse or fail with a Status, and any parsed template must render or fail
// with a Status, without crash, sanitizer report, leak or stack overflow. The input is the template
// source; it is rendered against a fixed context shaped like a chat request (messages of every
// role with tool calls, reasoning and multimodal parts, tools, the special tokens and kwargs), so
// that the paths real templates take (loops over messages, attribute access, filters) are reached.
// The seed corpus is tests/data/chat-templates/*.jinja (scripts/fuzz.sh copies it).
#include <cstdint>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string_view>

#include "text/jinja_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": [{"type": "text", "text": "Hi <b>"}, {"type": "image_url", "image_url": {"url": "x"}}]},
      {"role": "assistant", "content": "", "reasoning_content": "think\nmore",
       "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "get", "arguments": {"city": "Paris", "n": 3, "deep": {"a": [1, null, true]}}}},
                      {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "{\"t\": 21.5}"},
      {"role": "assistant", "content": "It is 21.5 degrees."},
      {"role": "user", "content": "Thanks \u00e9\ud83d\ude00"}
    ],
    "tools": [{"type": "function", "function": {"name": "get", "description": "d",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
                              "required": ["city"]}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "enable_thinking": true,
    "reasoning_effort": "high",
    "n": 7,
    "f": 2.5,
    "s": "a,b,c"
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  for (bool trim : {true, false}) {
    tf::jinja::TemplateOptions options;
    options.trim_blocks = options.lstrip_blocks = trim;
    options.keep_trailing_newline = !trim;
    auto tmpl = tf::jinja::Template::parse(source, options);
    if (!tmpl.has_value()) continue;
    tf::jinja::RenderOptions render;
    render.now = std::time_t{1768478400};  // fixed: strftime_now must not make runs differ
    auto out = tmpl->render(context(), render);
    (void)out;
  }
  return 0;
}
