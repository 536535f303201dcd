// See decimal.h.
#include "sampling/grammar/decimal.h"

#include <array>
#include <charconv>
#include <string_view>

namespace tf::grammar {
namespace {

// Drops leading zeros of the whole part, trailing zeros of the fraction, and the sign
// of zero.
Decimal normalized(Decimal d) {
  size_t first = d.whole.find_first_not_of('0');
  d.whole = first == std::string::npos ? "0" : d.whole.substr(first);
  size_t last = d.fraction.find_last_not_of('0');
  d.fraction = last == std::string::npos ? "" : d.fraction.substr(0, last + 1);
  if (d.is_zero()) d.negative = false;
  return d;
}

Decimal from_text(std::string_view text) {  // "-123.450", "7"
  Decimal d;
  if (!text.empty() && text.front() == '-') {
    d.negative = true;
    text.remove_prefix(1);
  }
  size_t point = text.find('.');
  d.whole = std::string(text.substr(0, point));
  if (point != std::string_view::npos) d.fraction = std::string(text.substr(point + 1));
  return normalized(std::move(d));
}

// Compares natural numbers given as digit strings without leading zeros.
int compare_digits(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b);
}

int compare_magnitudes(const Decimal& a, const Decimal& b) {
  if (int c = compare_digits(a.whole, b.whole); c != 0) return c;
  // Without trailing zeros, the string order of two fractions is their numeric order.
  return a.fraction.compare(b.fraction);
}

}  // namespace

Decimal Decimal::of(int64_t value) { return from_text(std::to_string(value)); }

Decimal Decimal::of(uint64_t value) { return from_text(std::to_string(value)); }

Decimal Decimal::of(double value) {
  std::array<char, 1100> buffer;  // fixed-point text of any double (at most ~770 characters)
  auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::fixed);
  return from_text(std::string_view(buffer.data(), result.ptr - buffer.data()));
}

std::string Decimal::text() const {
  return (negative ? "-" : "") + whole + (fraction.empty() ? "" : "." + fraction);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = compare_magnitudes(a, b);
  return a.negative ? -magnitude : magnitude;
}

Decimal negated(const Decimal& value) {
  Decimal out = value;
  out.negative = !value.negative && !value.is_zero();
  return out;
}

Decimal floor_of(const Decimal& value) {
  if (value.is_integer()) return value;
  Decimal out{value.negative, value.negative ? increment_digits(value.whole) : value.whole, ""};
  return normalized(std::move(out));
}

Decimal ceil_of(const Decimal& value) { return negated(floor_of(negated(value))); }

Decimal plus_one(const Decimal& value) {
  if (value.negative) return normalized({true, decrement_digits(value.whole), ""});
  return {false, increment_digits(value.whole), ""};
}

Decimal minus_one(const Decimal& value) { return negated(plus_one(negated(value))); }

std::string increment_digits(const std::string& digits) {
  std::string out = digits;
  for (size_t i = out.size(); i-- > 0;) {
    if (out[i] != '9') {
      ++out[i];
      return out;
    }
    out[i] = '0';
  }
  return "1" + out;
}

std::string decrement_digits(const std::string& digits) {
  std::string out = digits;
  for (size_t i = out.size(); i-- > 0;) {
    if (out[i] != '0') {
      --out[i];
      break;
    }
    out[i] = '9';
  }
  size_t first = out.find_first_not_of('0');
  return first == std::string::npos ? "0" : out.substr(first);
}

}  // namespace tf::grammar
