// Tokenizer patterns (tokenizer.json's Split / Replace regexes, the ByteLevel pattern) are written
// for Oniguruma, the engine of Hugging Face's Rust `tokenizers`, in its Ruby syntax. PCRE2 reads
// the same text, but a few escapes mean something else there; this rewrites them so that PCRE2
// (UTF + UCP, multiline) matches what Oniguruma matches:
//   \s  Oniguruma: U+0009-000D, U+0085, Z (Zs|Zl|Zp). PCRE2's \s also takes U+180E (MONGOLIAN
//       VOWEL SEPARATOR, no longer a space since Unicode 6.3), so "'\u180e's" split differently.
//   \w  Oniguruma: L|M|N|Pc. PCRE2 10.42: L|N and '_' (no combining marks). \b and \B follow \w.
//   \h  Oniguruma: a hex digit. PCRE2: horizontal space.
//   \uHHHH  Oniguruma's code point escape; PCRE2 rejects it.
//   (?m)    Ruby's "dot matches newline"; PCRE2 spells it (?s). ^ and $ are always line anchors in
//           Ruby syntax, which the caller gets by compiling with PCRE2_MULTILINE.
// Everything else is copied unchanged. Inside a character class, \W keeps PCRE2's meaning (its
// complement cannot be written inline); no tokenizer we know of uses it there.
#pragma once

#include <string>
#include <string_view>

namespace tf::text {

std::string pcre2_from_oniguruma(std::string_view pattern);

}  // namespace tf::text
