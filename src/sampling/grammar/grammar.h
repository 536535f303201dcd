// A context-free grammar over Unicode code points, compiled from GBNF text: the one
// form every structured-output kind (json_object, json_schema, regex, choice,
// grammar) is turned into before decoding (json_schema_gbnf.h, regex_gbnf.h).
//
// GBNF (llama.cpp's dialect):
//   rule         ::= name "::=" alternatives      (a new rule starts at `name ::=`)
//   alternatives ::= sequence ("|" sequence)*
//   sequence     ::= item*
//   item         ::= primary ("*" | "+" | "?" | "{" n "}" | "{" n ",}" | "{" n "," m "}")?
//   primary      ::= "\"" literal "\"" | "[" class "]" | "[^" class "]" | name | "(" alternatives ")" | "."
// Names are [A-Za-z0-9_-]+; "#" starts a comment to the end of the line; the start
// rule is `root`. Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \/
// \xHH \uHHHH \UHHHHHHHH; any other character stands for itself (UTF-8 text, matched
// as code points). "." matches any code point.
//
// Compiled form (what GrammarMatcher walks): every alternative of every rule is a run
// of Elements ending in kEnd; a kChar element names a CharClass, a kRule element a
// rule. Repetitions and groups become generated rules (x* -> r ::= x r | ""), so the
// matcher only ever sees sequences, choices and rule references. Left recursion
// (a rule that can reach itself without consuming a character) is refused at compile
// time: the matcher expands rules eagerly and would never stop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf::grammar {

struct CharRange {
  uint32_t lo = 0, hi = 0;  // inclusive code points
};

struct CharClass {
  std::vector<CharRange> ranges;  // sorted, disjoint after compilation
  bool negated = false;
  bool matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (a partial UTF-8 sequence's completions).
  bool matches_any(uint32_t lo, uint32_t hi) const;
};

struct Element {
  enum class Kind : uint8_t { kEnd, kChar, kRule };
  Kind kind = Kind::kEnd;
  uint32_t value = 0;  // kChar: index into Grammar::classes; kRule: rule index
};

struct Grammar {
  std::vector<CharClass> classes;
  std::vector<Element> elements;                // all alternatives, each ended by kEnd
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule: offsets of its alternatives
  std::vector<std::string> rule_names;          // generated rules are named parent_N
  uint32_t root = 0;
};

// Parses and compiles GBNF text. Errors name the line and what is wrong (an unknown
// rule, a missing root, left recursion, a bad escape, ...).
Expected<std::shared_ptr<const Grammar>> compile_gbnf(std::string_view text);

// Whether the whole of `text` (UTF-8) is a sentence of the grammar (tests, checks).
bool grammar_matches(const Grammar& grammar, std::string_view text);

}  // namespace tf::grammar
