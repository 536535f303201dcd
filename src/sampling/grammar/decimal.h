// An exact decimal number kept as digit strings: the form JSON Schema's numeric bounds
// (minimum, maximum, ...) are compared and rounded in before they become grammar rules
// (number_range_gbnf.h). Digit strings have no size limit, so a bound of any size (a
// uint64, 1e300) is exact; a double becomes its shortest fixed-point text that reads
// back as the same double (0.1 -> "0.1", not 0.1000000000000000055...).
#pragma once

#include <cstdint>
#include <string>

namespace tf::grammar {

struct Decimal {
  bool negative = false;    // never set for zero
  std::string whole = "0";  // digits before the point, no leading zeros ("0" for none)
  std::string fraction;     // digits after the point, no trailing zeros

  static Decimal of(int64_t value);
  static Decimal of(uint64_t value);
  // `value` must be finite.
  static Decimal of(double value);

  bool is_zero() const { return whole == "0" && fraction.empty(); }
  bool is_integer() const { return fraction.empty(); }
  std::string text() const;  // "-12.5", "0", "3"
};

// <0, 0 or >0 as a is less than, equal to or greater than b.
int compare(const Decimal& a, const Decimal& b);
Decimal negated(const Decimal& value);
// The nearest integers below and above (the value itself when it is one).
Decimal floor_of(const Decimal& value);
Decimal ceil_of(const Decimal& value);
// An integer plus or minus one (`value` must be an integer).
Decimal plus_one(const Decimal& value);
Decimal minus_one(const Decimal& value);

// Natural numbers as digit strings without leading zeros: n + 1, and n - 1 for n >= 1.
std::string increment_digits(const std::string& digits);
std::string decrement_digits(const std::string& digits);

}  // namespace tf::grammar
