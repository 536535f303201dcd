// See responses_reasoning.h.
#include "server/responses_reasoning.h"

#include <string_view>

#include "core/base64.h"
#include "server/api_error.h"

namespace tf::server {
namespace {

constexpr std::string_view kEncryptedPrefix = "tfr1:";

// The texts of a list of parts of one type, joined by blank lines; nullopt when none.
std::optional<std::string> parts_text(const Json& item, const char* field, const char* type,
                                      const std::string& param) {
  const Json* parts = json_field(item, field);
  if (!parts) return std::nullopt;
  const std::string pp = param + "." + field;
  if (!parts->is_array()) throw bad_request("'" + pp + "' must be an array", pp);
  std::optional<std::string> text;
  for (size_t i = 0; i < parts->size(); ++i) {
    const Json& p = (*parts)[i];
    const std::string ip = pp + "[" + std::to_string(i) + "]";
    if (!p.is_object()) throw bad_request("'" + ip + "' must be an object", ip);
    if (json_string(p, "type").value_or(type) != type) continue;
    auto t = json_string(p, "text");
    if (!t) throw bad_request("'" + ip + ".text' is required", ip + ".text");
    text = text ? *text + "\n\n" + *t : *t;
  }
  return text;
}

}  // namespace

std::string reasoning_encrypted_content(const std::string& text) {
  return std::string(kEncryptedPrefix) + encode_base64(text);
}

std::optional<std::string> reasoning_item_text(const Json& item, const std::string& param) {
  if (auto text = parts_text(item, "content", "reasoning_text", param)) return text;
  if (auto text = parts_text(item, "summary", "summary_text", param)) return text;
  auto sealed = json_string(item, "encrypted_content");
  if (!sealed || std::string_view(*sealed).substr(0, kEncryptedPrefix.size()) != kEncryptedPrefix)
    return std::nullopt;
  const std::string_view body = std::string_view(*sealed).substr(kEncryptedPrefix.size());
  auto text = decode_base64(body, body.size(), "encrypted_content");
  if (!text) throw bad_request("'" + param + ".encrypted_content' is damaged", param + ".encrypted_content");
  return *text;
}

}  // namespace tf::server
