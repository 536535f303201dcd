// Request bodies read by the route's handler through httplib's content reader, instead of by
// httplib before the handler runs:
//  - nothing is read before the request is authenticated and its body charged to the prompt
//    budget (byte_budget.h), so clients sending at once cannot hold more bodies than it;
//  - the body lands in one buffer of its announced size (no growth by doubling);
//  - a decoded body (Content-Encoding gzip, deflate or br) and a chunked or unannounced one are
//    held to the body limit as they arrive: httplib 0.11 checks only Content-Length, so a
//    300 KB gzip body decoded into a 300 MB one, and a chunked body grew without end.
// A body that is refused or left unread is read through and dropped (up to the body limit
// again), so that the connection's next request starts where it should and the client, still
// sending, gets the answer rather than a reset.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "server/body_pace.h"

namespace tf::server {

// "96 MiB", or a byte count that is not a whole number of MiB.
std::string byte_size_text(int64_t bytes);

// A body is charged to the prompt budget in steps of this as its (decoded) bytes arrive, not
// as its announced size or the whole body limit up front (a client that announces a large
// body and sends it slowly holds only what it sent).
constexpr int64_t kBodyChargeStep = int64_t{1} << 20;

class RequestBody {
 public:
  // `max_bytes`: the body limit, for the decoded body.
  RequestBody(const httplib::Request& req, const httplib::ContentReader& reader, size_t max_bytes,
              BodyPace pace = {});

  // Bytes to charge before reading: a first step of kBodyChargeStep, within the announced
  // length and the body limit; read() charges further as the body arrives.
  int64_t charge() const;
  // Whether the body arrives as announced (Content-Length, no chunked framing or encoding),
  // and that length.
  bool length_known() const { return length_known_; }
  uint64_t announced_length() const { return length_; }
  // The body limit, for the decoded body.
  int64_t max_bytes() const { return static_cast<int64_t>(max_bytes_); }
  // Throws ApiError 413 when the announced length is past the body limit (checked before the
  // body is charged or read).
  void check_length() const;

  // Before the kept body grows past the bytes `reserve` last said are charged
  // (nothing, at first), `reserve` is called with the size it is about to reach and returns the
  // bytes charged now (at least that). It may throw instead (ApiError: no room in the budget):
  // the rest of the body is then read through and dropped, and read() throws that error.
  using Reserve = std::function<int64_t(int64_t size)>;

  // Reads the whole body, decoded (call once). Throws ApiError: 413 past the body limit, or
  // an application/x-www-form-urlencoded body past 8 KiB (httplib's limit for those); 408 when
  // it arrived slower than its pace (the rest is left unread: abandoned()); 400 for a multipart
  // body or one that stopped short; what `reserve` threw.
  std::string read(const Reserve& reserve = {});

  // Reads through and drops what is left unread; a no-op after read(), and once abandoned.
  void discard_rest();

  // Whether the rest of the body was left unread (it fell behind its pace, ran past the limit,
  // or could not be decoded): the connection cannot serve another request and must close after
  // the answer, reading what the client still sends so that the answer reaches it.
  bool abandoned() const { return late_ || cut_short_; }

 private:
  // Reads the body through `keep` (false: stop keeping, drop the rest); true when it was
  // read to its end.
  template <typename Keep>
  bool read_through(Keep&& keep);

  const httplib::Request& req_;
  const httplib::ContentReader& reader_;
  const size_t max_bytes_;
  const BodyPace pace_;
  // The pace's clock: from the first read, less the time spent waiting for the prompt budget
  // (`reserve`), which is the server's doing, not the client's.
  std::chrono::steady_clock::time_point start_{};
  std::chrono::steady_clock::duration paused_{};
  uint64_t received_ = 0;  // raw bytes through the reader
  bool late_ = false;
  bool cut_short_ = false;  // the reader stopped before the body's end
  bool length_known_ = false;
  uint64_t length_ = 0;
  bool consumed_ = false;
};

}  // namespace tf::server
