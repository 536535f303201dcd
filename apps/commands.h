// Subcommands of the tensorfold binary; each registers itself on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace tf::apps {

// `tensorfold inspect DIR`: config summary and tensor list of a checkpoint.
void add_inspect_command(CLI::App& app);

}  // namespace tf::apps
