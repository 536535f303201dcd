// See api_error.h.
#include "server/api_error.h"

#include <string>

namespace tf::server {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (param_) e["param"] = *param_;
  if (code_) e["code"] = *code_;
  return {{"error", e}};
}

ApiError bad_request(const std::string& message, const std::optional<std::string>& param,
                     const std::optional<std::string>& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

ApiError model_not_found(const std::string& model) {
  return ApiError(404, "The model `" + model + "` does not exist.", "invalid_request_error", "model",
                  "model_not_found");
}

ApiError context_length_exceeded(int64_t context, int64_t prompt_tokens, int64_t max_tokens) {
  std::string m = "This model's maximum context length is " + std::to_string(context) +
                  " tokens. However, you requested " + std::to_string(max_tokens) +
                  " output tokens and your prompt contains at least " + std::to_string(prompt_tokens) +
                  " input tokens, for a total of at least " + std::to_string(prompt_tokens + max_tokens) +
                  " tokens. Please reduce the length of the input prompt or the number of requested output tokens.";
  return ApiError(400, m, "invalid_request_error", "messages", "context_length_exceeded");
}

ApiError api_error_from_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      return ApiError(400, status.message(), "invalid_request_error");
    case StatusCode::kNotFound:
      return ApiError(404, status.message(), "invalid_request_error", std::nullopt, "not_found");
    case StatusCode::kResourceExhausted:
      return ApiError(429, status.message(), "rate_limit_exceeded", std::nullopt, "rate_limit_exceeded");
    case StatusCode::kUnavailable:
      return ApiError(503, status.message(), "server_error", std::nullopt, "service_unavailable");
    default:
      return ApiError(500, status.message(), "server_error");
  }
}

}  // namespace tf::server
