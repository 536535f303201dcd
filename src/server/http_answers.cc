// See http_answers.h.
#include "server/http_answers.h"

#include <optional>

#include "server/anthropic_messages.h"
#include "server/bounded_http_server.h"

namespace tf::server {

namespace {

// The answer to a request whose head was cut short (httplib's `status`: 414 for a request line
// past 8 KiB, else 400): 431 past the size limits, 408 past the deadline.
ApiError head_refusal_error(HeadRefusal refusal, int status, int timeout_s) {
  const std::string limit = std::to_string(kHeadMaxBytes >> 10) + " KiB";
  switch (refusal) {
    case HeadRefusal::kTooSlow:
      return ApiError(
          408, "the request line and headers did not arrive within " + std::to_string(timeout_s) + " s",
          "invalid_request_error", std::nullopt, "request_timeout");
    case HeadRefusal::kTooManyLines:
      return ApiError(431,
                      "request header fields too large: more than " + std::to_string(kHeadMaxLines - 2) +
                          " header fields",
                      "invalid_request_error", std::nullopt, "request_header_fields_too_large");
    case HeadRefusal::kTooLarge:
    case HeadRefusal::kNone:
      break;
  }
  if (status == 414)
    return ApiError(414, "the request line exceeds " + limit, "invalid_request_error", std::nullopt,
                    "uri_too_long");
  return ApiError(431, "request header fields too large: the request line and headers exceed " + limit,
                  "invalid_request_error", std::nullopt, "request_header_fields_too_large");
}

}  // namespace

void set_json_text(httplib::Response& res, int status, std::string text) {
  res.status = status;
  res.body = std::move(text);
  res.set_header("Content-Type", "application/json");
}

void write_json(httplib::Response& res, int status, const Json& body) {
  set_json_text(res, status, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void write_error(httplib::Response& res, const ApiError& e, bool anthropic) {
  res.status = anthropic ? anthropic_http_status(e) : e.http_status();
  if (e.http_status() == 429 || e.http_status() == 503) res.set_header("Retry-After", "1");
  const Json body = anthropic ? anthropic_error_json(e) : e.to_json();
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

// httplib answers 404 (no route), 413 (a body past its limit), 400 (framing), 414 (a request
// line past 8 KiB). It also parses application/x-www-form-urlencoded bodies (curl -d's default
// type) and refuses those over 8 KiB with 413: that limit is named, not the 96 MiB one.
void answer_httplib_error(const httplib::Request& req, httplib::Response& res, int head_timeout_s) {
  if (!res.body.empty()) return;
  // A head cut short by its limits (bounded_http_server.h): httplib says 400 (414 for a request
  // line); the connection closes after the answer.
  const HeadRefusal refusal = head_refusal_on_this_thread();
  if (refusal != HeadRefusal::kNone) {
    res.set_header("Connection", "close");
    write_error(res, head_refusal_error(refusal, res.status, head_timeout_s), is_anthropic_path(req.path));
    return;
  }
  const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
  std::string msg = res.status == 404           ? "no route for " + req.method + " " + req.path
                    : res.status == 413 && form ? std::string(
                                                      "a Content-Type: application/x-www-form-urlencoded "
                                                      "body is limited to 8 KiB; send "
                                                      "Content-Type: application/json")
                    : res.status == 413 ? std::string("request body exceeds 96 MiB")
                    : res.status == 414 ? std::string("the request line exceeds 8 KiB")
                                        : "HTTP error " + std::to_string(res.status);
  write_error(res, ApiError(res.status, msg, res.status >= 500 ? "server_error" : "invalid_request_error"),
              is_anthropic_path(req.path));
}

}  // namespace tf::server
