// RankLauncher (see rank_launcher.h). Children are started with fork + execve
// rather than posix_spawn because the child must set PR_SET_PDEATHSIG; between
// fork and exec only async-signal-safe calls run (every string is prepared
// before the fork). An exec failure comes back through a close-on-exec pipe.
#include "engine/rank_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

extern char** environ;

namespace tf::engine {
namespace {

std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::map<std::string, std::string> env;
  std::vector<std::string> order;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = kv.substr(0, eq);
    if (!env.count(key)) order.push_back(key);
    env[key] = kv.substr(eq + 1);
  }
  for (const auto& [key, value] : overrides) {
    if (!env.count(key)) order.push_back(key);
    env[key] = value;
  }
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const std::string& key : order) out.push_back(key + "=" + env[key]);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Expected<pid_t> spawn_one(const std::string& executable, std::vector<std::string> args,
                          std::vector<std::string> env) {
  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return internal_error(std::string("pipe2: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return unavailable("fork for " + executable + ": " + std::strerror(err));
  }
  if (pid == 0) {
    ::close(pipe_fds[0]);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    ::execve(executable.c_str(), argv.data(), envp.data());
    const int err = errno;
    [[maybe_unused]] ssize_t n = ::write(pipe_fds[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  int err = 0;
  ssize_t n = 0;
  do {
    n = ::read(pipe_fds[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    ::waitpid(pid, nullptr, 0);
    return invalid_argument("starting " + executable + ": " + std::strerror(err));
  }
  return pid;
}

// `program` as execve needs it: a name without '/' is looked up on PATH.
Expected<std::string> program_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return not_found(program + ": not found on PATH (" + dirs + ")");
}

}  // namespace

Status check_rank_gpus(int world, int visible, const char* visible_env, const std::string& why_none) {
  if (world < 1) return invalid_argument("--tp must be >= 1, got " + std::to_string(world));
  if (visible >= world) return Status::ok();
  std::string msg = "--tp " + std::to_string(world) + " with --device cuda needs " + std::to_string(world) +
                    " GPUs (one per rank), but " + std::to_string(visible) + (visible == 1 ? " is" : " are") +
                    " visible";
  msg += visible_env != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible_env + ")"
                                : std::string(" (CUDA_VISIBLE_DEVICES is not set)");
  if (visible == 0 && !why_none.empty()) msg += ": " + why_none;
  return invalid_argument(msg + "; lower --tp or make more GPUs visible");
}

std::string RankExit::describe() const {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : std::string());
  }
  return "wait status " + std::to_string(wait_status);
}

bool RankExit::clean() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

Expected<std::unique_ptr<RankLauncher>> RankLauncher::spawn(RankLaunchOptions options) {
  if (options.world_size < 1)
    return invalid_argument("rank launcher: world size " + std::to_string(options.world_size));
  if (options.argv.empty()) return invalid_argument("rank launcher: argv is empty (argv[0] is required)");
  std::unique_ptr<RankLauncher> l(new RankLauncher(std::move(options)));
  const RankLaunchOptions& o = l->options_;
  const std::vector<std::string> env = child_environment(o.env);
  for (int rank = 1; rank < o.world_size; ++rank) {
    std::string executable = o.executable;
    std::vector<std::string> args = o.rank_command ? o.rank_command(rank) : std::vector<std::string>();
    if (!args.empty()) {
      auto path = program_path(args.front());
      if (!path) return path.status().with_context("rank " + std::to_string(rank));
      executable = *path;
    } else {
      args = o.argv;
      if (o.rank_args) {
        for (std::string& a : o.rank_args(rank)) args.push_back(std::move(a));
      }
    }
    auto pid = spawn_one(executable, std::move(args), env);
    if (!pid)
      return pid.status().with_context("rank " + std::to_string(rank));  // ~RankLauncher kills the others
    l->children_.push_back({rank, *pid, false, 0});
  }
  RankLauncher* raw = l.get();
  l->watcher_ = std::thread([raw] { raw->watch(); });
  return l;
}

RankLauncher::~RankLauncher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    expected_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  for (Child& c : children_) {
    if (c.reaped) continue;
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, &c.wait_status, 0);
    c.reaped = true;
  }
}

std::vector<RankExit> RankLauncher::reap_locked() {
  std::vector<RankExit> unexpected;
  for (Child& c : children_) {
    if (c.reaped) continue;
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    c.reaped = true;
    c.wait_status = status;
    if (!expected_) unexpected.push_back({c.rank, c.pid, status});
  }
  return unexpected;
}

void RankLauncher::watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    std::vector<RankExit> exits = reap_locked();
    if (!exits.empty() && options_.on_unexpected_exit) {
      lock.unlock();
      for (const RankExit& e : exits) options_.on_unexpected_exit(e);
      lock.lock();
      continue;
    }
    cv_.wait_for(lock, options_.poll_interval, [&] { return stopping_; });
  }
}

void RankLauncher::expect_exits() {
  std::lock_guard<std::mutex> lock(mu_);
  expected_ = true;
}

std::vector<RankExit> RankLauncher::wait_all(std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::unique_lock<std::mutex> lock(mu_);
  expected_ = true;
  for (;;) {
    reap_locked();
    bool all = true;
    for (const Child& c : children_) all = all && c.reaped;
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    cv_.wait_for(lock, options_.poll_interval);
  }
  std::vector<RankExit> exits;
  for (Child& c : children_) {
    if (!c.reaped) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.wait_status, 0);
      c.reaped = true;
    }
    exits.push_back({c.rank, c.pid, c.wait_status});
  }
  return exits;
}

void RankLauncher::signal_all(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Child& c : children_) {
    if (!c.reaped) ::kill(c.pid, sig);
  }
}

std::vector<pid_t> RankLauncher::pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pid_t> out;
  for (const Child& c : children_) out.push_back(c.pid);
  return out;
}

}  // namespace tf::engine
