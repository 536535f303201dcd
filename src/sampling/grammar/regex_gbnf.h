// Regular expressions and choice lists turned into GBNF (grammar.h's dialect), for the
// `regex` and `choice` kinds of structured output. Decoding is then constrained so that
// the WHOLE output is a string the regex fully matches (vLLM/outlines semantics).
//
// The pattern is parsed (recursive descent, over the Unicode code points of its UTF-8
// text) into a small tree -- character set, concatenation, alternation, repetition --
// and the tree is printed as one GBNF expression:
//   literal runs        -> "..."            (GBNF escapes for quotes, backslashes, controls)
//   . \d [a-z] [^\d] .. -> [...] or [^...]  (sets are computed as code-point ranges, so
//                                            negated shorthands inside brackets, [^\D\s],
//                                            become plain ranges; "." is [^\n])
//   a|b, (..), (?:..), (?P<n>..), (?<n>..) -> GBNF alternatives and groups
//   * + ? {n} {n,} {n,m} {,m} and lazy forms (*? ...) -> the same GBNF quantifier (lazy
//                                            forms accept the same language)
//   ^ first, $ last     -> nothing (matching is full-match anyway)
// A repeated part that can match "" is rewritten to its non-empty part first ((a*)* ->
// a*, (a?b?)+ -> (a b? | b)*), because GBNF `x*` with a nullable x is left recursion.
// \d and \w are ASCII ([0-9], [0-9A-Za-z_]); \s is ECMAScript's Unicode white space.
// As in Python, "]" first in a class is a literal ("[]a]"), "{" that does not start a
// quantifier is a literal, and {,m} means {0,m}.
//
// Refused (kInvalidArgument, "regex: <what> at offset N", N counting code points):
// backreferences (\1, \k<n>, (?P=n)), lookaround ((?= (?! (?<= (?<!), \b \B \A \Z \z
// \G, "^" or "$" anywhere but the very start / end, inline flags and other (?x forms,
// possessive quantifiers (a*+), a quantifier with nothing to repeat, two quantifiers in
// a row, {n,m} with n > m or a count above 10000, \p{..} \N{..} \cX, unknown letter
// escapes, octal escapes, lone surrogates, unbalanced ( ) [, invalid UTF-8, groups
// nested deeper than 200, and repetitions whose expansion exceeds a million items.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf::grammar {

// GBNF rules whose start rule is named `rule_prefix` and whose sentences are exactly
// the strings the regex fully matches. Helper rules, if any, are named
// rule_prefix + "-" + something (today the whole regex fits in the start rule).
Expected<std::string> regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix = "root");

// GBNF for a `choice` constraint: `root` is exactly one of the strings (UTF-8). An
// empty list gives a root that matches nothing.
std::string choice_to_gbnf(const std::vector<std::string>& choices);

}  // namespace tf::grammar
