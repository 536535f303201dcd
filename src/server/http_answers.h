// How the HTTP server writes answers: JSON bodies moved into the response, OpenAI's error
// object (Anthropic's on the Messages API's routes), the one mapping of whatever a handler
// throws to an error object, and the answers to the errors httplib finds itself (no route,
// framing, a body past its limit, a request head cut short: bounded_http_server.h).
#pragma once

#include <httplib.h>

#include <exception>
#include <string>

#include "core/status.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace tf::server {

// httplib's set_content copies its string: an answer (up to a prompt's ids, or its echo) is
// moved in instead.
void set_json_text(httplib::Response& res, int status, std::string text);
void write_json(httplib::Response& res, int status, const Json& body);

// OpenAI's error object, or Anthropic's on the Messages API's routes.
void write_error(httplib::Response& res, const ApiError& e, bool anthropic = false);
bool is_anthropic_path(const std::string& path);

// The one error mapping: runs `f`, turning what it throws into an error object, so that no
// request, however hostile, takes the server down.
template <typename F>
void guarded(httplib::Response& res, bool anthropic, F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    write_error(res, e, anthropic);
  } catch (const StatusError& e) {
    write_error(res, api_error_from_status(e.status()), anthropic);
  } catch (const Json::exception& e) {
    // A JSON type error that validation missed is still the client's input.
    write_error(res, bad_request(std::string("invalid request: ") + e.what()), anthropic);
  } catch (const std::exception& e) {
    write_error(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error"), anthropic);
  } catch (...) {
    write_error(res, ApiError(500, "internal error", "server_error"), anthropic);
  }
}

// httplib's error handler: an error object for the statuses httplib answers by itself (our own
// error answers already carry one). `head_timeout_s` is the head deadline its 408 names.
void answer_httplib_error(const httplib::Request& req, httplib::Response& res, int head_timeout_s);

}  // namespace tf::server
