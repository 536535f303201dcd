// JSON Schema's numeric bounds -- minimum, maximum, exclusiveMinimum, exclusiveMaximum --
// as grammar (number_range_gbnf.h), for json_schema_gbnf.h's "integer" and "number".
// Where a side has both forms (minimum and exclusiveMinimum), the tighter one applies.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"
#include "sampling/grammar/number_range_gbnf.h"

namespace tf::grammar {

// The GBNF sequence for the integer (or fixed-point number) texts within `node`'s
// bounds, or nullopt when `node` has none. The bounds must be numbers. A range that no
// value satisfies is kInvalidArgument, naming the two keywords (the caller adds the
// schema path).
Expected<std::optional<std::string>> bounded_number_gbnf(const nlohmann::ordered_json& node, bool integer,
                                                         const AddRule& add_rule);

}  // namespace tf::grammar
