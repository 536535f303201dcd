#include "core/status.h"

namespace tf {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace tf
