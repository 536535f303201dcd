// Numeric bounds in JSON Schema (json_schema_numbers.h, number_range_gbnf.h, decimal.h):
// the grammar for minimum / maximum / exclusiveMinimum / exclusiveMaximum is checked
// against every short number text, whose value is computed exactly here.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sampling/grammar/decimal.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/json_schema_gbnf.h"

namespace tf::grammar {
namespace {

using GrammarPtr = std::shared_ptr<const Grammar>;

GrammarPtr schema_grammar(const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.has_value()) << schema << ": " << gbnf.status().message();
  if (!gbnf) return nullptr;
  auto grammar = compile_gbnf(*gbnf);
  EXPECT_TRUE(grammar.has_value()) << grammar.status().message() << "\n" << *gbnf;
  return grammar ? *grammar : nullptr;
}

bool matches(const GrammarPtr& grammar, const std::string& text) {
  return grammar != nullptr && grammar_matches(*grammar, text);
}

std::string error_of(const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(schema);
  return gbnf ? "" : gbnf.status().message();
}

TEST(Decimal, ExactTextOfBounds) {
  EXPECT_EQ(Decimal::of(0.1).text(), "0.1");
  EXPECT_EQ(Decimal::of(-2.50).text(), "-2.5");
  EXPECT_EQ(Decimal::of(-0.0).text(), "0");
  EXPECT_EQ(Decimal::of(int64_t{-9223372036854775807 - 1}).text(), "-9223372036854775808");
  EXPECT_EQ(Decimal::of(uint64_t{18446744073709551615u}).text(), "18446744073709551615");
  EXPECT_EQ(Decimal::of(1e20).text(), "100000000000000000000");
  EXPECT_EQ(Decimal::of(1e-7).text(), "0.0000001");
}

TEST(Decimal, RoundingAndSteps) {
  auto text = [](const Decimal& d) { return d.text(); };
  EXPECT_EQ(text(floor_of(Decimal::of(1.5))), "1");
  EXPECT_EQ(text(ceil_of(Decimal::of(1.5))), "2");
  EXPECT_EQ(text(floor_of(Decimal::of(-0.5))), "-1");
  EXPECT_EQ(text(ceil_of(Decimal::of(-0.5))), "0");
  EXPECT_EQ(text(plus_one(Decimal::of(int64_t{-1}))), "0");
  EXPECT_EQ(text(minus_one(Decimal::of(int64_t{0}))), "-1");
  EXPECT_EQ(text(plus_one(Decimal::of(int64_t{999}))), "1000");
  EXPECT_EQ(text(minus_one(Decimal::of(int64_t{-999}))), "-1000");
  EXPECT_LT(compare(Decimal::of(-3.25), Decimal::of(-3.2)), 0);
  EXPECT_LT(compare(Decimal::of(0.12), Decimal::of(0.2)), 0);
  EXPECT_EQ(compare(Decimal::of(2.0), Decimal::of(int64_t{2})), 0);
}

TEST(NumberRangeGbnf, IntegerRangeFromTheBrief) {
  GrammarPtr g = schema_grammar(R"({"type": "integer", "minimum": -15, "maximum": 123})");
  for (const char* ok : {"-15", "-9", "0", "9", "99", "100", "119", "120", "123"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  // "-0" is 0, in range, and the unbounded integer rule allows it too.
  EXPECT_TRUE(matches(g, "-0"));
  for (const char* bad :
       {"-16", "-20", "124", "130", "200", "1000", "01", "-01", "00", "1.0", "1e2", "+5", ""})
    EXPECT_FALSE(matches(g, bad)) << bad;
}

// Every integer text in [-1200, 1200] (and some malformed ones) against the bounds.
void check_integers(const std::string& bounds, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  GrammarPtr g = schema_grammar(R"({"type": "integer", )" + bounds + "}");
  ASSERT_NE(g, nullptr) << bounds;
  for (int64_t v = -1200; v <= 1200; ++v) {
    bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
    EXPECT_EQ(matches(g, std::to_string(v)), in) << bounds << " value " << v;
  }
  bool zero_in = (!lo || 0 >= *lo) && (!hi || 0 <= *hi);
  EXPECT_EQ(matches(g, "-0"), zero_in) << bounds;
  for (const char* bad : {"007", "-007", "1.0", "5e1", "--1", "-"})
    EXPECT_FALSE(matches(g, bad)) << bounds << bad;
}

TEST(NumberRangeGbnf, IntegerRangesAgreeWithArithmetic) {
  check_integers(R"("minimum": 0, "maximum": 0)", 0, 0);
  check_integers(R"("minimum": 7)", 7, std::nullopt);
  check_integers(R"("maximum": -7)", std::nullopt, -7);
  check_integers(R"("minimum": -1000, "maximum": -999)", -1000, -999);
  check_integers(R"("minimum": -1099, "maximum": 1099)", -1099, 1099);
  check_integers(R"("minimum": 19, "maximum": 1001)", 19, 1001);
  check_integers(R"("minimum": 100, "maximum": 999)", 100, 999);
  check_integers(R"("minimum": 109, "maximum": 190)", 109, 190);
  check_integers(R"("exclusiveMinimum": -10, "exclusiveMaximum": 10)", -9, 9);
  check_integers(R"("exclusiveMaximum": 0)", std::nullopt, -1);
  check_integers(R"("exclusiveMinimum": 0)", 1, std::nullopt);
  // Fractional bounds round inward; the tighter of two bounds on a side applies.
  check_integers(R"("minimum": -2.5, "maximum": 10.5)", -2, 10);
  check_integers(R"("exclusiveMinimum": -2.5, "exclusiveMaximum": 10.5)", -2, 10);
  check_integers(R"("minimum": 5, "exclusiveMinimum": 5)", 6, std::nullopt);
  check_integers(R"("minimum": 9, "exclusiveMinimum": 5, "maximum": 50, "exclusiveMaximum": 60)", 9, 50);
}

TEST(NumberRangeGbnf, IntegerBoundsAtTheEdgesOfInt64AndBeyond) {
  GrammarPtr g = schema_grammar(R"({"type": "integer", "minimum": -9223372036854775808,
      "maximum": 18446744073709551615})");
  EXPECT_TRUE(matches(g, "-9223372036854775808"));
  EXPECT_FALSE(matches(g, "-9223372036854775809"));
  EXPECT_TRUE(matches(g, "18446744073709551615"));
  EXPECT_FALSE(matches(g, "18446744073709551616"));
  EXPECT_FALSE(matches(g, "100000000000000000000"));
  GrammarPtr safe = schema_grammar(R"({"type": "integer", "minimum": -9007199254740991,
      "maximum": 9007199254740991})");
  EXPECT_TRUE(matches(safe, "9007199254740991"));
  EXPECT_FALSE(matches(safe, "9007199254740992"));
  GrammarPtr huge = schema_grammar(R"({"type": "integer", "maximum": 1e30})");
  EXPECT_TRUE(matches(huge, "1000000000000000000000000000000"));  // 1e30 as a double is just above
  EXPECT_FALSE(matches(huge, "2000000000000000000000000000000"));
  EXPECT_TRUE(matches(huge, "-5000000000000000000000000000000000"));
}

// A number text's value times 1000 (texts here have at most 3 fraction digits).
int64_t thousandths(const std::string& text) {
  bool negative = text[0] == '-';
  std::string digits = text.substr(negative ? 1 : 0);
  size_t point = digits.find('.');
  std::string fraction = point == std::string::npos ? "" : digits.substr(point + 1);
  int64_t value = std::stoll(digits.substr(0, point)) * 1000 + std::stoll((fraction + "000").substr(0, 3));
  return negative ? -value : value;
}

// Texts: whole parts 0..12 with no fraction or 1..3 fraction digits, both signs.
std::vector<std::string> number_texts() {
  std::vector<std::string> out;
  for (int whole = 0; whole <= 12; ++whole) {
    std::vector<std::string> fractions = {""};
    for (int f = 0; f < 10; ++f) fractions.push_back("." + std::to_string(f));
    for (int f = 0; f < 100; f += 7)
      fractions.push_back("." + std::string(f < 10 ? "0" : "") + std::to_string(f));
    for (const char* f : {".250", ".500", ".499", ".501", ".001", ".000", ".999", ".750"})
      fractions.push_back(f);
    for (const std::string& f : fractions) {
      out.push_back(std::to_string(whole) + f);
      out.push_back("-" + std::to_string(whole) + f);
    }
  }
  return out;
}

struct Bound {
  int64_t thousandths;
  bool inclusive;
};

void check_numbers(const std::string& bounds, std::optional<Bound> lo, std::optional<Bound> hi) {
  GrammarPtr g = schema_grammar(R"({"type": "number", )" + bounds + "}");
  ASSERT_NE(g, nullptr) << bounds;
  for (const std::string& text : number_texts()) {
    int64_t v = thousandths(text);
    bool in = (!lo || v > lo->thousandths || (lo->inclusive && v == lo->thousandths)) &&
              (!hi || v < hi->thousandths || (hi->inclusive && v == hi->thousandths));
    EXPECT_EQ(matches(g, text), in) << bounds << " text " << text;
  }
  for (const char* bad : {"01", "1.", ".5", "1e0", "0.5e1", "--1", "-", "+1"})
    EXPECT_FALSE(matches(g, bad)) << bounds << " " << bad;
}

TEST(NumberRangeGbnf, NumberRangesAgreeWithArithmetic) {
  check_numbers(R"("exclusiveMinimum": 0, "maximum": 1)", Bound{0, false}, Bound{1000, true});
  check_numbers(R"("maximum": 1.5)", std::nullopt, Bound{1500, true});
  check_numbers(R"("exclusiveMaximum": 1.5)", std::nullopt, Bound{1500, false});
  check_numbers(R"("minimum": -2.25, "maximum": 11.75)", Bound{-2250, true}, Bound{11750, true});
  check_numbers(R"("exclusiveMinimum": -2.25, "exclusiveMaximum": 11.75)", Bound{-2250, false},
                Bound{11750, false});
  check_numbers(R"("minimum": 0.07)", Bound{70, true}, std::nullopt);
  check_numbers(R"("minimum": 3.5, "maximum": 3.57)", Bound{3500, true}, Bound{3570, true});
  check_numbers(R"("minimum": 3.05, "exclusiveMaximum": 3.5)", Bound{3050, true}, Bound{3500, false});
  check_numbers(R"("minimum": 2, "maximum": 2)", Bound{2000, true}, Bound{2000, true});
  check_numbers(R"("minimum": 0.5, "maximum": 0.5)", Bound{500, true}, Bound{500, true});
  check_numbers(R"("minimum": -0.5, "exclusiveMaximum": 0)", Bound{-500, true}, Bound{0, false});
  check_numbers(R"("exclusiveMinimum": -1, "maximum": -0.001)", Bound{-1000, false}, Bound{-1, true});
  check_numbers(R"("minimum": 9.999, "maximum": 10)", Bound{9999, true}, Bound{10000, true});
}

TEST(NumberRangeGbnf, NumberBoundaryFormsFromTheBrief) {
  GrammarPtr unit = schema_grammar(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 1})");
  for (const char* ok : {"0.5", "1", "1.0", "1.000", "0.0001", "0.00000000000000000001"})
    EXPECT_TRUE(matches(unit, ok)) << ok;
  for (const char* bad : {"0", "0.0", "-0", "-0.1", "1.01", "1.0000001", "2", "1e-3"})
    EXPECT_FALSE(matches(unit, bad)) << bad;
  GrammarPtr below = schema_grammar(R"({"type": "number", "maximum": 1.5})");
  for (const char* ok : {"1.5", "1.50", "1.49999", "-1000.5"}) EXPECT_TRUE(matches(below, ok)) << ok;
  EXPECT_FALSE(matches(below, "1.51"));
  EXPECT_FALSE(matches(below, "1.500001"));
  GrammarPtr strictly = schema_grammar(R"({"type": "number", "exclusiveMaximum": 1.5})");
  for (const char* bad : {"1.5", "1.50", "1.5000"}) EXPECT_FALSE(matches(strictly, bad)) << bad;
  EXPECT_TRUE(matches(strictly, "1.4999999"));
}

