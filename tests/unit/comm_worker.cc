// comm_worker: one rank of a multi-process communicator test (comm_process_test
// spawns several). Exit codes: 0 all checks passed, 1 a check failed or another
// error, 2 a kUnavailable error (a peer died, hung or never joined), 3 usage.
//
//   comm_worker --backend gloo --rank R --world W --rendezvous HOST:PORT
//               [--seed S] [--mode check|loop] [--port-fd FD] [--ready-fd FD]
//               [--timeout-ms MS] [--op-timeout-ms MS]
// --port-fd (rank 0): writes "<port>\n" once the rendezvous listens (use port 0).
// --mode loop: all-reduces until an error, writing "ready\n" to --ready-fd
// after the first success (the test then kills a rank).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/communicator.h"
#include "comm_checks.h"

namespace {

int exit_code_for(const tf::Status& s) { return s.code() == tf::StatusCode::kUnavailable ? 2 : 1; }

void write_line(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string text = line + "\n";
  [[maybe_unused]] ssize_t n = ::write(fd, text.data(), text.size());
}

int usage(const char* why) {
  std::fprintf(stderr, "comm_worker: %s\n", why);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  tf::CommOptions options;
  options.backend = tf::CommBackend::kGloo;
  uint64_t seed = 1;
  std::string mode = "check";
  int port_fd = -1, ready_fd = -1;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return usage(("missing value after " + flag).c_str());
    std::string value = argv[++i];
    if (flag == "--backend") {
      auto b = tf::parse_comm_backend(value);
      if (!b) return usage(b.status().to_string().c_str());
      options.backend = *b;
    } else if (flag == "--rank") {
      options.rank = std::atoi(value.c_str());
    } else if (flag == "--world") {
      options.world_size = std::atoi(value.c_str());
    } else if (flag == "--rendezvous") {
      options.rendezvous = value;
    } else if (flag == "--seed") {
      seed = std::strtoull(value.c_str(), nullptr, 10);
    } else if (flag == "--mode") {
      mode = value;
    } else if (flag == "--port-fd") {
      port_fd = std::atoi(value.c_str());
    } else if (flag == "--ready-fd") {
      ready_fd = std::atoi(value.c_str());
    } else if (flag == "--timeout-ms") {
      options.timeout = std::chrono::milliseconds(std::atoll(value.c_str()));
    } else if (flag == "--op-timeout-ms") {
      options.op_timeout = std::chrono::milliseconds(std::atoll(value.c_str()));
    } else {
      return usage(("unknown flag " + flag).c_str());
    }
  }
  options.on_listening = [port_fd](int port) { write_line(port_fd, std::to_string(port)); };

  auto comm = tf::make_communicator(options);
  if (!comm) {
    std::fprintf(stderr, "rank %d: %s\n", options.rank, comm.status().to_string().c_str());
    return exit_code_for(comm.status());
  }
  tf::Communicator& c = **comm;

  if (mode == "check") {
    tf::Status s = tf::comm_test::run_all_checks(c, seed);
    if (!s.is_ok()) {
      std::fprintf(stderr, "rank %d: %s\n", options.rank, s.to_string().c_str());
      return exit_code_for(s);
    }
    return 0;
  }
  if (mode == "loop") {
    // Runs until a peer goes away; gives up (exit 1) after 120 s without error.
    auto start = std::chrono::steady_clock::now();
    tf::Tensor t = tf::Tensor::zeros({1 << 16}, tf::DType::kF32);
    for (int iteration = 0;; ++iteration) {
      tf::Status s = c.all_reduce_sum(t);
      if (!s.is_ok()) {
        std::fprintf(stderr, "rank %d: %s\n", options.rank, s.to_string().c_str());
        return exit_code_for(s);
      }
      if (iteration == 0) write_line(ready_fd, "ready");
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(120)) {
        std::fprintf(stderr, "rank %d: no peer failure within 120 s\n", options.rank);
        return 1;
      }
    }
  }
  return usage(("unknown mode " + mode).c_str());
}
