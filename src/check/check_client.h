// The HTTP side of `tensorfold check`: JSON requests to a running server, streamed or not.
//
// Design: one cpp-httplib client per caller (a client is not shared between threads; the
// pressure check makes one per request). Every reply is kept whole, with its HTTP status
// and headers, because the checks judge the server's answers, including its refusals (a
// 400's error code, a 429's Retry-After). A transport failure is the only error.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/http_load_generator.h"
#include "core/status.h"

namespace tf::check {

using Json = nlohmann::json;

// One reply: status, headers, and the body parsed as JSON (null when it is not JSON).
struct HttpReply {
  int status = 0;
  httplib::Headers headers;
  std::string body;
  Json json;
  double seconds = 0.0;  // from sending to the last byte
  // "HTTP 400 context_length_exceeded: ..." from an OpenAI error body, else the status and its first bytes.
  std::string describe() const;
  // error.code (or error.type) of an OpenAI error body; "" when there is none.
  std::string error_code() const;
};

// A streamed reply: the `data:` payloads parsed as JSON, in order ("[DONE]" noted, not kept).
struct StreamReply {
  int status = 0;
  std::vector<Json> chunks;
  bool done = false;        // [DONE] arrived
  std::string bad_payload;  // the first payload that was not JSON, if any
  std::string body;         // the body of a non-200 reply
  double seconds = 0.0;
};

class CheckClient {
 public:
  CheckClient(bench::HttpTarget target, std::string api_key, double timeout_s);

  Expected<HttpReply> get(const std::string& path);
  Expected<HttpReply> post(const std::string& path, const Json& body);
  Expected<StreamReply> post_stream(const std::string& path, const Json& body);

  const bench::HttpTarget& target() const { return target_; }
  const std::string& api_key() const { return api_key_; }
  double timeout_s() const { return timeout_s_; }

 private:
  httplib::Headers headers() const;
  bench::HttpTarget target_;
  std::string api_key_;
  double timeout_s_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace tf::check
