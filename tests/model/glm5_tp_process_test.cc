// Tensor parallelism across processes: glm5_tp_worker runs as 2 or 3 CPU ranks
// joined by the Gloo communicator, and their prefill and greedy decode logits
// must equal the single-rank run in this process (max|Δ|/max|ref| ≤ 1e-5) with
// the same greedy tokens. Every rank writes its result, and all ranks must hold
// bitwise the same logits (the all-reduce sums in rank order on every rank).
//
// Rank 0 binds port 0 and reports the port through a pipe, so no fixed port is
// used. Every wait has a deadline (generous for a loaded 2-core machine); a
// worker that overruns it is killed and the test fails with the workers' logs.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "glm5_fixture.h"

extern char** environ;

namespace tf::test {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

constexpr int kPortFd = 200;  // fd number of the port pipe inside rank 0
constexpr auto kPortDeadline = seconds(60);
constexpr auto kRunDeadline = seconds(150);

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One line from fd before the deadline ("" on timeout or EOF).
std::string read_line(int fd, Clock::time_point deadline) {
  std::string line;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char c;
    if (::read(fd, &c, 1) <= 0) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
}

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  std::string log, out;
  int exit_code = -1;  // exit status, 128+signal, -2 killed after the deadline; -1 running
};

// The worker processes of one world; whatever is still running on destruction is
// killed. Logs and outputs are kept only when the test failed.
class TpWorld {
 public:
  TpWorld(std::string fixture, int world) : fixture_dir_(std::move(fixture)), world_(world) {
    dir_ = std::string(TF_BINARY_DIR) + "/glm5_tp_logs";
    ::mkdir(dir_.c_str(), 0755);
    tag_ = std::filesystem::path(fixture_dir_).filename().string() + "_tp" + std::to_string(world) + "_" +
           std::to_string(::getpid());
  }
  ~TpWorld() {
    for (auto& w : ranks_) {
      if (w.pid > 0 && w.exit_code == -1) {
        ::kill(w.pid, SIGKILL);
        ::waitpid(w.pid, nullptr, 0);
      }
      if (!::testing::Test::HasFailure()) {
        ::unlink(w.log.c_str());
        ::unlink(w.out.c_str());
      }
    }
  }

  // Spawns rank 0 (port 0), waits for its port, then the other ranks.
  // `extra[rank]` are additional worker flags.
  ::testing::AssertionResult start(const std::vector<std::vector<std::string>>& extra = {}) {
    int port = 0;
    for (int rank = 0; rank < world_; ++rank) {
      RankProcess w;
      w.rank = rank;
      w.log = dir_ + "/" + tag_ + "_rank" + std::to_string(rank) + ".log";
      w.out = dir_ + "/" + tag_ + "_rank" + std::to_string(rank) + ".safetensors";
      ::unlink(w.out.c_str());
      std::vector<std::string> args = {TF_GLM5_TP_WORKER, "--rank", std::to_string(rank), "--world",
                                       std::to_string(world_), "--rendezvous", "127.0.0.1:" + std::to_string(port),
                                       "--fixture", fixture_dir_, "--out", w.out};
      if (rank < static_cast<int>(extra.size())) args.insert(args.end(), extra[rank].begin(), extra[rank].end());
      int port_pipe[2] = {-1, -1};
      posix_spawn_file_actions_t actions;
      posix_spawn_file_actions_init(&actions);
      posix_spawn_file_actions_addopen(&actions, 2, w.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 2, 1);
      if (rank == 0) {
        if (::pipe2(port_pipe, O_CLOEXEC) != 0) return ::testing::AssertionFailure() << "pipe2 failed";
        posix_spawn_file_actions_adddup2(&actions, port_pipe[1], kPortFd);
        args.push_back("--port-fd");
        args.push_back(std::to_string(kPortFd));
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      const int rv = ::posix_spawn(&w.pid, TF_GLM5_TP_WORKER, &actions, nullptr, argv.data(), environ);
      posix_spawn_file_actions_destroy(&actions);
      if (rv != 0) {
        if (rank == 0) ::close(port_pipe[0]), ::close(port_pipe[1]);
        return ::testing::AssertionFailure() << "posix_spawn " << TF_GLM5_TP_WORKER << ": " << rv;
      }
      ranks_.push_back(w);
      if (rank == 0) {
        ::close(port_pipe[1]);
        const std::string line = read_line(port_pipe[0], Clock::now() + kPortDeadline);
        ::close(port_pipe[0]);
        port = std::atoi(line.c_str());
        if (port <= 0) return ::testing::AssertionFailure() << "rank 0 reported no port:\n" << logs();
      }
    }
    return ::testing::AssertionSuccess();
  }

  // Reaps every worker before the deadline; one still running then is killed.
  void wait(Clock::time_point deadline) {
    for (auto& w : ranks_) {
      while (w.exit_code == -1) {
        int status = 0;
        const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
        if (r == w.pid) {
          w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        } else if (Clock::now() >= deadline) {
          ::kill(w.pid, SIGKILL);
          ::waitpid(w.pid, nullptr, 0);
          w.exit_code = -2;
        } else {
          ::usleep(5000);
        }
      }
    }
  }

  const std::vector<RankProcess>& ranks() const { return ranks_; }

  std::string logs() const {
    std::string all;
    for (const auto& w : ranks_) all += "--- rank " + std::to_string(w.rank) + " log (" + w.log + "):\n" + slurp(w.log);
    return all;
  }

 private:
  std::string fixture_dir_, dir_, tag_;
  int world_;
  std::vector<RankProcess> ranks_;
};

// max over the prefill and every decode step of max|Δ|/max|ref|.
double worst_rel_err(const TpRun& run, const TpRun& ref) {
  double worst = rel_err(run.prefill, ref.prefill);
  for (size_t i = 0; i < std::min(run.decode.size(), ref.decode.size()); ++i)
    worst = std::max(worst, rel_err(run.decode[i], ref.decode[i]));
  return worst;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The parameter is the fixture's folder name (tests/data/model/<name>).
std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& dir : fixture_dirs()) names.push_back(std::filesystem::path(dir).filename().string());
  return names;
}

