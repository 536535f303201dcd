// TcpRendezvous: a tiny key/value store over TCP that bootstraps the real
// transports (Gloo's full mesh, NCCL's unique id). It needs only the host:port
// of rank 0.
//
// Rank 0 runs the server (a background thread) and, like every other rank,
// talks to it as a client over one TCP connection. Values are opaque byte
// strings; keys live until the server goes away. All waits are bounded: a rank
// that never joins, never sets a key, or dies, turns into a kUnavailable error
// naming the rank or the key ("rank 2 did not join within 30 s"), never a hang.
//
// Wire format (little endian): frame = u32 length + payload; payload = u8 op +
// fields; a string field = u32 length + bytes. The server checks every length
// against fixed limits and drops a connection that sends anything malformed.
//
// Lifetime: rank 0's destructor keeps the server alive until every rank that
// joined has closed its connection (bounded by a grace period), so that a
// final barrier's replies are never lost.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf {

struct HostPort {
  std::string host;
  int port = 0;
};
// "host:port", "[v6addr]:port"; port in 0..65535.
Expected<HostPort> parse_host_port(std::string_view text);

struct RendezvousOptions {
  std::string host = "127.0.0.1";  // rank 0's address, as the other ranks reach it
  int port = 0;                    // 0: rank 0 picks a free port (see on_listening)
  int rank = 0;
  int world_size = 1;
  // Every rank must have joined within this time; also the default for get/wait/barrier.
  std::chrono::milliseconds timeout{30000};
  // Rank 0 only: called once the server listens, with the actual port.
  std::function<void(int port)> on_listening;
};

class RendezvousServer;  // rendezvous_server.h

class TcpRendezvous {
 public:
  // Joins the rendezvous; returns once all world_size ranks have joined.
  static Expected<std::unique_ptr<TcpRendezvous>> connect(const RendezvousOptions& options);
  ~TcpRendezvous();
  TcpRendezvous(const TcpRendezvous&) = delete;
  TcpRendezvous& operator=(const TcpRendezvous&) = delete;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  int port() const { return port_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // The local IP address of this rank's connection to rank 0: the interface
  // from which the other ranks can reach this one (what Gloo binds to).
  const std::string& local_address() const { return local_address_; }
  // "127.0.0.1:29500", for messages.
  std::string server_name() const;

  Status set(const std::string& key, std::string_view value);
  // Waits (up to timeout(), or the given timeout) for the key, then returns its value.
  Expected<std::string> get(const std::string& key);
  Expected<std::string> get(const std::string& key, std::chrono::milliseconds timeout);
  // Waits until every key is set; the error names the keys still missing.
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // All ranks call barrier with the same name in the same order.
  Status barrier(const std::string& name);
  Status barrier(const std::string& name, std::chrono::milliseconds timeout);

 private:
  TcpRendezvous(RendezvousOptions options, int fd, int port, std::string local_address,
                std::unique_ptr<RendezvousServer> server);
  // Sends one request frame and reads one reply frame into *reply (the payload).
  Status round_trip(const std::string& request, std::chrono::milliseconds reply_timeout, std::string* reply);
  Status join();

  RendezvousOptions options_;
  int fd_ = -1;
  int port_ = 0;
  std::string local_address_;
  std::unique_ptr<RendezvousServer> server_;
  std::mutex mu_;          // one request in flight per connection
  int barrier_count_ = 0;  // under mu_
  bool broken_ = false;    // a reply was lost: the stream is out of sync
};

// "30 s", "1.5 s", "250 ms": durations in error messages.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace tf
