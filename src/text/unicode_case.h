// Python's case mappings and case properties of code points, for the Jinja engine's str.upper/lower/
// title/capitalize/swapcase/casefold and islower/isupper/istitle: the full mappings (one code point to
// up to three, e.g. "ß" upper-cases to "SS") and the Lowercase/Uppercase/Titlecase/Case_Ignorable
// properties, as CPython has them. The data is unicode_case_tables.inc, generated from Python by
// tests/tools/gen_unicode_case_tables.py; lower-case mappings are unicode.h's.
#pragma once

#include <cstdint>
#include <string>

namespace tf::text {

enum CaseProperty : uint8_t { kLowercase = 1, kUppercase = 2, kTitlecase = 4, kCaseIgnorable = 8 };

// A bit set of CaseProperty; a character is cased when it is lower-, upper- or titlecase.
uint8_t case_properties(char32_t c);
inline bool is_cased(char32_t c) {
  return (case_properties(c) & (kLowercase | kUppercase | kTitlecase)) != 0;
}

// Appends the full mapping of one code point (the code point itself when it has none).
void append_upper(std::u32string& out, char32_t c);
void append_title(std::u32string& out, char32_t c);
void append_casefold(std::u32string& out, char32_t c);
// Lower case of u[i] in its string: a capital sigma ending a word becomes final sigma, as in CPython.
void append_lower_at(std::u32string& out, const std::u32string& u, size_t i);

}  // namespace tf::text
