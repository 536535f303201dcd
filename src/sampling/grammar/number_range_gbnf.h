// GBNF for the JSON numbers inside a range: how json_schema_gbnf.h enforces minimum,
// maximum, exclusiveMinimum and exclusiveMaximum.
//
// The grammar works on the text digit by digit, the way a range becomes a regex
// (e.g. 0..123 -> [0-9] | [1-9][0-9] | 1[0-1][0-9] | 12[0-3]): numbers shorter than the
// bound's length are free, same-length ones follow the bound's digits until the first
// digit below (or above) it, after which the rest is free. Bounds are exact decimals
// (decimal.h), so no bound is too large or too precise; each level of a digit chain is
// its own rule, so long bounds add rules, not nesting.
//
// integer: JSON's integer form ("-"? no leading zeros). "-0" is allowed exactly when 0
//   is in the range, as in the unbounded integer rule.
// number with bounds: fixed-point only ("-"? integer ( "." [0-9]+ )?), no exponent, so
//   the value can be compared digit by digit; trailing zeros are free (1.50 is 1.5) and
//   "-0", "-0.0" are 0.
// Values are compared exactly with the bound's decimal text; a text with more digits
// than a double holds may still round to the bound itself when parsed (1.4999999999999999999
// reads as 1.5), which an exclusive bound then rejects.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "sampling/grammar/decimal.h"

namespace tf::grammar {

struct NumberBound {
  Decimal value;
  bool inclusive = true;  // minimum / maximum; false for exclusiveMinimum / exclusiveMaximum
};

struct NumberRange {
  std::optional<NumberBound> lower, upper;  // absent: unbounded on that side
};

// Whether no number (a real number, not only an integer) lies in `range`.
bool range_is_empty(const NumberRange& range);
// The same integers as `range`, with inclusive integer bounds (1.5 < x becomes 2 <= x).
NumberRange integer_range_of(const NumberRange& range);

// Adds a rule with this body and returns its name (the caller picks unique names).
using AddRule = std::function<std::string(const std::string& body)>;

// A GBNF sequence (no top-level '|') matching the integer texts whose value lies in
// `range`, or nothing when none does. Helper rules are added through `add_rule`.
std::optional<std::string> integer_range_gbnf(const NumberRange& range, const AddRule& add_rule);
// The same for fixed-point number texts (see above).
std::optional<std::string> fixed_point_range_gbnf(const NumberRange& range, const AddRule& add_rule);

}  // namespace tf::grammar
