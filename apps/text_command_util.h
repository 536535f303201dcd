// Helpers shared by the text subcommands (tokenize, detokenize, chat-template): reading input
// files and stdin, loading a tokenizer, and failing with exit code 1 and a message naming the
// file or field at fault (CLI11 turns CLI::RuntimeError(1) into the process exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

namespace tf::apps {

[[noreturn]] inline void fail(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  throw CLI::RuntimeError(1);
}

// Everything on stdin, byte for byte (binary mode matters only on non-POSIX systems).
inline std::string read_stdin() {
  std::string s{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  return s;
}

// `path` may be a folder holding tokenizer.json (and its config files) or a tokenizer.json file.
inline std::unique_ptr<text::Tokenizer> load_tokenizer_or_fail(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path + ": no such tokenizer folder or file");
  auto tok = std::filesystem::is_directory(path, ec) ? text::Tokenizer::from_directory(path)
                                                     : text::Tokenizer::from_file(path);
  if (!tok) fail(tok.status().to_string());
  return std::move(*tok);
}

// Parses JSON keeping the key order of objects (templates iterate dicts in order); `what` names
// the file or flag in the error, with the parser's byte position.
inline nlohmann::ordered_json parse_json_or_fail(const std::string& text, const std::string& what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(what + ": invalid JSON: " + e.what());
  }
}

// Reads and parses a JSON file; "-" reads stdin.
inline nlohmann::ordered_json read_json_or_fail(const std::string& path) {
  if (path == "-") return parse_json_or_fail(read_stdin(), "stdin");
  auto text = text::read_text_file(path);
  if (!text) fail(text.status().to_string());
  return parse_json_or_fail(*text, path);
}

}  // namespace tf::apps