TEST(NumberRangeGbnf, ExtremeNumberBounds) {
  GrammarPtr tiny = schema_grammar(R"({"type": "number", "exclusiveMinimum": 1e-30, "maximum": 1e300})");
  EXPECT_FALSE(matches(tiny, "0.000000000000000000000000000001"));  // 1e-30 itself
  EXPECT_TRUE(matches(tiny, "0.0000000000000000000000000000011"));
  EXPECT_TRUE(matches(tiny, "1" + std::string(300, '0')));
  EXPECT_FALSE(matches(tiny, "2" + std::string(300, '0')));
  EXPECT_NE(schema_grammar(R"({"type": "number", "minimum": -1.7976931348623157e308})"), nullptr);
}

TEST(NumberRangeGbnf, BoundsBesideOtherTypes) {
  GrammarPtr g = schema_grammar(R"({"type": ["integer", "string", "null"], "minimum": 1, "maximum": 10})");
  for (const char* ok : {"1", "10", R"("abc")", R"("99")", "null"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"0", "11", "-1", "5.5"}) EXPECT_FALSE(matches(g, bad)) << bad;
  // number covers integer: the bounded number rule applies.
  GrammarPtr both = schema_grammar(R"({"type": ["number", "integer"], "maximum": 2.5})");
  EXPECT_TRUE(matches(both, "2.5"));
  EXPECT_FALSE(matches(both, "3"));
  // Without a type, bounds imply a number.
  GrammarPtr inferred = schema_grammar(R"({"minimum": 3})");
  EXPECT_TRUE(matches(inferred, "3.5"));
  EXPECT_FALSE(matches(inferred, "2.9"));
  // Inside objects, and for a string the bounds do not apply.
  GrammarPtr object = schema_grammar(R"({"type": "object", "properties": {"age": {"type": "integer",
      "minimum": 0, "maximum": 150}}, "required": ["age"]})");
  EXPECT_TRUE(matches(object, R"({"age": 42})"));
  EXPECT_FALSE(matches(object, R"({"age": 151})"));
  EXPECT_FALSE(matches(object, R"({"age": -1})"));
}

