// Remote ranks over SSH (see remote_rank.h).
#include "engine/remote_rank.h"

#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

extern char** environ;

namespace tf::engine {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

std::vector<std::string> ssh_default_command() {
  return {"ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ServerAliveInterval=10",
          "-o", "ServerAliveCountMax=3", "-T"};
}

std::vector<std::string> ssh_command_from(const char* tf_ssh) {
  std::vector<std::string> out;
  if (tf_ssh != nullptr) {
    std::istringstream words(tf_ssh);
    for (std::string w; words >> w;) out.push_back(w);
  }
  return out.empty() ? ssh_default_command() : out;
}

std::string ssh_host(const std::string& target) {
  std::string host = target;
  if (const size_t at = host.rfind('@'); at != std::string::npos) host = host.substr(at + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

std::string shell_quote(std::string_view word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                              "0123456789@%_+=:,./-") == std::string_view::npos;
  if (plain) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<std::string> without_options(const std::vector<std::string>& args,
                                         const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    bool drop = false;
    bool drop_next = false;
    for (const std::string& name : names) {
      const bool is_long = starts_with(name, "--");
      if (a == name) {
        drop = drop_next = true;
      } else if (is_long && starts_with(a, name + "=")) {
        drop = true;
      } else if (!is_long && !starts_with(a, "--") && starts_with(a, name)) {
        drop = true;  // "-mVALUE"
      }
      if (drop) break;
    }
    if (!drop) {
      out.push_back(a);
    } else if (drop_next) {
      ++i;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> forwarded_environment(const std::vector<std::string>& names,
                                                                       const std::vector<std::string>& except) {
  const std::set<std::string> skip(except.begin(), except.end());
  std::set<std::string> seen;
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const std::string& name, const char* value) {
    if (value == nullptr || skip.count(name) || !seen.insert(name).second) return;
    out.emplace_back(name, value);
  };
  for (const std::string& name : names) add(name, std::getenv(name.c_str()));
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    const std::string name(*e, static_cast<size_t>(eq - *e));
    if (starts_with(name, "TF_") || starts_with(name, "NCCL_")) add(name, eq + 1);
  }
  return out;
}

std::string remote_rank_script(const RemotePlan& plan, const RemoteRank& rank,
                               const std::vector<std::string>& follower_args) {
  // Runs in the login's home: relative paths (the folder, the checkpoint) are relative to it.
  const std::string dir = shell_quote(plan.dir);
  const std::string missing = "\" on $(hostname) (scripts/prepare.sh copies it there)\" >&2; ";
  std::string s;
  s += "d=$(cd " + dir + " 2>/dev/null && pwd) || { echo \"tensorfold: no folder \"" + dir + missing + "exit 126; }\n";
  s += "[ -x \"$d/tensorfold\" ] || { echo \"tensorfold: no tensorfold binary in \"" + dir + missing + "exit 127; }\n";
  s += "echo $$ > \"$d/rank" + std::to_string(rank.rank) + ".pid\"\n";
  s += "mkdir -p \"$d/logs\"\n";
  s += "exec env LD_LIBRARY_PATH=\"$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"";
  for (const auto& [name, value] : plan.env) s += " " + shell_quote(name + "=" + value);
  // The folder's own settings last (they win over anything forwarded).
  s += " TF_CACHE_DIR=\"$d/cache\" TF_LOG_FILE=\"$d/logs/rank" + std::to_string(rank.rank) + ".log\"";
  s += " \"$d/tensorfold\"";
  for (const std::string& a : follower_args) s += " " + shell_quote(a);
  s += "\n";
  return s;
}

std::vector<std::string> remote_rank_command(const RemotePlan& plan, const RemoteRank& rank,
                                             const std::vector<std::string>& follower_args) {
  std::vector<std::string> cmd = plan.ssh.empty() ? ssh_default_command() : plan.ssh;
  cmd.push_back(rank.target);
  cmd.push_back("sh -c " + shell_quote(remote_rank_script(plan, rank, follower_args)));
  return cmd;
}

}  // namespace tf::engine
