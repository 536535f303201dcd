// Pre-tokenizers of a Hugging Face tokenizer.json ("pre_tokenizer" field): ByteLevel, Split,
// Digits, Metaspace, Whitespace/WhitespaceSplit, BertPreTokenizer, Punctuation, Replace and
// Sequence. A pre-tokenizer turns one piece of normalized text into the list of "words" that the
// model encodes independently. Digits, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation
// and Metaspace behave as in transformers.js (ASCII \d and \w, JavaScript's \s, no Metaspace split).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tf::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces. `first_section` is true when the text starts at the
  // beginning of the input (not after an added token); Metaspace's prepend_scheme "first" uses it.
  virtual void pre_tokenize(std::vector<std::string>& pieces, bool first_section) const = 0;
};

// Builds the pre-tokenizer described by `config`; null yields nullptr.
Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config);

// The GPT-2 byte-to-character alphabet used by ByteLevel: each byte becomes one printable
// character (printable Latin-1 bytes map to themselves, the rest to U+0100 onwards).
std::string byte_level_encode(std::string_view bytes);
// The byte a ByteLevel character stands for, or -1 when the character is not in the alphabet.
int byte_level_decode_char(char32_t cp);

}  // namespace tf::text