// Draft 4 / OpenAPI 3.0: a boolean exclusiveMinimum / exclusiveMaximum makes the bound beside it
// exclusive (FastAPI and other OpenAPI 3.0 generators still write them).
TEST(NumberRangeGbnf, Draft4BooleanExclusiveBounds) {
  GrammarPtr positive = schema_grammar(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})");
  EXPECT_FALSE(matches(positive, "0"));
  EXPECT_FALSE(matches(positive, "-1"));
  EXPECT_TRUE(matches(positive, "1"));
  EXPECT_TRUE(matches(positive, "250"));
  GrammarPtr below_one = schema_grammar(R"({"type": "number", "maximum": 1, "exclusiveMaximum": true})");
  EXPECT_FALSE(matches(below_one, "1"));
  EXPECT_FALSE(matches(below_one, "1.0"));
  EXPECT_TRUE(matches(below_one, "0.99"));
  EXPECT_TRUE(matches(below_one, "-3"));
  GrammarPtr closed =
      schema_grammar(R"({"type": "integer", "minimum": 0, "exclusiveMinimum": false, "maximum": 2})");
  EXPECT_TRUE(matches(closed, "0"));
  EXPECT_TRUE(matches(closed, "2"));
  EXPECT_FALSE(matches(closed, "3"));
  // Without minimum beside it the flag bounds nothing.
  GrammarPtr free = schema_grammar(R"({"type": "integer", "exclusiveMinimum": true})");
  EXPECT_TRUE(matches(free, "-7"));
  EXPECT_EQ(error_of(R"({"type": "integer", "minimum": 3, "exclusiveMinimum": true, "maximum": 3})"),
            "json_schema: /: no integer satisfies 'minimum' 3 and 'maximum' 3 (the range is empty)");
}