std::string fixture_dir(const std::string& name) { return std::string(TF_TEST_DATA_DIR) + "/model/" + name; }

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

class Glm5TpProcessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Glm5TpProcessTest, GlooRanksEqualOneRank) {
  const Fixture f = load_fixture(fixture_dir(GetParam()));
  ASSERT_FALSE(::testing::Test::HasFailure()) << "fixture " << GetParam() << " did not load";
  auto single = make_single_rank_communicator();
  auto base = run_greedy(f, *single);
  ASSERT_TRUE(base.has_value()) << base.status().to_string();
  ASSERT_EQ(base->decode.size(), 6u);

  for (int world : {2, 3}) {
    SCOPED_TRACE(f.name + " TP=" + std::to_string(world));
    const auto started = Clock::now();
    TpWorld tp(f.dir, world);
    ASSERT_TRUE(tp.start());
    tp.wait(started + kRunDeadline);
    const double seconds_taken = std::chrono::duration<double>(Clock::now() - started).count();
    for (const auto& w : tp.ranks()) {
      ASSERT_NE(w.exit_code, -2) << "rank " << w.rank << " did not finish within "
                                 << std::chrono::duration_cast<seconds>(kRunDeadline).count()
                                 << " s and was killed\n"
                                 << tp.logs();
      ASSERT_EQ(w.exit_code, 0) << "rank " << w.rank << " failed\n" << tp.logs();
    }
    std::vector<TpRun> runs;
    for (const auto& w : tp.ranks()) {
      auto run = read_tp_run(w.out);
      ASSERT_TRUE(run.has_value()) << "rank " << w.rank << ": " << run.status().to_string();
      ASSERT_EQ(run->decode.size(), base->decode.size()) << "rank " << w.rank;
      runs.push_back(std::move(*run));
    }
    const double worst = worst_rel_err(runs[0], *base);
    std::printf("[%s] TP=%d (%d Gloo processes) vs TP=1: max rel err %.3g, %.1f s\n", f.name.c_str(), world,
                world, worst, seconds_taken);
    EXPECT_LE(worst, 1e-5);
    EXPECT_EQ(runs[0].tokens, base->tokens);
    for (int rank = 1; rank < world; ++rank) {
      EXPECT_EQ(runs[rank].tokens, runs[0].tokens) << "rank " << rank;
      EXPECT_TRUE(bitwise_equal(runs[rank].prefill, runs[0].prefill)) << "rank " << rank << " prefill";
      for (size_t i = 0; i < runs[0].decode.size(); ++i)
        EXPECT_TRUE(bitwise_equal(runs[rank].decode[i], runs[0].decode[i])) << "rank " << rank << " step " << i;
    }
  }
}

// A rank that dies before the model runs (its sockets close) must make the other
// rank's step fail with kUnavailable (worker exit code 2) within seconds, not hang.
TEST(Glm5TpProcessFailureTest, DeadRankMakesTheOtherFailFast) {
  TpWorld tp(fixture_dir("tiny-flat"), 2);
  ASSERT_TRUE(tp.start({{}, {"--die-before-run", "1"}}));
  tp.wait(Clock::now() + kRunDeadline);
  ASSERT_EQ(tp.ranks().size(), 2u);
  EXPECT_EQ(tp.ranks()[1].exit_code, 9) << tp.logs();
  EXPECT_EQ(tp.ranks()[0].exit_code, 2) << "rank 0 should fail with kUnavailable\n" << tp.logs();
  EXPECT_NE(slurp(tp.ranks()[0].log).find("Unavailable"), std::string::npos) << tp.logs();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Glm5TpProcessTest, ::testing::ValuesIn(fixture_names()), test_name);

}  // namespace
}  // namespace tf::test
