// Typed, range-checked reads of request fields. Every failure throws a 400 ApiError
// whose param names the field, so hostile input (wrong types, huge numbers, NaN-like
// values, negative counts) never reaches the engine. Absent and null mean "unset".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf::server {

// Insertion-ordered, so that what clients send (messages, tool schemas, arguments) reaches the
// chat template in their key order, as transformers renders it; replies keep the order they
// are built in.
using Json = nlohmann::ordered_json;

// The member or nullptr when absent or null. `obj` must be an object.
const Json* json_field(const Json& obj, const char* name);

std::optional<double> json_number(const Json& obj, const char* name, double lo, double hi);
std::optional<int64_t> json_int(const Json& obj, const char* name, int64_t lo, int64_t hi);
std::optional<bool> json_bool(const Json& obj, const char* name);
std::optional<std::string> json_string(const Json& obj, const char* name);
// A string or a list of strings (`stop`), at most max_items.
std::vector<std::string> json_string_or_list(const Json& obj, const char* name, size_t max_items);
// A list of integers in [lo, hi].
std::vector<int32_t> json_int_list(const Json& obj, const char* name, int64_t lo, int64_t hi);
// Throws unless `obj` is a JSON object (the request body or a nested object).
void require_object(const Json& obj, const std::string& param);

}  // namespace tf::server
