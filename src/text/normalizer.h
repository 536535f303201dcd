// Normalizers of a Hugging Face tokenizer.json ("normalizer" field): NFC, NFD, NFKC, NFKD,
// Lowercase, Prepend, Replace, Strip, StripAccents, BertNormalizer, Precompiled and Sequence, with
// transformers.js's behaviour (JavaScript's toLowerCase, trim and \s; see each class). They map valid UTF-8 to valid UTF-8; offsets are not tracked
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

// JavaScript's \s and String.prototype.trim's whitespace: White_Space minus U+0085, plus U+FEFF.
bool is_js_whitespace(char32_t cp);
// JavaScript's trim / trimStart / trimEnd.
std::string js_trim(std::string_view s, bool left = true, bool right = true);
// JavaScript's String.prototype.toLowerCase: the full lowercase mapping, with Greek capital sigma
// becoming final sigma at the end of a word (the Final_Sigma context of SpecialCasing.txt).
std::string js_to_lower(std::string_view s);
// transformers.js's tokenizer_config switches, applied to each text section before the normalizer:
// remove_space (trim, then every run of JavaScript whitespace becomes one space) and
// do_lowercase_and_remove_accent (toLowerCase, then every mark \p{M} removed).
std::string js_remove_space(std::string_view s);
std::string js_lowercase_and_remove_accent(std::string_view s);
// transformers.js's BERT "Chinese character" test (the CJK ideograph blocks; it looks at UTF-16
// code units, so only the blocks of the Basic Multilingual Plane count).
bool is_bert_chinese_char(char32_t cp);

}  // namespace tf::text
