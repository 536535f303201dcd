// TcpRendezvous: ranks as threads of this process, rank 0 on a port it picks.
#include "comm/tcp_rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tf {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs body(rank, rendezvous-or-error) for the given ranks of a world, one
// thread each; rank 0 (which must be among them) picks the port.
template <typename Body>
void run_ranks(int world, std::vector<int> ranks, milliseconds timeout, Body body,
               std::vector<int> claimed_world = {}) {
  std::promise<int> port_promise;
  std::shared_future<int> port = port_promise.get_future().share();
  std::atomic<bool> announced{false};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    int rank = ranks[i];
    int w = claimed_world.empty() ? world : claimed_world[i];
    threads.emplace_back([&, rank, w] {
      RendezvousOptions o;
      o.rank = rank;
      o.world_size = w;
      o.timeout = timeout;
      if (rank == 0) {
        o.on_listening = [&](int p) {
          announced = true;
          port_promise.set_value(p);
        };
      } else {
        o.port = port.get();
      }
      auto r = TcpRendezvous::connect(o);
      if (rank == 0 && !r && !announced) port_promise.set_value(1);
      body(rank, r);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(TcpRendezvousTest, SetGetWaitAndBarrierAcrossThreeRanks) {
  run_ranks(3, {0, 1, 2}, std::chrono::seconds(60), [](int rank, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    TcpRendezvous& rv = **r;
    EXPECT_EQ(rv.rank(), rank);
    EXPECT_EQ(rv.world_size(), 3);
    EXPECT_GT(rv.port(), 0);
    EXPECT_EQ(rv.local_address(), "127.0.0.1");
    // Binary values, including NUL bytes, survive.
    std::string value = "value of " + std::to_string(rank) + std::string("\0\x01\xff", 3);
    ASSERT_TRUE(rv.set("key/" + std::to_string(rank), value).is_ok());
    for (int other = 0; other < 3; ++other) {
      auto got = rv.get("key/" + std::to_string(other));
      ASSERT_TRUE(got.has_value()) << got.status().to_string();
      EXPECT_EQ(*got, "value of " + std::to_string(other) + std::string("\0\x01\xff", 3));
    }
    ASSERT_TRUE(rv.barrier("first").is_ok());
    ASSERT_TRUE(rv.wait({"key/0", "key/1", "key/2"}, milliseconds(1000)).is_ok());
    // A large value (1 MiB) from rank 2.
    if (rank == 2) {
      ASSERT_TRUE(rv.set("big", std::string(1 << 20, 'x')).is_ok());
    }
    auto big = rv.get("big");
    ASSERT_TRUE(big.has_value()) << big.status().to_string();
    EXPECT_EQ(big->size(), size_t{1} << 20);
    ASSERT_TRUE(rv.barrier("second").is_ok());
  });
}

// The timeouts of tests where some ranks must join in time are seconds: a loaded CI machine can
// keep a rank's thread from running for a good part of one.
TEST(TcpRendezvousTest, MissingRankIsNamedAfterTheTimeout) {
  auto start = Clock::now();
  run_ranks(3, {0, 1}, milliseconds(2000), [](int, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(r.status().message().find("rank 2 did not join within 2 s"), std::string::npos)
        << r.status().to_string();
  });
  EXPECT_LT(seconds_since(start), 20.0);
}

TEST(TcpRendezvousTest, TwoMissingRanksAreListed) {
  run_ranks(4, {0, 2}, milliseconds(2000), [](int, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("ranks 1, 3 did not join within 2 s"), std::string::npos)
        << r.status().to_string();
  });
}

TEST(TcpRendezvousTest, GetOfAKeyNobodySetsTimesOut) {
  run_ranks(1, {0}, milliseconds(10000), [](int, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    auto start = Clock::now();
    auto got = (*r)->get("never/set", milliseconds(200));
    EXPECT_LT(seconds_since(start), 10.0);
    ASSERT_FALSE(got.has_value());
    EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(got.status().message().find("'never/set'"), std::string::npos) << got.status().to_string();
    // The connection is still in sync afterwards.
    ASSERT_TRUE((*r)->set("later", "ok").is_ok());
    EXPECT_EQ(*(*r)->get("later"), "ok");
  });
}

TEST(TcpRendezvousTest, BarrierNamesTheRankThatDidNotArrive) {
  run_ranks(2, {0, 1}, milliseconds(10000), [](int rank, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    if (rank == 1) return;  // leaves without entering the barrier
    Status s = (*r)->barrier("step", milliseconds(300));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("barrier 'step': rank 1 did not arrive within 300 ms"), std::string::npos)
        << s.to_string();
  });
}

TEST(TcpRendezvousTest, UnreachableRankZeroIsReported) {
  // A bound but not listening socket: connections to its port are refused, and
  // nobody else can take the port while we hold it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  RendezvousOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.port = ntohs(addr.sin_port);
  o.timeout = milliseconds(500);
  auto start = Clock::now();
  auto r = TcpRendezvous::connect(o);
  ::close(fd);
  EXPECT_LT(seconds_since(start), 10.0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("could not reach rank 0 at 127.0.0.1:" + std::to_string(o.port)),
            std::string::npos)
      << r.status().to_string();
}

TEST(TcpRendezvousTest, WorldSizeMismatchIsRejected) {
  run_ranks(
      2, {0, 1}, milliseconds(5000),
      [](int rank, Expected<std::unique_ptr<TcpRendezvous>>& r) {
        ASSERT_FALSE(r.has_value());
        if (rank == 1) {
          EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
          EXPECT_NE(r.status().message().find("world_size 3 but rank 0 has 2"), std::string::npos)
              << r.status().to_string();
        } else {
          EXPECT_NE(r.status().message().find("rank 1 did not join"), std::string::npos) << r.status().to_string();
        }
      },
      {2, 3});
}

TEST(TcpRendezvousTest, DuplicateRankIsRejected) {
  std::atomic<int> rejected{0};
  run_ranks(3, {0, 1, 1}, milliseconds(5000), [&](int, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_FALSE(r.has_value());
    if (r.status().message().find("rank 1 joined twice") != std::string::npos) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      ++rejected;
    }
  });
  EXPECT_EQ(rejected.load(), 1);
}

