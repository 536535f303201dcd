// See json_fields.h.
#include "server/json_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace tf::server {

namespace {

std::string type_name(const Json& v) { return v.type_name(); }

std::string fmt_num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

const Json* json_field(const Json& obj, const char* name) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

void require_object(const Json& obj, const std::string& param) {
  if (!obj.is_object()) throw bad_request("'" + param + "' must be a JSON object, got " + type_name(obj), param);
}

std::optional<double> json_number(const Json& obj, const char* name, double lo, double hi) {
  const Json* v = json_field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad_request(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    throw bad_request(std::string("'") + name + "' must be between " + fmt_num(lo) + " and " + fmt_num(hi), name);
  return d;
}

std::optional<int64_t> json_int(const Json& obj, const char* name, int64_t lo, int64_t hi) {
  const Json* v = json_field(obj, name);
  if (!v) return std::nullopt;
  std::string range = std::string("'") + name + "' must be an integer between " + std::to_string(lo) + " and " +
                      std::to_string(hi);
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    // nlohmann stores every non-negative literal as unsigned: check both bounds.
    if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) throw bad_request(range, name);
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) throw bad_request(range, name);
    return i;
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    // 5.0 is accepted as 5 (pydantic does the same); 5.5 and 1e300 are not.
    if (!std::isfinite(d) || d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
      throw bad_request(range, name);
    return static_cast<int64_t>(d);
  }
  throw bad_request(std::string("'") + name + "' must be an integer, got " + type_name(*v), name);
}

std::optional<bool> json_bool(const Json& obj, const char* name) {
  const Json* v = json_field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw bad_request(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
  return v->get<bool>();
}

std::optional<std::string> json_string(const Json& obj, const char* name) {
  const Json* v = json_field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request(std::string("'") + name + "' must be a string, got " + type_name(*v), name);
  return v->get<std::string>();
}

std::vector<std::string> json_string_or_list(const Json& obj, const char* name, size_t max_items) {
  const Json* v = json_field(obj, name);
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > max_items)
      throw bad_request(std::string("'") + name + "' has more than " + std::to_string(max_items) + " items", name);
    for (const Json& s : *v) {
      if (!s.is_string()) throw bad_request(std::string("'") + name + "' must be a string or a list of strings", name);
      out.push_back(s.get<std::string>());
    }
  } else {
    throw bad_request(std::string("'") + name + "' must be a string or a list of strings, got " + type_name(*v), name);
  }
  for (const std::string& s : out)
    if (s.empty()) throw bad_request(std::string("'") + name + "' must not contain empty strings", name);
  return out;
}

std::vector<int32_t> json_int_list(const Json& obj, const char* name, int64_t lo, int64_t hi) {
  const Json* v = json_field(obj, name);
  std::vector<int32_t> out;
  if (!v) return out;
  if (!v->is_array()) throw bad_request(std::string("'") + name + "' must be a list of integers", name);
  for (const Json& x : *v) {
    if (!x.is_number_integer()) throw bad_request(std::string("'") + name + "' must be a list of integers", name);
    bool neg = x.is_number_unsigned() ? false : x.get<int64_t>() < lo;
    if (neg || (x.is_number_unsigned() ? x.get<uint64_t>() > static_cast<uint64_t>(hi) : x.get<int64_t>() > hi))
      throw bad_request(std::string("'") + name + "' has an integer out of range [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]",
                        name);
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return out;
}

}  // namespace tf::server
