// RendezvousServer: rank 0's side of the TcpRendezvous (internal to src/comm).
//
// One thread around poll() owns the key/value map and every connection, so it
// needs no locks. A wait request parks its connection until the keys exist or
// its deadline passes; the server (not the client) decides the timeout so that
// the reply can say which keys were missing. A rank whose connection closes
// without saying bye has died: every unsatisfied wait then fails at once with
// its name instead of running into the timeout. A connection that sends anything
// malformed (bad lengths, unknown ops, a second request while one is parked)
// is dropped; the ranks are not disturbed.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"

namespace tf {

class RendezvousServer {
 public:
  using Clock = std::chrono::steady_clock;

  // Listens on host:port (port 0 picks one) for a world of world_size ranks.
  static Expected<std::unique_ptr<RendezvousServer>> start(const std::string& host, int port, int world_size,
                                                            std::chrono::milliseconds grace);
  // Keeps serving until every rank that joined has disconnected, or `grace` passed.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }

 private:
  struct Conn {
    int fd = -1;
    int rank = -1;  // after hello
    std::string in;
    bool waiting = false;
    std::vector<std::string> wait_keys;
    Clock::time_point wait_deadline;
    bool dead = false;
    bool left = false;  // said bye before closing
  };

  RendezvousServer(int listen_fd, int wake_fd, int port, int world_size, std::chrono::milliseconds grace);
  void run();
  void accept_new();
  void read_from(Conn& c);
  void reply(Conn& c, const std::string& payload);
  void reply_error(Conn& c, const std::string& text);
  bool handle(Conn& c, std::string_view payload);
  void expire_waits(Clock::time_point now);

  int listen_fd_;
  int wake_fd_;
  int port_;
  int world_size_;
  std::chrono::milliseconds grace_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  Clock::time_point stop_deadline_;  // written before stopping_ is set
  std::vector<bool> joined_;
  std::map<std::string, std::string> kv_;
  std::vector<Conn> conns_;
  // Set when a rank's connection closed without a bye: its process died, so
  // waits that are still missing keys fail at once instead of timing out.
  std::string died_;
};

}  // namespace tf
