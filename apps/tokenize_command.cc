// `tensorfold tokenize --tokenizer DIR [--no-special] [TEXT]`: prints the ids of TEXT (or of all
// of stdin, byte for byte, when TEXT is absent) as a JSON array on one line, so that the output
// can be compared with transformers' / transformers.js's encode() or piped into `detokenize`.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "apps/commands.h"
#include "apps/text_command_util.h"

namespace tf::apps {

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of TEXT (or stdin) as a JSON array");
  struct Options {
    std::string tokenizer;
    bool no_special = false;
    std::optional<std::string> text;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("--tokenizer", opt->tokenizer, "folder with tokenizer.json (or the file itself)")
      ->required();
  cmd->add_flag("--no-special", opt->no_special, "do not add BOS/EOS (add_special_tokens=False)");
  cmd->add_option("text", opt->text, "text to encode; read from stdin when absent");
  cmd->callback([opt] {
    auto tok = load_tokenizer_or_fail(opt->tokenizer);
    const std::string text = opt->text ? *opt->text : read_stdin();
    const auto ids = tok->encode(text, !opt->no_special);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::cout << out;
  });
}

}  // namespace tf::apps
