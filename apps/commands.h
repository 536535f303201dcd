// Subcommands of the tensorfold binary; each registers itself on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace tf::apps {

// `tensorfold inspect DIR`: config summary and tensor list of a checkpoint.
void add_inspect_command(CLI::App& app);
// `tensorfold tokenize --tokenizer DIR [TEXT]`: token ids as a JSON array.
void add_tokenize_command(CLI::App& app);
// `tensorfold detokenize --tokenizer DIR [IDS...]`: the text of token ids.
void add_detokenize_command(CLI::App& app);
// `tensorfold chat-template --model DIR --messages FILE`: the rendered prompt.
void add_chat_template_command(CLI::App& app);

}  // namespace tf::apps
