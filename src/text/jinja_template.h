// A compiled Jinja template: the public entry point of the Jinja engine.
//
//   TF_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::parse(source));
//   TF_ASSIGN_OR_RETURN(std::string text, tmpl.render(context_json));
//
// The default options are those of Hugging Face transformers' apply_chat_template:
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols, its own
// tojson filter, and the globals raise_exception(message) and strftime_now(format). Errors (syntax,
// undefined access, raise_exception, type errors) come back as a Status naming the line and column.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "text/jinja_ast.h"

namespace tf::jinja {

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
  std::string name = "template";  // used in error messages
};

// Work one render may do, in statements run plus expressions evaluated (~100 ns each). The
// template is the server's, but its loops run over the request's messages and tools, and chat
// templates can be quadratic in them: GLM-5.3's checks every tool result against every other
// of its block, so 400 parallel tool calls take 13M steps (1.5 s) and 10,000 would take
// minutes of a server thread. The conversations the tests render take under 2,000 steps.
constexpr uint64_t kMaxRenderSteps = 20'000'000;
// Bytes one rendered string (the output, a macro's, a block's) may reach: far above any
// prompt (a request body is at most 96 MiB), far below what a loop can multiply it into.
constexpr size_t kMaxRenderBytes = size_t{256} << 20;

struct RenderOptions {
  // Time for strftime_now (seconds since the epoch, local time zone); unset: the current time.
  std::optional<std::time_t> now;
  // Past either limit the render fails with a "MemoryError" / "too much work" Status.
  uint64_t max_steps = kMaxRenderSteps;
  size_t max_output_bytes = kMaxRenderBytes;
};

class Template {
 public:
  static Expected<Template> parse(std::string_view source, const TemplateOptions& options = {});

  // `context` must be a JSON object; its keys become template variables (dict order is kept).
  Expected<std::string> render(const nlohmann::ordered_json& context,
                               const RenderOptions& options = {}) const;
  // The same, moving the context's strings into the template's values instead of copying them.
  Expected<std::string> render(nlohmann::ordered_json&& context, const RenderOptions& options = {}) const;
  const TemplateOptions& options() const { return options_; }
  // The name render errors give from now on (parse errors had the one it was parsed with).
  void rename(std::string name) { options_.name = std::move(name); }

 private:
  template <typename Context>
  Expected<std::string> render_context(Context&& context, const RenderOptions& options) const;
  Template(std::shared_ptr<const Body> body, TemplateOptions options)
      : body_(std::move(body)), options_(std::move(options)) {}
  std::shared_ptr<const Body> body_;
  TemplateOptions options_;
};

}  // namespace tf::jinja
