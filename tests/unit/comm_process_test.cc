// Multi-process communicator tests: comm_worker runs as 2 or 3 separate
// processes (posix_spawn). Rank 0 binds port 0 and reports the port through a
// pipe, so no fixed port is ever used. Timeouts are generous (a loaded 2-core
// CI machine) but bounded: every wait has a deadline after which the workers
// are killed and the test fails.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kPortFd = 200;   // fd number of the port pipe inside rank 0
constexpr int kReadyFd = 201;  // fd number of the ready pipe inside each worker

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Reads one line from fd before the deadline ("" on timeout or EOF).
std::string read_line(int fd, Clock::time_point deadline) {
  std::string line;
  while (true) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n <= 0) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  std::string log;
  int ready_fd = -1;  // read end of the ready pipe
  int exit_code = -1;  // after wait: exit status, 128+signal, or -1 if it overran
};

// A set of worker processes; kills what is left on destruction.
class Cluster {
 public:
  explicit Cluster(std::string name) : name_(std::move(name)) {
    dir_ = std::string(TF_BINARY_DIR) + "/comm_test_logs";
    ::mkdir(dir_.c_str(), 0755);
  }
  ~Cluster() {
    for (auto& w : workers_) {
      if (w.pid > 0 && w.exit_code == -1) {
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, nullptr, 0);
      }
      if (w.ready_fd >= 0) ::close(w.ready_fd);
      // Logs are kept only for failed tests.
      if (!::testing::Test::HasFailure()) ::unlink(w.log.c_str());
    }
  }

  // Starts `ranks` (rank 0 first, on port 0) of a world of `world`.
  ::testing::AssertionResult start(int world, const std::vector<int>& ranks, const std::vector<std::string>& extra) {
    int port = 0;
    for (int rank : ranks) {
      Worker w;
      w.rank = rank;
      w.log = dir_ + "/" + name_ + "_" + std::to_string(::getpid()) + "_rank" + std::to_string(rank) + ".log";
      std::vector<std::string> args = {TF_COMM_WORKER, "--rank", std::to_string(rank), "--world", std::to_string(world),
                                       "--rendezvous", "127.0.0.1:" + std::to_string(port), "--ready-fd",
                                       std::to_string(kReadyFd)};
      args.insert(args.end(), extra.begin(), extra.end());
      int port_pipe[2] = {-1, -1};
      int ready_pipe[2];
      if (::pipe2(ready_pipe, O_CLOEXEC) != 0) return ::testing::AssertionFailure() << "pipe2 failed";
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 2, w.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 2, 1);
      posix_spawn_file_actions_adddup2(&actions, ready_pipe[1], kReadyFd);
      if (rank == 0) {
        if (::pipe2(port_pipe, O_CLOEXEC) != 0) return ::testing::AssertionFailure() << "pipe2 failed";
        posix_spawn_file_actions_adddup2(&actions, port_pipe[1], kPortFd);
        args.push_back("--port-fd");
        args.push_back(std::to_string(kPortFd));
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      int rv = ::posix_spawn(&w.pid, TF_COMM_WORKER, &actions, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
      ::close(ready_pipe[1]);
      w.ready_fd = ready_pipe[0];
      if (rv != 0) return ::testing::AssertionFailure() << "posix_spawn " << TF_COMM_WORKER << ": " << rv;
      workers_.push_back(w);
      if (rank == 0) {
        ::close(port_pipe[1]);
        std::string line = read_line(port_pipe[0], Clock::now() + seconds(60));
        ::close(port_pipe[0]);
        port = std::atoi(line.c_str());
        if (port <= 0) return ::testing::AssertionFailure() << "rank 0 reported no port:\n" << slurp(w.log);
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Waits until every worker wrote "ready".
  ::testing::AssertionResult wait_ready(Clock::time_point deadline) {
    for (auto& w : workers_) {
      if (read_line(w.ready_fd, deadline) != "ready") {
        return ::testing::AssertionFailure() << "rank " << w.rank << " never became ready:\n" << logs();
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Reaps the given workers (all when empty) before the deadline; overrunners are killed.
  void wait(Clock::time_point deadline, std::vector<int> ranks = {}) {
    for (auto& w : workers_) {
      if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), w.rank) == ranks.end()) continue;
      while (w.exit_code == -1) {
        int status = 0;
        pid_t r = ::waitpid(w.pid, &status, WNOHANG);
        if (r == w.pid) {
          w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        } else if (Clock::now() >= deadline) {
          ::kill(w.pid, SIGKILL);
          ::waitpid(w.pid, nullptr, 0);
          w.exit_code = -2;  // overran: still reported as failure
          break;
        } else {
          ::usleep(5000);
        }
      }
    }
  }

  Worker& worker(int rank) {
    for (auto& w : workers_) {
      if (w.rank == rank) return w;
    }
    return workers_.front();
  }
  std::vector<Worker>& workers() { return workers_; }

  std::string logs() const {
    std::string all;
    for (const auto& w : workers_) all += "--- rank " + std::to_string(w.rank) + " log:\n" + slurp(w.log);
    return all;
  }

 private:
  std::string name_;
  std::string dir_;
  std::vector<Worker> workers_;
};

void run_exact_checks(int world, uint64_t seed) {
  Cluster cluster("exact" + std::to_string(world));
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  ASSERT_TRUE(cluster.start(world, ranks, {"--seed", std::to_string(seed), "--mode", "check"}));
  cluster.wait(Clock::now() + seconds(240));
  for (const auto& w : cluster.workers()) {
    EXPECT_EQ(w.exit_code, 0) << "rank " << w.rank << "\n" << cluster.logs();
  }
}

TEST(CommProcessTest, TwoGlooRanksComputeExactResults) { run_exact_checks(2, 17); }

TEST(CommProcessTest, ThreeGlooRanksComputeExactResults) { run_exact_checks(3, 29); }

// A rank is SIGKILLed in the middle of a stream of all-reduces; the others must
// notice (closed sockets) and exit with kUnavailable well within 10 s.
void kill_one_rank(int world, int victim) {
  Cluster cluster("kill" + std::to_string(victim));
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  ASSERT_TRUE(cluster.start(world, ranks, {"--mode", "loop"}));
  ASSERT_TRUE(cluster.wait_ready(Clock::now() + seconds(120)));
  ::usleep(100000);  // let a few more all-reduces start
  auto killed_at = Clock::now();
  ::kill(cluster.worker(victim).pid, SIGKILL);
  std::vector<int> survivors;
  for (int r = 0; r < world; ++r) {
    if (r != victim) survivors.push_back(r);
  }
  cluster.wait(killed_at + seconds(30), survivors);
  double elapsed = std::chrono::duration<double>(Clock::now() - killed_at).count();
  EXPECT_LT(elapsed, 10.0) << cluster.logs();
  for (int r : survivors) {
    const Worker& w = cluster.worker(r);
    EXPECT_EQ(w.exit_code, 2) << "rank " << r << " should fail with kUnavailable\n" << cluster.logs();
    EXPECT_NE(slurp(w.log).find("Unavailable"), std::string::npos) << cluster.logs();
  }
  cluster.wait(Clock::now() + seconds(10), {victim});
  EXPECT_EQ(cluster.worker(victim).exit_code, 128 + SIGKILL);
}

TEST(CommProcessTest, KilledMiddleRankMakesOthersFailFast) { kill_one_rank(3, 1); }

TEST(CommProcessTest, KilledRankZeroMakesOthersFailFast) { kill_one_rank(3, 0); }

TEST(CommProcessTest, KilledRankOfTwoMakesTheOtherFailFast) { kill_one_rank(2, 1); }

// A rank that stops answering (SIGSTOP keeps its sockets open) is caught by the
// per-operation timeout instead. 5 s: far longer than a rank merely starved on a loaded CI
// machine leaves its peer waiting, so that only the SIGSTOP trips it.
TEST(CommProcessTest, HungRankIsCaughtByTheOperationTimeout) {
  Cluster cluster("hang");
  ASSERT_TRUE(cluster.start(2, {0, 1}, {"--mode", "loop", "--op-timeout-ms", "5000"}));
  ASSERT_TRUE(cluster.wait_ready(Clock::now() + seconds(120)));
  auto stopped_at = Clock::now();
  ::kill(cluster.worker(1).pid, SIGSTOP);
  cluster.wait(stopped_at + seconds(30), {0});
  double elapsed = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  ::kill(cluster.worker(1).pid, SIGKILL);
  cluster.wait(Clock::now() + seconds(10), {1});
  // The operation in flight at the SIGSTOP began at most moments before it.
  EXPECT_LT(elapsed, 20.0) << cluster.logs();
  EXPECT_GE(elapsed, 4.0) << "failed before the 5 s timeout could have expired\n" << cluster.logs();
  EXPECT_EQ(cluster.worker(0).exit_code, 2) << cluster.logs();
  EXPECT_NE(slurp(cluster.worker(0).log).find("did not answer within 5 s"), std::string::npos)
      << cluster.logs();
}

// Rank 2 never starts: ranks 0 and 1 give up after the rendezvous timeout and say who is missing.
// 5 s: rank 1, a process started after rank 0 listens, must join within it on a loaded CI machine.
TEST(CommProcessTest, MissingRankFailsTheRendezvousWithItsName) {
  Cluster cluster("missing");
  auto started = Clock::now();
  ASSERT_TRUE(cluster.start(3, {0, 1}, {"--mode", "check", "--timeout-ms", "5000"}));
  cluster.wait(started + seconds(60));
  double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_LT(elapsed, 30.0);
  for (const auto& w : cluster.workers()) {
    EXPECT_EQ(w.exit_code, 2) << cluster.logs();
    EXPECT_NE(slurp(w.log).find("rank 2 did not join within 5 s"), std::string::npos) << cluster.logs();
  }
}

}  // namespace
