// See number_range_gbnf.h.
//
// Expressions are std::optional<std::string>: nullopt matches nothing, "" matches only
// the empty text, anything else is a GBNF sequence. Alternatives always become a rule,
// never a nested group, so the grammar compiler's nesting limit is never reached.
#include "sampling/grammar/number_range_gbnf.h"

#include <vector>

namespace tf::grammar {
namespace {

using Expr = std::optional<std::string>;

std::string literal(std::string_view digits) { return "\"" + std::string(digits) + "\""; }
std::string literal(char digit) { return literal(std::string_view(&digit, 1)); }

// One digit in [lo, hi]; nothing when lo > hi.
Expr digit_in(char lo, char hi) {
  if (lo > hi) return std::nullopt;
  if (lo == hi) return literal(lo);
  return std::string("[") + lo + "-" + hi + "]";
}

// Exactly `count` free digits.
std::string free_digits(size_t count) {
  if (count == 0) return "";
  if (count == 1) return "[0-9]";
  return "[0-9]{" + std::to_string(count) + "}";
}

constexpr const char* kAnyDigits = "[0-9]*";
constexpr const char* kNonZeroDigits = R"("0"* [1-9] [0-9]*)";  // digits with a value above 0

Expr seq(const Expr& a, const Expr& b) {
  if (!a || !b) return std::nullopt;
  if (a->empty()) return b;
  if (b->empty()) return a;
  return *a + " " + *b;
}

bool all_of(const std::string& digits, char digit) {
  return digits.find_first_not_of(digit) == std::string::npos;
}

// A magnitude interval [low, high] (or open on a side), both non-negative.
struct Magnitudes {
  NumberBound low;
  std::optional<NumberBound> high;  // absent: unbounded
};

class RangeWriter {
 public:
  explicit RangeWriter(const AddRule& add_rule) : add_rule_(add_rule) {}

  // The union of the alternatives as one sequence.
  Expr any_of(const std::vector<Expr>& alternatives) {
    std::vector<std::string> present;
    bool empty_text = false;
    for (const Expr& alternative : alternatives) {
      if (!alternative) continue;
      if (alternative->empty()) {
        empty_text = true;
      } else {
        present.push_back(*alternative);
      }
    }
    if (present.empty()) return empty_text ? Expr("") : std::nullopt;
    if (present.size() == 1 && !empty_text) return present[0];
    std::string body;
    for (size_t i = 0; i < present.size(); ++i) body += (i ? " | " : "") + present[i];
    return add_rule_(body) + (empty_text ? "?" : "");
  }

  // Digit strings of lo's length between lo and hi (lo <= hi, same length).
  Expr same_length(const std::string& lo, const std::string& hi) {
    size_t k = 0;
    while (k < lo.size() && lo[k] == hi[k]) ++k;
    if (k == lo.size()) return lo.empty() ? "" : literal(lo);
    const std::string lo_rest = lo.substr(k + 1), hi_rest = hi.substr(k + 1);
    const bool low_free = all_of(lo_rest, '0'), high_free = all_of(hi_rest, '9');
    const size_t rest = lo_rest.size();
    Expr prefix = k == 0 ? "" : literal(std::string_view(lo).substr(0, k));
    std::vector<Expr> alternatives;
    if (!low_free) alternatives.push_back(seq(literal(lo[k]), same_length(lo_rest, std::string(rest, '9'))));
    alternatives.push_back(seq(digit_in(low_free ? lo[k] : lo[k] + 1, high_free ? hi[k] : hi[k] - 1),
                               free_digits(rest)));
    if (!high_free) alternatives.push_back(seq(literal(hi[k]), same_length(std::string(rest, '0'), hi_rest)));
    return seq(prefix, any_of(alternatives));
  }

