#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "model/safetensors.h"

namespace tf::apps {

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "List the tensors of a safetensors checkpoint folder or file");
  auto path = std::make_shared<std::string>();
  cmd->add_option("path", *path, "checkpoint folder or .safetensors file")->required();
  cmd->callback([path] {
    auto ckpt = Checkpoint::open(*path);
    if (!ckpt) {
      std::cerr << "error: " << ckpt.status().to_string() << "\n";
      throw CLI::RuntimeError(1);
    }
    size_t bytes = 0;
    for (const auto& name : (*ckpt)->names()) {
      const TensorEntry* e = (*ckpt)->find(name);
      bytes += e->data_end - e->data_begin;
      std::cout << name << "\t" << dtype_name(e->dtype) << shape_to_string(e->shape) << "\n";
    }
    std::cout << (*ckpt)->names().size() << " tensors, " << bytes << " bytes\n";
  });
}

}  // namespace tf::apps
