// JSON text from clients (request bodies, schemas and tool-call arguments sent as strings)
// parsed with bounds, so that no input costs quadratic time or deep recursion later.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tf::text {

// Deeper nesting is refused: copying, dumping, comparing and rendering a value recurse.
constexpr int kMaxJsonDepth = 256;

// Parses `text` into an insertion-ordered value in time linear in its size. nlohmann's own
// ordered_json parse scans an object's keys for a duplicate on every insert, which is
// quadratic (one object of 200k members took a minute of CPU). A repeated key keeps its
// first position and takes the last value, as nlohmann's parse does. Errors (invalid
// argument): nlohmann's parse error, or nesting deeper than max_depth.
Expected<nlohmann::ordered_json> parse_json(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace tf::text