  // Natural numbers without leading zeros in [low, high] (high absent: unbounded).
  Expr naturals(const std::string& low, const std::optional<std::string>& high) {
    const size_t n = low.size();
    if (high && (high->size() < n || (high->size() == n && *high < low))) return std::nullopt;
    if (high && high->size() == n) return same_length(low, *high);
    std::vector<Expr> alternatives = {same_length(low, std::string(n, '9'))};
    if (!high) {
      alternatives.push_back("[1-9] [0-9]{" + std::to_string(n) + ",}");
      return any_of(alternatives);
    }
    const size_t m = high->size();
    if (m - n == 2) alternatives.push_back("[1-9] " + free_digits(n));
    if (m - n > 2) alternatives.push_back("[1-9] [0-9]{" + std::to_string(n) + "," + std::to_string(m - 2) + "}");
    alternatives.push_back(same_length("1" + std::string(m - 1, '0'), *high));
    return any_of(alternatives);
  }

  // --- Fractions: digit strings D after the point, compared as the value 0.D --------

  // Non-empty D with 0.D >= 0.bound (> when exclusive).
  Expr at_least(const std::string& bound, bool inclusive) {
    if (bound.empty()) return inclusive ? "[0-9]+" : kNonZeroDigits;
    return any_of({seq(digit_in(bound[0] + 1, '9'), kAnyDigits),
                   seq(literal(bound[0]), at_least_or_empty(bound.substr(1), inclusive))});
  }
  Expr at_least_or_empty(const std::string& bound, bool inclusive) {
    if (bound.empty()) return inclusive ? kAnyDigits : kNonZeroDigits;
    return at_least(bound, inclusive);  // a non-empty bound is above 0, the empty D's value
  }

  // Non-empty D with 0.D <= 0.bound (< when exclusive).
  Expr at_most(const std::string& bound, bool inclusive) {
    if (bound.empty()) return inclusive ? Expr(R"("0"+)") : std::nullopt;
    return any_of({seq(digit_in('0', bound[0] - 1), kAnyDigits),
                   seq(literal(bound[0]), at_most_or_empty(bound.substr(1), inclusive))});
  }
  Expr at_most_or_empty(const std::string& bound, bool inclusive) {
    if (bound.empty()) return inclusive ? Expr(R"("0"*)") : std::nullopt;
    return any_of({"", at_most(bound, inclusive)});
  }

  // Non-empty D between 0.low and 0.high (0.low <= 0.high).
  Expr between(const std::string& low, bool low_inclusive, const std::string& high, bool high_inclusive) {
    if (low.empty() && high.empty()) return low_inclusive && high_inclusive ? Expr(R"("0"+)") : std::nullopt;
    const char l = low.empty() ? '0' : low[0], h = high.empty() ? '0' : high[0];
    const std::string low_rest = low.empty() ? "" : low.substr(1), high_rest = high.empty() ? "" : high.substr(1);
    if (l == h) {
      bool empty_ok = low_rest.empty() && low_inclusive && (!high_rest.empty() || high_inclusive);
      return seq(literal(l), any_of({empty_ok ? Expr("") : std::nullopt,
                                     between(low_rest, low_inclusive, high_rest, high_inclusive)}));
    }
    return any_of({seq(literal(l), at_least_or_empty(low_rest, low_inclusive)),
                   seq(digit_in(l + 1, h - 1), kAnyDigits),
                   seq(literal(h), at_most_or_empty(high_rest, high_inclusive))});
  }

  // Optional fraction parts ("" or "." D) of a number whose whole part is fixed.
  Expr fraction(const Expr& empty_ok, const Expr& digits) { return any_of({empty_ok, seq(R"(".")", digits)}); }

