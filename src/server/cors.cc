// See cors.h.
#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include "core/trim.h"
#include "server/api_error.h"
#include "server/http_answers.h"

namespace tf::server {

namespace {

// What a browser's page may send and call: the routes' methods.
constexpr const char* kAllowMethods = "GET, POST, DELETE, OPTIONS";
// The headers our clients send (OpenAI's and Anthropic's SDKs, the chat page), for a preflight
// that names none or names them oddly.
constexpr const char* kDefaultAllowHeaders =
    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
    "anthropic-dangerous-direct-browser-access, OpenAI-Beta, OpenAI-Organization, OpenAI-Project, "
    "x-request-id";
// The headers of our answers that a page may read besides the safelisted ones (Content-Type...).
constexpr const char* kExposeHeaders = "x-request-id, Retry-After";
// The longest Access-Control-Request-Headers echoed (the OpenAI SDK's dozen x-stainless-* names
// take ~250 bytes).
constexpr size_t kMaxRequestedHeaders = 4096;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// RFC 9110's tchar: the characters of a header name.
bool is_token_char(unsigned char c) {
  return std::isalnum(c) ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

// Why `entry` is not an origin as a browser sends it ("" when it is one).
std::string origin_problem(std::string_view entry) {
  if (entry == "null")
    return "'null' is the origin of file:// pages and sandboxed frames, which any site can make; use * "
           "to allow every origin";
  const size_t sep = entry.find("://");
  if (sep == std::string_view::npos || sep == 0) return "an origin is scheme://host[:port]";
  for (size_t i = 0; i < sep; ++i) {
    const unsigned char c = static_cast<unsigned char>(entry[i]);
    if (!std::isalnum(c) && c != '+' && c != '-' && c != '.') return "the scheme has an odd character";
  }
  const std::string_view host = entry.substr(sep + 3);
  if (host.empty()) return "no host";
  if (host.back() == '/') return "no trailing slash: browsers send an origin without one";
  for (unsigned char c : host) {
    if (c == '/' || c == '?' || c == '#') return "an origin has no path, query or fragment";
    if (c == '*') return "wildcards are not supported: list each origin, or use * alone for any";
    if (c <= ' ' || c >= 0x7f || c == '@' || c == ',' || c == '"' || c == '\\')
      return "a host of letters, digits, '-', '.', '[', ']' and a :port";
  }
  return "";
}

}  // namespace

Expected<CorsPolicy> CorsPolicy::parse(std::string_view list) {
  CorsPolicy policy;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view entry = trim_ascii_whitespace(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (entry.empty()) continue;
    if (entry == "*") {
      policy.any_ = true;
      continue;
    }
    const std::string problem = origin_problem(entry);
    if (!problem.empty())
      return invalid_argument("CORS_ORIGINS: '" + std::string(entry) + "' is not an origin: " + problem);
    policy.origins_.push_back(lower(entry));
  }
  return policy;
}

std::optional<std::string> CorsPolicy::allow_origin(std::string_view origin) const {
  if (origin.empty()) return std::nullopt;
  if (any_) return std::string("*");
  const std::string key = lower(origin);
  if (std::find(origins_.begin(), origins_.end(), key) == origins_.end()) return std::nullopt;
  return std::string(origin);
}

std::string cors_allow_headers(std::string_view requested) {
  requested = trim_ascii_whitespace(requested);
  if (requested.empty() || requested.size() > kMaxRequestedHeaders) return kDefaultAllowHeaders;
  for (std::string_view rest = requested; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view name = trim_ascii_whitespace(rest.substr(0, comma));
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return is_token_char(c); }))
      return kDefaultAllowHeaders;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
    if (trim_ascii_whitespace(rest).empty()) return kDefaultAllowHeaders;  // a trailing comma
  }
  return std::string(requested);
}

bool is_cors_preflight(const httplib::Request& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") &&
         req.has_header("Access-Control-Request-Method");
}

void answer_cors_preflight(const CorsPolicy& policy, const httplib::Request& req, httplib::Response& res) {
  const std::string origin = req.get_header_value("Origin");
  const std::optional<std::string> allowed = policy.allow_origin(origin);
  if (!allowed) {
    // Without CORS headers the browser fails the call whatever the status; a 403 that names
    // the origin tells whoever reads the network log why.
    write_error(res,
                ApiError(403, "origin " + origin + " is not allowed to call this server (CORS_ORIGINS)",
                         "invalid_request_error", std::nullopt, "origin_not_allowed"),
                is_anthropic_path(req.path));
    return;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Origin", *allowed);
  res.set_header("Access-Control-Allow-Methods", kAllowMethods);
  res.set_header("Access-Control-Allow-Headers",
                 cors_allow_headers(req.get_header_value("Access-Control-Request-Headers")));
  res.set_header("Access-Control-Max-Age", std::to_string(kCorsMaxAgeS));
}

void add_cors_headers(const CorsPolicy& policy, const httplib::Request& req, httplib::Response& res) {
  if (!policy.enabled()) return;
  // With a list, the answer depends on the Origin: a cache must not give one origin's to another.
  if (!policy.any() && !res.has_header("Vary")) res.set_header("Vary", "Origin");
  if (res.has_header("Access-Control-Allow-Origin")) return;  // a preflight's own
  const std::optional<std::string> allowed = policy.allow_origin(req.get_header_value("Origin"));
  if (!allowed) return;
  res.set_header("Access-Control-Allow-Origin", *allowed);
  res.set_header("Access-Control-Expose-Headers", kExposeHeaders);
}

}  // namespace tf::server
