// `tensorfold demo-checkpoint --out DIR`: writes the built-in demo checkpoint (a scaled-down
// GLM-5.3-Flash with deterministic random weights, src/engine/demo_checkpoint.h) into DIR and
// prints what it wrote. The output is the same on every run and every machine.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/text_command_util.h"
#include "engine/demo_checkpoint.h"

namespace tf::apps {

void add_demo_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("demo-checkpoint",
                                 "Write the built-in demo checkpoint (tiny GLM-5.3-Flash, random weights) to a folder");
  auto out = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "folder to write (created when missing; its demo files are replaced)")->required();
  cmd->callback([out] {
    const Status s = write_demo_checkpoint(*out);
    if (!s.is_ok()) fail(s.to_string());
    const DemoTokenizerInfo info = demo_tokenizer_info();
    std::cout << "demo checkpoint v" << kDemoCheckpointVersion << " written to " << *out << "\n";
    for (const char* name : kDemoCheckpointFiles) {
      std::error_code ec;
      const auto bytes = std::filesystem::file_size(std::filesystem::path(*out) / name, ec);
      std::cout << "  " << name << "  " << (ec ? 0 : bytes) << " bytes\n";
    }
    std::cout << "tokenizer: " << info.num_merges << " merges, base vocabulary " << info.base_vocab_size
              << ", config vocab_size " << info.vocab_size << "\n";
  });
}

}  // namespace tf::apps
