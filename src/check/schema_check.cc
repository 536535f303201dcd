#include "check/schema_check.h"

namespace tf::check {
namespace {

using Json = nlohmann::json;

bool has_type(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() &&
            v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "null") return v.is_null();
  return true;  // an unknown type name is not judged
}

std::string short_dump(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

std::vector<std::string> schema_violations(const Json& schema, const Json& value, const std::string& path) {
  std::vector<std::string> out;
  if (!schema.is_object()) return out;
  const std::string at = path.empty() ? "/" : path;
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    bool ok = true;
    if (t.is_string())
      ok = has_type(value, t.get<std::string>());
    else if (t.is_array()) {
      ok = false;
      for (const Json& one : t)
        if (one.is_string() && has_type(value, one.get<std::string>())) ok = true;
    }
    if (!ok) {
      out.push_back(at + ": " + short_dump(value) + " is not of type " + t.dump());
      return out;
    }
  }
  if (schema.contains("enum") && schema["enum"].is_array()) {
    bool found = false;
    for (const Json& e : schema["enum"]) found = found || e == value;
    if (!found) out.push_back(at + ": " + short_dump(value) + " is not one of the enum");
  }
  if (schema.contains("const") && schema["const"] != value)
    out.push_back(at + ": " + short_dump(value) + " is not the const");
  if (value.is_number()) {
    if (schema.contains("minimum") && schema["minimum"].is_number() &&
        value.get<double>() < schema["minimum"].get<double>())
      out.push_back(at + ": " + short_dump(value) + " is below the minimum");
    if (schema.contains("maximum") && schema["maximum"].is_number() &&
        value.get<double>() > schema["maximum"].get<double>())
      out.push_back(at + ": " + short_dump(value) + " is above the maximum");
  }
  if (value.is_object()) {
    const Json* props =
        schema.contains("properties") && schema["properties"].is_object() ? &schema["properties"] : nullptr;
    if (schema.contains("required") && schema["required"].is_array())
      for (const Json& name : schema["required"])
        if (name.is_string() && !value.contains(name.get<std::string>()))
          out.push_back(at + ": the required property \"" + name.get<std::string>() + "\" is missing");
    const bool closed = schema.contains("additionalProperties") && schema["additionalProperties"] == false;
    for (const auto& [key, v] : value.items()) {
      if (props && props->contains(key)) {
        auto inner = schema_violations((*props)[key], v, path + "/" + key);
        out.insert(out.end(), inner.begin(), inner.end());
      } else if (closed) {
        out.push_back(at + ": the property \"" + key + "\" is not allowed");
      }
    }
  }
  if (value.is_array() && schema.contains("items") && schema["items"].is_object()) {
    for (size_t i = 0; i < value.size(); ++i) {
      auto inner = schema_violations(schema["items"], value[i], path + "/" + std::to_string(i));
      out.insert(out.end(), inner.begin(), inner.end());
    }
  }
  return out;
}

}  // namespace tf::check
