// RankLauncher (src/engine/rank_launcher.h) with /bin/sh children: arguments and
// environment reach each rank, unexpected exits are reported once with what
// ended them, expected exits are not, the children's signal mask is cleared,
// they die with the thread that spawned them, and nothing outlives the launcher.
#include "engine/rank_launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tf::engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Exits {
  std::mutex mu;
  std::vector<RankExit> seen;
  void add(const RankExit& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e);
  }
  std::vector<RankExit> get() {
    std::lock_guard<std::mutex> lock(mu);
    return seen;
  }
  bool wait_for_count(size_t n, std::chrono::milliseconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (get().size() >= n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return get().size() >= n;
  }
};

RankLaunchOptions shell(const std::string& script, int world, Exits* exits) {
  RankLaunchOptions o;
  o.executable = "/bin/sh";
  o.argv = {"sh", "-c", script, "sh"};  // $1, $2... come from rank_args
  o.world_size = world;
  o.rank_args = [](int rank) { return std::vector<std::string>{std::to_string(rank)}; };
  if (exits) o.on_unexpected_exit = [exits](const RankExit& e) { exits->add(e); };
  return o;
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(RankLauncherTest, ArgumentsAndEnvironmentReachEachRank) {
  const fs::path dir = fs::temp_directory_path() / ("tf-rank-launcher-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  RankLaunchOptions o = shell("echo \"$1 $TF_LAUNCH_TEST\" > \"$TF_LAUNCH_DIR/rank$1\"", 4, nullptr);
  o.env = {{"TF_LAUNCH_TEST", "hello world"}, {"TF_LAUNCH_DIR", dir.string()}};
  auto l = RankLauncher::spawn(o);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  EXPECT_EQ((*l)->pids().size(), 3u);  // ranks 1..3
  const auto exits = (*l)->wait_all(20s);
  ASSERT_EQ(exits.size(), 3u);
  for (int rank = 1; rank <= 3; ++rank) {
    const RankExit& e = exits[static_cast<size_t>(rank - 1)];
    EXPECT_EQ(e.rank, rank);
    EXPECT_TRUE(e.clean()) << e.describe();
    EXPECT_EQ(e.describe(), "exit code 0");
    EXPECT_EQ(slurp(dir / ("rank" + std::to_string(rank))), std::to_string(rank) + " hello world\n");
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A rank with a command of its own (how ranks on other machines start: ssh ...)
// runs that, found on PATH; the other ranks run executable + argv + rank_args.
TEST(RankLauncherTest, ARankCommandReplacesTheExecutableForThatRank) {
  const fs::path dir = fs::temp_directory_path() / ("tf-rank-command-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Exits exits;
  RankLaunchOptions o = shell("echo local \"$1\" > \"$TF_LAUNCH_DIR/rank$1\"", 3, &exits);
  o.env = {{"TF_LAUNCH_DIR", dir.string()}};
  o.rank_command = [](int rank) {
    if (rank != 2) return std::vector<std::string>();
    // "sh" without a '/': looked up on PATH.
    return std::vector<std::string>{"sh", "-c", "echo own \"$0\" > \"$TF_LAUNCH_DIR/rank2\"; exit 5", "two"};
  };
  auto l = RankLauncher::spawn(o);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  ASSERT_TRUE(exits.wait_for_count(2));  // any exit before expect_exits() is reported
  for (const RankExit& e : exits.get()) EXPECT_EQ(e.describe(), e.rank == 2 ? "exit code 5" : "exit code 0");
  (*l)->wait_all(10s);
  EXPECT_EQ(slurp(dir / "rank1"), "local 1\n");
  EXPECT_EQ(slurp(dir / "rank2"), "own two\n");

  // A program that is nowhere on PATH: the spawn fails naming it and the rank.
  o.rank_command = [](int) { return std::vector<std::string>{"tf-no-such-program-anywhere"}; };
  auto bad = RankLauncher::spawn(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("rank 1: tf-no-such-program-anywhere: not found on PATH"), std::string::npos)
      << bad.status().to_string();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(RankLauncherTest, UnexpectedExitsAreReportedOnceWithWhatEndedThem) {
  Exits exits;
  // Rank 1 fails at once with code 7; rank 2 runs until killed.
  auto l = RankLauncher::spawn(shell("if [ \"$1\" = 1 ]; then exit 7; fi; exec sleep 60", 3, &exits));
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  ASSERT_TRUE(exits.wait_for_count(1));
  {
    const auto seen = exits.get();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].rank, 1);
    EXPECT_EQ(seen[0].describe(), "exit code 7");
    EXPECT_FALSE(seen[0].clean());
  }
  const pid_t rank2 = (*l)->pids()[1];
  ASSERT_EQ(::kill(rank2, SIGKILL), 0);
  ASSERT_TRUE(exits.wait_for_count(2));
  const auto seen = exits.get();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].rank, 2);
  EXPECT_EQ(seen[1].pid, rank2);
  EXPECT_NE(seen[1].describe().find("signal 9"), std::string::npos) << seen[1].describe();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(exits.get().size(), 2u) << "an exit was reported twice";
}

TEST(RankLauncherTest, ExpectedExitsAreNotFailuresAndStragglersAreKilled) {
  Exits exits;
  auto l = RankLauncher::spawn(shell("exec sleep 60", 3, &exits));
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  (*l)->expect_exits();
  (*l)->signal_all(SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ended = (*l)->wait_all(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ASSERT_EQ(ended.size(), 2u);
  for (const RankExit& e : ended)
    EXPECT_NE(e.describe().find("signal 15"), std::string::npos) << e.describe();
  EXPECT_TRUE(exits.get().empty());

  // A child that ignores SIGTERM is killed once the grace is over.
  // It says when its trap is in place (a loaded machine may take a while to get there).
  const fs::path ready = fs::temp_directory_path() / ("tf-rank-launcher-ready-" + std::to_string(::getpid()));
  fs::remove(ready);
  RankLaunchOptions so = shell("trap '' TERM; : > \"$TF_READY\"; while :; do sleep 1; done", 2, nullptr);
  so.env = {{"TF_READY", ready.string()}};
  auto stubborn = RankLauncher::spawn(so);
  ASSERT_TRUE(stubborn.has_value()) << stubborn.status().to_string();
  for (int i = 0; i < 1000 && !fs::exists(ready); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fs::exists(ready)) << "the child never installed its trap";
  fs::remove(ready);
  (*stubborn)->signal_all(SIGTERM);
  const auto killed = (*stubborn)->wait_all(300ms);
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_NE(killed[0].describe().find("signal 9"), std::string::npos) << killed[0].describe();
}

TEST(RankLauncherTest, ChildrenStartWithNoBlockedSignals) {
  // The serving process blocks SIGINT/SIGTERM for its signal thread; a mask survives exec.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  Exits exits;
  auto l = RankLauncher::spawn(shell("exec sleep 60", 2, &exits));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(l.has_value()) << l.status().to_string();
  std::this_thread::sleep_for(200ms);  // let exec happen
  (*l)->signal_all(SIGTERM);
  ASSERT_TRUE(exits.wait_for_count(1)) << "the child ignored SIGTERM: its mask was inherited";
  EXPECT_NE(exits.get()[0].describe().find("signal 15"), std::string::npos) << exits.get()[0].describe();
}

TEST(RankLauncherTest, ChildrenDieWithTheSpawningThread) {
  Exits exits;
  std::unique_ptr<RankLauncher> l;
  std::thread spawner([&] {
    auto r = RankLauncher::spawn(shell("exec sleep 60", 2, &exits));
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    l = std::move(*r);
  });
  spawner.join();  // PR_SET_PDEATHSIG fires when the spawning thread ends
  ASSERT_TRUE(l);
  ASSERT_TRUE(exits.wait_for_count(1)) << "the child outlived its parent thread";
  EXPECT_NE(exits.get()[0].describe().find("signal 15"), std::string::npos) << exits.get()[0].describe();
}

TEST(RankLauncherTest, DestructorKillsWhatStillRuns) {
  std::vector<pid_t> pids;
  {
    auto l = RankLauncher::spawn(shell("exec sleep 60", 3, nullptr));
    ASSERT_TRUE(l.has_value()) << l.status().to_string();
    pids = (*l)->pids();
  }
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t p : pids) EXPECT_TRUE(process_gone(p)) << "pid " << p << " survived (or was not reaped)";
}

TEST(RankLauncherTest, BadExecutableAndOptionsAreErrors) {
  RankLaunchOptions o = shell("true", 2, nullptr);
  o.executable = "/nonexistent/tensorfold";
  auto l = RankLauncher::spawn(o);
  ASSERT_FALSE(l.has_value());
  EXPECT_NE(l.status().message().find("/nonexistent/tensorfold"), std::string::npos)
      << l.status().to_string();
  EXPECT_NE(l.status().message().find("rank 1"), std::string::npos) << l.status().to_string();

  RankLaunchOptions empty;
  empty.world_size = 2;
  EXPECT_FALSE(RankLauncher::spawn(empty).has_value());
  RankLaunchOptions zero = shell("true", 0, nullptr);
  EXPECT_FALSE(RankLauncher::spawn(zero).has_value());
  // A world of one starts nothing.
  auto one = RankLauncher::spawn(shell("true", 1, nullptr));
  ASSERT_TRUE(one.has_value());
  EXPECT_TRUE((*one)->pids().empty());
  EXPECT_TRUE((*one)->wait_all(1s).empty());
}

}  // namespace
}  // namespace tf::engine