  // Fixed-point texts of non-negative values in `range` (not empty).
  Expr magnitudes(const Magnitudes& range) {
    const NumberBound& low = range.low;
    const std::string& low_whole = low.value.whole;
    const std::string& low_fraction = low.value.fraction;
    const bool low_fraction_free = low_fraction.empty() && low.inclusive;  // any fraction is above the bound
    if (range.high && range.high->value.whole == low_whole) {
      const NumberBound& high = *range.high;
      bool empty_ok = low_fraction_free && (!high.value.fraction.empty() || high.inclusive);
      return seq(literal(low_whole),
                 fraction(empty_ok ? Expr("") : std::nullopt,
                          between(low_fraction, low.inclusive, high.value.fraction, high.inclusive)));
    }
    std::vector<Expr> alternatives;
    alternatives.push_back(seq(literal(low_whole), fraction(low_fraction_free ? Expr("") : std::nullopt,
                                                            at_least(low_fraction, low.inclusive))));
    std::optional<std::string> below_high;
    if (range.high) below_high = decrement_digits(range.high->value.whole);
    alternatives.push_back(seq(naturals(increment_digits(low_whole), below_high), R"(( "." [0-9]+ )?)"));
    if (range.high) {
      const NumberBound& high = *range.high;
      bool empty_ok = !high.value.fraction.empty() || high.inclusive;
      alternatives.push_back(seq(literal(high.value.whole), fraction(empty_ok ? Expr("") : std::nullopt,
                                                                     at_most(high.value.fraction, high.inclusive))));
    }
    return any_of(alternatives);
  }

 private:
  const AddRule& add_rule_;
};

const Decimal kZero;

// The magnitudes of the range's non-negative values, or nothing when it has none.
std::optional<Magnitudes> non_negative_part(const NumberRange& range) {
  Magnitudes out{{kZero, true}, range.upper};
  if (range.lower && !range.lower->value.negative) out.low = *range.lower;
  if (range_is_empty({out.low, out.high})) return std::nullopt;
  return out;
}

// The magnitudes of its values at or below zero ("-0" is 0), or nothing.
std::optional<Magnitudes> non_positive_part(const NumberRange& range) {
  NumberRange mirrored;
  if (range.upper) mirrored.lower = NumberBound{negated(range.upper->value), range.upper->inclusive};
  if (range.lower) mirrored.upper = NumberBound{negated(range.lower->value), range.lower->inclusive};
  return non_negative_part(mirrored);
}

}  // namespace

bool range_is_empty(const NumberRange& range) {
  if (!range.lower || !range.upper) return false;
  int order = compare(range.lower->value, range.upper->value);
  return order > 0 || (order == 0 && !(range.lower->inclusive && range.upper->inclusive));
}

NumberRange integer_range_of(const NumberRange& range) {
  NumberRange out;
  if (range.lower) {
    const Decimal& v = range.lower->value;
    out.lower = NumberBound{range.lower->inclusive ? ceil_of(v) : plus_one(floor_of(v)), true};
  }
  if (range.upper) {
    const Decimal& v = range.upper->value;
    out.upper = NumberBound{range.upper->inclusive ? floor_of(v) : minus_one(ceil_of(v)), true};
  }
  return out;
}

std::optional<std::string> integer_range_gbnf(const NumberRange& range, const AddRule& add_rule) {
  NumberRange integers = integer_range_of(range);
  if (range_is_empty(integers)) return std::nullopt;
  RangeWriter writer(add_rule);
  auto naturals_in = [&](const std::optional<Magnitudes>& part) -> Expr {
    if (!part) return std::nullopt;
    std::optional<std::string> high;
    if (part->high) high = part->high->value.whole;
    return writer.naturals(part->low.value.whole, high);
  };
  return writer.any_of({naturals_in(non_negative_part(integers)),
                        seq(R"("-")", naturals_in(non_positive_part(integers)))});
}

std::optional<std::string> fixed_point_range_gbnf(const NumberRange& range, const AddRule& add_rule) {
  if (range_is_empty(range)) return std::nullopt;
  RangeWriter writer(add_rule);
  auto texts = [&](const std::optional<Magnitudes>& part) -> Expr {
    return part ? writer.magnitudes(*part) : std::nullopt;
  };
  return writer.any_of({texts(non_negative_part(range)), seq(R"("-")", texts(non_positive_part(range)))});
}

}  // namespace tf::grammar
