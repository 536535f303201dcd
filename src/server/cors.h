// Cross-origin requests from browsers (CORS_ORIGINS): which web origins may call the server,
// the answer to a browser's preflight, and the headers that let a page read an answer.
//
// A page on another origin (a web app on localhost:3000, a hosted chat front end) calling the
// server first sends a preflight, `OPTIONS <path>` with `Origin` and
// `Access-Control-Request-Method` and never a credential: it is answered 204 with what may be
// sent (methods, the requested headers, for how long that holds), without an API key. The real
// request then carries `Origin`, and its answer (JSON, an error of ours or of httplib's, or an
// SSE stream) carries `Access-Control-Allow-Origin` and the custom headers a page may read. An
// origin not allowed gets no CORS header at all, so the browser keeps the answer from the page;
// its preflight is a 403 that says why (the request still runs for a client that is no browser:
// API keys are what keep others out).
#pragma once

#include <httplib.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf::server {

// How long a browser may reuse a preflight's answer (Chrome caps it at 2 h, Firefox at 24 h).
constexpr int kCorsMaxAgeS = 86400;

class CorsPolicy {
 public:
  // A CORS_ORIGINS value: "*" any origin, "" (or only commas and spaces) off, else origins
  // separated by commas, each `scheme://host[:port]` as a browser sends it (no path, no
  // trailing slash, no default port), matched whole and ASCII case-insensitively. An entry
  // that cannot be an origin is refused, naming it.
  static Expected<CorsPolicy> parse(std::string_view list);

  bool enabled() const { return any_ || !origins_.empty(); }
  bool any() const { return any_; }
  // The Access-Control-Allow-Origin of an answer to a request from `origin`: "*" when any
  // origin may call, the origin itself when listed, nullopt when not (or CORS is off, or the
  // request has no Origin).
  std::optional<std::string> allow_origin(std::string_view origin) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // lower case
};

// The Access-Control-Allow-Headers of a preflight asking for `requested`
// (Access-Control-Request-Headers): the same names when they are a plain list of header names,
// else (none asked, or not a list of names) a fixed list of those our clients send.
std::string cors_allow_headers(std::string_view requested);

// Whether a request is a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method.
bool is_cors_preflight(const httplib::Request& req);

// The answer to a preflight: 204 with the CORS headers when its origin is allowed, else a 403
// error object without them.
void answer_cors_preflight(const CorsPolicy& policy, const httplib::Request& req, httplib::Response& res);

// Every answer, just before it is written (httplib's post-routing handler, which runs for our
// answers, httplib's errors and streams alike): Access-Control-Allow-Origin and
// Access-Control-Expose-Headers for an allowed Origin, and `Vary: Origin` when the answer
// depends on it (a list of origins).
void add_cors_headers(const CorsPolicy& policy, const httplib::Request& req, httplib::Response& res);

}  // namespace tf::server