TEST(TcpRendezvousTest, GarbageFromAStrangerDoesNotDisturbTheRanks) {
  run_ranks(2, {0, 1}, milliseconds(20000), [](int rank, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    if (rank == 0) {
      // A frame claiming 4 GiB, then an unknown op in a small frame.
      for (std::string junk : {std::string("\xff\xff\xff\xff", 4), std::string("\x01\x00\x00\x00\x63", 5)}) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<uint16_t>((*r)->port()));
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        ASSERT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
        char c;
        EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the server should drop the stranger";
        ::close(fd);
      }
      ASSERT_TRUE((*r)->set("after junk", "fine").is_ok());
    }
    auto v = (*r)->get("after junk");
    ASSERT_TRUE(v.has_value()) << v.status().to_string();
    EXPECT_EQ(*v, "fine");
    ASSERT_TRUE((*r)->barrier("done").is_ok());
  });
}

// Rank 1 joins (a raw client speaking the wire format) and then vanishes
// without saying bye, as a killed process would: rank 0, waiting for rank 2,
// fails at once naming rank 1 instead of running into its 60 s timeout.
TEST(TcpRendezvousTest, RankThatDiesAfterJoiningFailsTheOthersAtOnce) {
  auto start = Clock::now();
  std::promise<int> port_promise;
  std::thread impostor([&] {
    int port = port_promise.get_future().get();
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    // frame length 9 | op hello (1) | rank 1 | world_size 3, little endian
    const std::string hello("\x09\x00\x00\x00\x01\x01\x00\x00\x00\x03\x00\x00\x00", 13);
    ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), 13);
    char reply[5];
    ASSERT_EQ(::recv(fd, reply, 5, MSG_WAITALL), 5);
    EXPECT_EQ(reply[4], 100) << "hello should be answered with ok";
    ::close(fd);  // no bye: "dies"
  });
  RendezvousOptions o;
  o.world_size = 3;
  o.timeout = std::chrono::seconds(60);
  o.on_listening = [&](int p) { port_promise.set_value(p); };
  auto r = TcpRendezvous::connect(o);
  impostor.join();
  EXPECT_LT(seconds_since(start), 10.0);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("rank 1 disconnected from the rendezvous without leaving"), std::string::npos)
      << r.status().to_string();
}

TEST(TcpRendezvousTest, RankZeroLeavingMakesWaitersFailFast) {
  // Rank 0's server outlives its owner by a grace period (min(timeout, 10 s) =
  // 5 s here) while rank 1 is still connected, then closes.
  run_ranks(2, {0, 1}, milliseconds(5000), [](int rank, Expected<std::unique_ptr<TcpRendezvous>>& r) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    if (rank == 0) {
      r = unavailable("dropped");  // destroys rank 0's rendezvous
      return;
    }
    auto start = Clock::now();
    auto got = (*r)->get("never", milliseconds(60000));
    EXPECT_LT(seconds_since(start), 30.0);  // the grace and slack, far from the get's 60 s
    ASSERT_FALSE(got.has_value());
    EXPECT_EQ(got.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(got.status().message().find("closed the connection"), std::string::npos) << got.status().to_string();
  });
}

TEST(TcpRendezvousTest, InvalidOptionsAreRejected) {
  RendezvousOptions o;
  o.world_size = 0;
  EXPECT_EQ(TcpRendezvous::connect(o).status().code(), StatusCode::kInvalidArgument);
  o.world_size = 2;
  o.rank = 2;
  EXPECT_EQ(TcpRendezvous::connect(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = 1;
  o.port = 0;  // only rank 0 may pick
  EXPECT_EQ(TcpRendezvous::connect(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = 0;
  o.host = "192.0.2.1";  // TEST-NET-1: not an address of this machine
  auto r = TcpRendezvous::connect(o);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot listen on 192.0.2.1"), std::string::npos) << r.status().to_string();
}

TEST(TcpRendezvousTest, ParsesHostPort) {
  auto a = parse_host_port("10.0.0.1:29500");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->host, "10.0.0.1");
  EXPECT_EQ(a->port, 29500);
  auto b = parse_host_port("[::1]:0");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  auto c = parse_host_port("node-3.cluster:65535");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->host, "node-3.cluster");
  for (const char* bad : {"", "host", "host:", ":80", "host:65536", "host:8o", "::1:80", "[::1]80", "[::1", "h:123456"}) {
    auto r = parse_host_port(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(TcpRendezvousTest, FormatsDurations) {
  EXPECT_EQ(format_duration(milliseconds(30000)), "30 s");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1.5 s");
  EXPECT_EQ(format_duration(milliseconds(250)), "250 ms");
}

}  // namespace
}  // namespace tf
