// Ranks on other machines (system.md: WORKER=user@host, one rank per DGX Spark):
// rank 0 starts each one over SSH as `tensorfold serve ... --rank r` in the
// worker's tensorfold folder, which scripts/prepare.sh fills (the binary, the
// shared libraries it needs, the checkpoint). The SSH client is an ordinary
// child of rank 0 (RankLauncher), so a rank that exits on the worker ends its
// SSH session and rank 0 notices it as it notices a local rank's exit.
//
// The worker has no checkout and none of rank 0's environment: the follower
// gets rank 0's arguments less those only rank 0 uses, and the settings rank 0
// read from its environment (forwarded explicitly in the remote command).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::engine {

// What every rank on the workers shares.
struct RemotePlan {
  // The SSH client and its options (TF_SSH; default ssh_default_command()).
  std::vector<std::string> ssh;
  // The tensorfold folder on each worker, absolute or relative to the SSH
  // login's home: DIR/tensorfold, DIR/lib (shared libraries), DIR/cache (the demo
  // checkpoint when no model is given), DIR/rank<r>.pid.
  std::string dir = ".cache/tensorfold";
  // The checkpoint on the workers; empty: the demo checkpoint (made on the worker).
  std::string model_dir;
  // NAME=VALUE settings the remote command sets (forwarded_environment()).
  std::vector<std::pair<std::string, std::string>> env;
};

struct RemoteRank {
  int rank = 1;
  std::string target;  // the SSH destination: "user@host", "host" or an alias of ~/.ssh/config
  int gpu = 0;         // CUDA device on that machine
};

// `ssh -o BatchMode=yes ...`: key-based logins only (a password prompt would hang
// the launch), a worker's host key is accepted the first time (never a changed
// one), and a dead link ends the session within ~30 s.
std::vector<std::string> ssh_default_command();
// TF_SSH split at white space (no quoting), or the default when unset or empty.
std::vector<std::string> ssh_command_from(const char* tf_ssh);

// The host part of an SSH destination: "user@host" -> "host", "user@[fe80::1]"
// -> "fe80::1", "host:22"/"ssh://" forms are not SSH destinations and are kept.
std::string ssh_host(const std::string& target);

// POSIX shell quoting: 'it'\''s' for it's; plain words stay as they are.
std::string shell_quote(std::string_view word);

// `args` without the options named (long "--model" or short "-m"), in any of
// the forms a command line gives them: "--model X", "--model=X", "-m X", "-mX".
// Every option named takes one value.
std::vector<std::string> without_options(const std::vector<std::string>& args,
                                         const std::vector<std::string>& names);

// NAME=VALUE of this process's environment for each of `names` that is set, then
// every TF_* and NCCL_* variable (the engine's and NCCL's own settings), each
// once, minus those in `except`.
std::vector<std::pair<std::string, std::string>> forwarded_environment(const std::vector<std::string>& names,
                                                                       const std::vector<std::string>& except);

// The shell script a worker runs for one rank, in the login's home: find the
// folder and its binary (or say what is missing), write the pid file, then exec
// `DIR/tensorfold ARGS` with the plan's settings, DIR/lib on the library path,
// DIR/cache as the cache folder and DIR/logs/rank<r>.log as its own log (TF_LOG_FILE;
// its lines also reach rank 0's log through SSH). `follower_args` starts with the
// subcommand ("serve") and ends with the rank's own options.
std::string remote_rank_script(const RemotePlan& plan, const RemoteRank& rank,
                               const std::vector<std::string>& follower_args);

// The local command that runs it: SSH ... TARGET sh -c 'SCRIPT'.
std::vector<std::string> remote_rank_command(const RemotePlan& plan, const RemoteRank& rank,
                                             const std::vector<std::string>& follower_args);

}  // namespace tf::engine
