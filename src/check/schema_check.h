// Does a tool call's arguments object fit the tool's parameter schema?
//
// Design: the JSON Schema keywords tool definitions use in practice — type (a name or a list),
// enum, const, required, properties, additionalProperties: false, items, minimum/maximum —
// checked recursively; other keywords are not judged. Violations name the path, e.g.
// "/unit: \"kelvin\" is not one of the enum".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf::check {

std::vector<std::string> schema_violations(const nlohmann::json& schema, const nlohmann::json& value,
                                           const std::string& path = "");

}  // namespace tf::check
