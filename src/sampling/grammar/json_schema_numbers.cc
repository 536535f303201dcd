// See json_schema_numbers.h.
#include "sampling/grammar/json_schema_numbers.h"

namespace tf::grammar {
namespace {

using Json = nlohmann::ordered_json;

struct BoundKeyword {
  const char* name;
  bool lower, inclusive;
};

constexpr BoundKeyword kBoundKeywords[] = {{"minimum", true, true},
                                           {"exclusiveMinimum", true, false},
                                           {"maximum", false, true},
                                           {"exclusiveMaximum", false, false}};

Decimal decimal_of(const Json& number) {
  if (number.is_number_unsigned()) return Decimal::of(number.get<uint64_t>());
  if (number.is_number_integer()) return Decimal::of(number.get<int64_t>());
  return Decimal::of(number.get<double>());
}

// The node's range, with the keyword that set each side.
struct SchemaBounds {
  NumberRange range;
  std::string lower_keyword, upper_keyword;
};

// Whether `key` is the draft-4 boolean true (exclusiveMinimum: true makes minimum exclusive;
// false, or true without the bound beside it, changes nothing).
bool draft4_flag(const Json& node, const char* key) {
  auto it = node.find(key);
  return it != node.end() && it->is_boolean() && it->get<bool>();
}

SchemaBounds schema_bounds(const Json& node) {
  SchemaBounds out;
  const bool exclusive_min = draft4_flag(node, "exclusiveMinimum"),
             exclusive_max = draft4_flag(node, "exclusiveMaximum");
  for (const BoundKeyword& keyword : kBoundKeywords) {
    auto it = node.find(keyword.name);
    if (it == node.end() || it->is_boolean()) continue;
    Decimal value = decimal_of(*it);
    const bool inclusive = keyword.inclusive && !(keyword.lower ? exclusive_min : exclusive_max);
    std::optional<NumberBound>& side = keyword.lower ? out.range.lower : out.range.upper;
    int tighter = side ? compare(value, side->value) * (keyword.lower ? 1 : -1) : 1;
    if (tighter > 0 || (tighter == 0 && !inclusive)) {
      side = NumberBound{std::move(value), inclusive};
      (keyword.lower ? out.lower_keyword : out.upper_keyword) = keyword.name;
    }
  }
  return out;
}

}  // namespace

Expected<std::optional<std::string>> bounded_number_gbnf(const nlohmann::ordered_json& node, bool integer,
                                                         const AddRule& add_rule) {
  SchemaBounds bounds = schema_bounds(node);
  if (!bounds.range.lower && !bounds.range.upper) return std::optional<std::string>();
  std::optional<std::string> body =
      integer ? integer_range_gbnf(bounds.range, add_rule) : fixed_point_range_gbnf(bounds.range, add_rule);
  if (body) return body;
  // Only a range bounded on both sides can be empty.
  return invalid_argument(std::string("no ") + (integer ? "integer" : "number") + " satisfies '" +
                          bounds.lower_keyword + "' " + node.at(bounds.lower_keyword).dump() + " and '" +
                          bounds.upper_keyword + "' " + node.at(bounds.upper_keyword).dump() +
                          " (the range is empty)");
}

}  // namespace tf::grammar
