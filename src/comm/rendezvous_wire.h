// The TcpRendezvous wire format, shared by its client (tcp_rendezvous.cc) and
// server (rendezvous_server.cc). Internal to src/comm.
//
// frame = u32 length + payload; payload = u8 op + fields; integers are little
// endian; a string field = u32 length + bytes. Every length is checked against
// the limits below before anything is allocated.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tf::rendezvous_wire {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxFrameBytes = 64u << 20;
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxWaitKeys = 65536;
// Extra time a client gives the server beyond the server-side wait deadline.
constexpr milliseconds kReplySlack{10000};

enum class Op : uint8_t {
  kHello = 1,  // rank u32, world_size u32
  kSet,        // key, value
  kGet,        // key
  kWait,       // timeout_ms u32, count u32, keys
  kBye,        // no reply: the rank leaves on purpose (a close without it means it died)
  kOk = 100,
  kValue,      // value
  kMissing,
  kTimeout,    // count u32, missing keys
  kError,      // message
};

inline void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}
inline void put_str(std::string& s, std::string_view v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s.append(v);
}
inline uint32_t read_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
inline std::string message(Op op) { return std::string(1, static_cast<char>(op)); }

// Bounds-checked reader over one payload; any overrun makes ok() false.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = read_u32(data_.data() + pos_);
    pos_ += 4;
    return v;
  }
  std::string_view str(size_t max_bytes) {
    uint32_t n = u32();
    if (!ok_ || n > max_bytes || !need(n)) {
      ok_ = false;
      return {};
    }
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && pos_ == data_.size(); }

 private:
  bool need(size_t n) {
    if (ok_ && data_.size() - pos_ >= n) return true;
    ok_ = false;
    return false;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

inline std::string errno_text(int err) { return std::strerror(err); }

inline int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Blocking send of a whole buffer; never raises SIGPIPE.
inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

inline std::string framed(std::string_view payload) {
  std::string f;
  f.reserve(payload.size() + 4);
  put_u32(f, static_cast<uint32_t>(payload.size()));
  f.append(payload);
  return f;
}

inline std::string join_key(int rank) { return "tf/joined/" + std::to_string(rank); }

}  // namespace tf::rendezvous_wire
