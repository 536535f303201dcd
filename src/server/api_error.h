// OpenAI error objects: {"error": {"message", "type", "param", "code"}} plus the HTTP
// status. Request validation throws ApiError (caught by the one route wrapper in
// http_server.cc); engine Status values are mapped with api_error_from_status.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tf::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int http_status, std::string message, std::string type, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message),
        http_status_(http_status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int http_status() const { return http_status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  nlohmann::ordered_json to_json() const;

 private:
  int http_status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// 400 invalid_request_error naming the field (param).
ApiError bad_request(const std::string& message, const std::optional<std::string>& param = std::nullopt,
                     const std::optional<std::string>& code = std::nullopt);
ApiError model_not_found(const std::string& model);
ApiError context_length_exceeded(int64_t context, int64_t prompt_tokens, int64_t max_tokens);
// kInvalidArgument/kOutOfRange -> 400, kNotFound -> 404, kResourceExhausted -> 429,
// kUnimplemented -> 400, kUnavailable -> 503, others -> 500.
ApiError api_error_from_status(const Status& status);

}  // namespace tf::server
