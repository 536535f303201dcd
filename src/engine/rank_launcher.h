// RankLauncher: rank 0 of a one-host tensor-parallel world starts the other
// ranks as child processes and watches them (issue #7).
//
// Each child is `executable argv... rank_args(r)` with extra environment; its
// signal mask is cleared (the parent blocks SIGINT/SIGTERM for its signal
// thread, and a mask survives exec) and it gets SIGTERM when the thread that
// spawned it dies (PR_SET_PDEATHSIG; spawn from the main thread), so a killed
// rank 0 never leaves followers behind. The followers also notice rank 0's
// closed sockets on their own.
//
// A watcher thread reaps the children. An exit before expect_exits() was
// called is unexpected (the world is broken) and reported through
// on_unexpected_exit, from the watcher thread, once per child. The destructor
// stops the watcher and SIGKILLs and reaps whatever still runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tf::engine {

struct RankExit {
  int rank = 0;
  pid_t pid = -1;
  int wait_status = 0;  // as waitpid() reports it
  // "exit code 3", "signal 9 (Killed)".
  std::string describe() const;
  bool clean() const;  // exit code 0
};

struct RankLaunchOptions {
  std::string executable = "/proc/self/exe";
  std::vector<std::string> argv;                                // argv[0] and the arguments every rank gets
  int world_size = 1;                                           // ranks 1..world_size-1 are spawned
  std::function<std::vector<std::string>(int rank)> rank_args;  // appended per rank
  // When set and not empty for a rank, that rank runs this command instead of
  // executable + argv + rank_args: argv[0] is looked up on PATH unless it holds
  // a '/' (e.g. ssh to a rank on another machine, remote_rank.h).
  std::function<std::vector<std::string>(int rank)> rank_command;
  std::vector<std::pair<std::string, std::string>> env;         // set (or overridden) in the children
  std::function<void(const RankExit&)> on_unexpected_exit;      // watcher thread
  std::chrono::milliseconds poll_interval{20};
};

// One host, one GPU per rank: rank r computes on CUDA device r of the devices
// this process sees (CUDA_VISIBLE_DEVICES applies). OK when `visible` devices
// cover `world` ranks; otherwise kInvalidArgument naming both counts and
// CUDA_VISIBLE_DEVICES (`visible_env`: its value, null when unset), plus
// `why_none` (the driver's error) when no device is visible at all.
Status check_rank_gpus(int world, int visible, const char* visible_env, const std::string& why_none = {});

class RankLauncher {
 public:
  // Spawns every child or none (a failed spawn kills those already started).
  static Expected<std::unique_ptr<RankLauncher>> spawn(RankLaunchOptions options);
  ~RankLauncher();
  RankLauncher(const RankLauncher&) = delete;
  RankLauncher& operator=(const RankLauncher&) = delete;

  // From now on children exiting is the expected shutdown, not a failure.
  void expect_exits();
  // Waits until every child has exited, up to `grace`; then SIGKILLs the rest.
  // Returns every child's exit, rank order.
  std::vector<RankExit> wait_all(std::chrono::milliseconds grace);
  // Sends `sig` to every child still running.
  void signal_all(int sig);
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    int rank = 0;
    pid_t pid = -1;
    bool reaped = false;
    int wait_status = 0;
  };
  explicit RankLauncher(RankLaunchOptions options) : options_(std::move(options)) {}
  void watch();
  // Reaps whatever exited (WNOHANG); returns the unexpected exits. Lock held.
  std::vector<RankExit> reap_locked();

  RankLaunchOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Child> children_;
  bool expected_ = false;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace tf::engine