TEST(NumberRangeGbnf, UnsatisfiableOrMalformedBoundsAreRefusedWithThePath) {
  EXPECT_EQ(
      error_of(R"({"properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}}})"),
      "json_schema: /properties/n: no integer satisfies 'minimum' 5 and 'maximum' 1 (the range is empty)");
  EXPECT_EQ(error_of(R"({"type": "number", "exclusiveMinimum": 1, "maximum": 1})"),
            "json_schema: /: no number satisfies 'exclusiveMinimum' 1 and 'maximum' 1 (the range is empty)");
  // Real numbers lie between 1 and 2, integers do not.
  EXPECT_NE(error_of(R"({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2})")
                .find("no integer satisfies 'exclusiveMinimum' 1 and 'exclusiveMaximum' 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": 1.2, "maximum": 1.8})").find("no integer"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 2})"), "");
  EXPECT_EQ(error_of(R"({"items": {"type": "number", "maximum": "10"}})"),
            "json_schema: /items: 'maximum' must be a number, got \"10\"");
  EXPECT_NE(
      error_of(R"({"type": "number", "minimum": 0, "exclusiveMinimum": "yes"})").find("must be a number"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"type": "integer", "minimum": null})").find("must be a number"), std::string::npos);
}

}  // namespace
}  // namespace tf::grammar
