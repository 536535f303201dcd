// Pre-tokenizers of a Hugging Face tokenizer.json ("pre_tokenizer" field): ByteLevel, Split,
// Digits, Metaspace, Whitespace/WhitespaceSplit, BertPreTokenizer, Punctuation, Replace and
// Sequence. A pre-tokenizer turns one piece of normalized text into the "words" that the model
// encodes independently. Digits, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation and
// Metaspace behave as in transformers.js (ASCII \d and \w, JavaScript's \s, no Metaspace split),
// except Metaspace's prepend rule, which is the Rust library's (text/metaspace.h). Split and
// ByteLevel patterns are matched as Oniguruma matches them (text/oniguruma_pattern.h).
//
// Pre-tokenizers stream: each word is handed to a PieceSink as soon as it is cut, and only lives
// for that call. Every pre-tokenizer treats each piece on its own (none looks at the piece before
// or after it, or at a piece's index), so a Sequence runs depth-first: a piece cut by stage 1 goes
// through stages 2..n and into the sink before stage 1 cuts the next one. The words come out in
// the same order as when each stage rewrote the whole list, while only one piece per stage is
// alive at a time, whatever the length of the text.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/function_ref.h"

namespace tf::text {

// Receives the words of a pre-tokenizer one at a time; the view is valid only during the call.
using PieceSink = FunctionRef<void(std::string_view)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts `piece` into words and hands them to `sink`, in order. `first_section` is true when the
  // text starts at the beginning of the input (not after an added token); Metaspace's
  // prepend_scheme "first" uses it.
  virtual void pre_tokenize(std::string_view piece, bool first_section, PieceSink sink) const = 0;

  // Replaces `pieces` by their words (for callers that want a list; it holds every word at once).
  void pre_tokenize(std::vector<std::string>& pieces, bool first_section) const;
};

// Builds the pre-tokenizer described by `config`; null yields nullptr.
Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config);

// The GPT-2 byte-to-character alphabet used by ByteLevel: each byte becomes one printable
// character (printable Latin-1 bytes map to themselves, the rest to U+0100 onwards).
std::string byte_level_encode(std::string_view bytes);
// The byte a ByteLevel character stands for, or -1 when the character is not in the alphabet.
int byte_level_decode_char(char32_t cp);

}  // namespace tf::text
