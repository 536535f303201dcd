// See request_body.h.
#include "server/request_body.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "server/api_error.h"

namespace tf::server {

namespace {

// httplib refuses larger application/x-www-form-urlencoded bodies (it parses them as a form);
// curl -d sends that type, so such bodies keep httplib's limit and its answer.
constexpr size_t kFormBodyLimit = 8192;

}  // namespace

std::string byte_size_text(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (bytes > 0 && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

RequestBody::RequestBody(const httplib::Request& req, const httplib::ContentReader& reader, size_t max_bytes,
                         BodyPace pace)
    : req_(req), reader_(reader), max_bytes_(max_bytes), pace_(pace) {
  // As httplib reads it: chunked framing wins over a Content-Length, and a decoded body's
  // size is known only once decoded.
  const std::string encoding = req.get_header_value("Content-Encoding");
  const bool decoded = !encoding.empty() && strcasecmp(encoding.c_str(), "identity") != 0;
  if (req.has_header("Content-Length") && !req.has_header("Transfer-Encoding") && !decoded) {
    length_known_ = true;
    length_ = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
  }
}

int64_t RequestBody::charge() const {
  uint64_t most = std::min<uint64_t>(max_bytes_, static_cast<uint64_t>(kBodyChargeStep));
  if (length_known_) most = std::min(most, length_);
  return static_cast<int64_t>(most);
}

void RequestBody::check_length() const {
  if (length_known_ && length_ > max_bytes_)
    throw ApiError(413, "request body exceeds " + byte_size_text(static_cast<int64_t>(max_bytes_)),
                   "invalid_request_error", "body");
}

template <typename Keep>
bool RequestBody::read_through(Keep&& keep) {
  consumed_ = true;
  start_ = std::chrono::steady_clock::now();
  bool keeping = true;
  uint64_t dropped = 0;
  auto receive = [&](const char* data, size_t n) {
    received_ += n;
    if (pace_.min_rate > 0) {
      const auto allowed =
          pace_.grace + std::chrono::milliseconds(received_ * 1000 / static_cast<uint64_t>(pace_.min_rate));
      if (std::chrono::steady_clock::now() - start_ - paused_ > allowed) {
        late_ = true;
        return false;  // not read through: the connection closes after the answer
      }
    }
    if (keeping && keep(data, n)) return true;
    keeping = false;
    dropped += n;
    return dropped <= max_bytes_;
  };
  const bool whole = req_.is_multipart_form_data()  // httplib parses the parts; they are dropped
                         ? reader_([](const httplib::MultipartFormData&) { return true; },
                                   [&](const char* data, size_t n) { return receive(data, n); })
                         : reader_([&](const char* data, size_t n) { return receive(data, n); });
  cut_short_ = !whole;
  return whole;
}

std::string RequestBody::read(const Reserve& reserve) {
  check_length();
  if (req_.is_multipart_form_data())
    throw bad_request(
        "multipart/form-data bodies are not accepted; send the request as JSON (Content-Type: "
        "application/json)",
        "body");
  std::string body;
  if (length_known_) body.reserve(length_);
  int64_t charged = 0;         // what `reserve` last said is charged
  std::exception_ptr refused;  // what `reserve` threw
  bool over = false;
  const bool whole = read_through([&](const char* data, size_t n) {
    if (body.size() + n <= max_bytes_) {
      const auto size = static_cast<int64_t>(body.size() + n);
      if (size > charged && reserve) {
        const auto asked = std::chrono::steady_clock::now();
        try {
          charged = reserve(size);
          paused_ += std::chrono::steady_clock::now() - asked;
        } catch (...) {
          refused = std::current_exception();
          std::string().swap(body);  // the rest is read through and dropped
          return false;
        }
      }
      body.append(data, n);
      return true;
    }
    over = true;
    std::string().swap(body);  // the rest is read through and dropped
    return false;
  });
  if (late_)
    throw ApiError(
        408,
        "the request body arrived too slowly: " + byte_size_text(static_cast<int64_t>(received_)) + " in " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                            start_ - paused_)
                               .count()) +
            " s (a body must arrive within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(pace_.grace).count()) +
            " s, plus a second for every " + std::to_string(pace_.min_rate) + " bytes)",
        "invalid_request_error", "body", "request_timeout");
  if (refused) std::rethrow_exception(refused);
  if (over)
    throw ApiError(413,
                   "request body exceeds " + byte_size_text(static_cast<int64_t>(max_bytes_)) +
                       (length_known_ ? "" : " (as decoded)"),
                   "invalid_request_error", "body");
  if (!whole) {
    const std::string encoding = req_.get_header_value("Content-Encoding");
    if (!encoding.empty() && encoding != "identity")
      throw bad_request("the request body could not be read: it is not valid Content-Encoding: " + encoding +
                            " data (or the connection ended)",
                        "body");
    throw bad_request("the request body could not be read: the connection ended or its framing is broken",
                      "body");
  }
  if (req_.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0 &&
      body.size() > kFormBodyLimit)
    throw ApiError(413,
                   "a Content-Type: application/x-www-form-urlencoded body is limited to 8 KiB; send "
                   "Content-Type: application/json",
                   "invalid_request_error");
  return body;
}

void RequestBody::discard_rest() {
  if (consumed_ || late_) return;
  (void)read_through([](const char*, size_t) { return false; });
}

}  // namespace tf::server
