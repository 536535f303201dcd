// Status and Expected<T>: errors as values. A message always names what was
// wrong and where (a file, a tensor, a config field), so that the user can act
// on it without a debugger. C++20 has no std::expected; this is the subset we use.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tf {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from a user, a file or a request
  kNotFound,         // a file, tensor or field that should exist does not
  kOutOfRange,       // offsets, sizes or indices beyond their bounds
  kUnimplemented,    // valid input we do not support (names the feature)
  kResourceExhausted,
  kUnavailable,      // a peer or device went away
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: model.safetensors: header length 9e18 exceeds file size 1024"
  std::string to_string() const;
  // Prepends context: error.with_context("loading model") -> "loading model: <message>".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}                // NOLINT: implicit by design
  Expected(Status status) : data_(std::move(status)) {          // NOLINT: implicit by design
    assert(!std::get<Status>(data_).is_ok() && "Expected built from an ok Status");
  }

  bool has_value() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& status() const {
    static const Status kOk;
    return has_value() ? kOk : std::get<Status>(data_);
  }

 private:
  std::variant<T, Status> data_;
};

// Thrown where an error cannot be returned (constructors, deep callbacks);
// caught at the layer boundary and turned back into a Status.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status s) : status_(std::move(s)), what_(status_.to_string()) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

}  // namespace tf

// Returns early with the error of a Status-valued expression.
#define TF_RETURN_IF_ERROR(expr)         \
  do {                                   \
    ::tf::Status tf_status_ = (expr);    \
    if (!tf_status_.is_ok()) return tf_status_; \
  } while (0)

#define TF_CONCAT_INNER(a, b) a##b
#define TF_CONCAT(a, b) TF_CONCAT_INNER(a, b)
// TF_ASSIGN_OR_RETURN(auto x, make_x()); declares x or returns the error.
#define TF_ASSIGN_OR_RETURN(decl, expr) TF_ASSIGN_OR_RETURN_IMPL(TF_CONCAT(tf_expected_, __LINE__), decl, expr)
#define TF_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                              \
  if (!tmp.has_value()) return tmp.status();      \
  decl = std::move(tmp).value()
