// `tensorfold detokenize --tokenizer DIR [--skip-special] [IDS...]`: prints the text of the ids
// given as arguments (decimal integers, or one JSON array) or, when none are given, of the JSON
// array on stdin (the output of `tokenize`). The text is written exactly, without a newline, so
// that `tokenize | detokenize` reproduces the input byte for byte on lossless tokenizers.
// Ids outside the vocabulary are an error naming the id and its position.
#include <charconv>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "apps/commands.h"
#include "apps/text_command_util.h"

namespace tf::apps {
namespace {

std::vector<text::TokenId> ids_from_json(const nlohmann::ordered_json& j, const std::string& what) {
  if (!j.is_array()) fail(what + ": expected a JSON array of token ids");
  std::vector<text::TokenId> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& v = j[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      fail(what + ": element " + std::to_string(i) + " (" + v.dump() +
           ") is not a non-negative 32-bit integer id");
    ids.push_back(static_cast<text::TokenId>(v.get<int64_t>()));
  }
  return ids;
}

// Arguments may be "1 2 3", "1, 2, 3" or one JSON array "[1,2,3]" (which CLI11 may already have split
// on its commas): brackets, commas and whitespace separate ids.
std::vector<text::TokenId> ids_from_args(const std::vector<std::string>& args) {
  std::vector<text::TokenId> ids;
  for (const std::string& arg : args) {
    size_t i = 0;
    while (i < arg.size()) {
      const auto is_sep = [](char c) {
        return c == '[' || c == ']' || c == ',' || c == ' ' || c == '\t' || c == '\n';
      };
      if (is_sep(arg[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < arg.size() && !is_sep(arg[j])) ++j;
      const std::string_view word(arg.data() + i, j - i);
      text::TokenId v = 0;
      auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
      if (ec != std::errc() || end != word.data() + word.size() || v < 0)
        fail("ids argument '" + std::string(word) + "' is not a non-negative 32-bit integer id");
      ids.push_back(v);
      i = j;
    }
  }
  return ids;
}

}  // namespace

void add_detokenize_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("detokenize", "Print the text of token ids (arguments or a JSON array on stdin)");
  struct Options {
    std::string tokenizer;
    bool skip_special = false;
    std::vector<std::string> ids;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("--tokenizer", opt->tokenizer, "folder with tokenizer.json (or the file itself)")
      ->required();
  cmd->add_flag("--skip-special", opt->skip_special, "leave special tokens out (skip_special_tokens=True)");
  cmd->add_option("ids", opt->ids,
                  "token ids, or one JSON array; read as a JSON array from stdin when absent");
  cmd->callback([opt] {
    auto tok = load_tokenizer_or_fail(opt->tokenizer);
    const std::vector<text::TokenId> ids =
        opt->ids.empty() ? ids_from_json(parse_json_or_fail(read_stdin(), "stdin"), "stdin")
                         : ids_from_args(opt->ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!tok->id_to_token(ids[i]))
        fail("token id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
             ") is not in the vocabulary of " + opt->tokenizer + " (" + std::to_string(tok->vocab_size()) +
             " ids)");
    }
    std::cout << tok->decode(ids, opt->skip_special);
  });
}

}  // namespace tf::apps
