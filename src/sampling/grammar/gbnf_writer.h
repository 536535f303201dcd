// Writing GBNF (grammar.h's dialect) from code points: the escaping, literals and
// character classes every converter to GBNF (JSON Schema, regex, choice) prints with,
// and the code-point range arithmetic behind the classes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/grammar/grammar.h"

namespace tf::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint and non-adjacent ranges holding the same code points.
std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges);
// Every code point in [0, kMaxCodePoint] that `normalized` does not hold.
std::vector<CharRange> complement_ranges(const std::vector<CharRange>& normalized);
// The code points `cls` matches, normalized (a negated class complemented).
std::vector<CharRange> class_ranges(const CharClass& cls);

// One code point inside "..." (in_class false) or [...] (in_class true): GBNF's special
// characters and invisible ones (controls, format characters, ...) escaped, the rest UTF-8.
void append_gbnf_char(std::string& out, uint32_t cp, bool in_class);
// A quoted literal of these code points.
std::string gbnf_string(const std::vector<uint32_t>& cps);
// A quoted literal of `text` (UTF-8; a byte that is not UTF-8 stands for U+0080..U+00FF,
// as the GBNF parser reads it).
std::string gbnf_literal(std::string_view text);
// A class of these (normalized) ranges, printed as [..] or [^..], whichever is shorter;
// a single code point as a literal.
std::string gbnf_class(const std::vector<CharRange>& normalized);

// `gbnf` with every rule name (definitions and references) prefixed by `prefix`, so that
// several generated grammars (each with its own `root`, `ws`, ...) can live in one text.
// Literals, classes, comments and repetition counts are left as they are.
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

}  // namespace tf::grammar
