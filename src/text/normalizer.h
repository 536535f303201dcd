// Normalizers of a Hugging Face tokenizer.json ("normalizer" field): NFC, NFD, Lowercase, Prepend,
// Replace, Strip and Sequence. They map valid UTF-8 to valid UTF-8; offsets are not tracked
// because nothing in the server needs them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tf::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by `config` (a tokenizer.json "normalizer" object). A null
// config yields nullptr (no normalization); an unknown "type" is an Unimplemented error.
Expected<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(char32_t cp);

}  // namespace tf::text
