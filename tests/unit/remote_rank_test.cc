// Ranks on other machines (src/engine/remote_rank.h): SSH destinations, shell
// quoting checked by a real /bin/sh, options taken out of rank 0's command line
// in every form, the settings forwarded, and the remote script run by sh in a
// fake home (what a worker's login does) with a missing folder said so.
#include "engine/remote_rank.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tf::engine {
namespace {

namespace fs = std::filesystem;

// Runs `sh -c SCRIPT` in `dir` with a login-like environment; stdout+stderr and the exit code.
std::pair<std::string, int> run_sh(const std::string& script, const fs::path& dir) {
  const std::string cmd = "cd " + shell_quote(dir.string()) + " && env -i HOME=" + shell_quote(dir.string()) +
                          " PATH=/usr/bin:/bin sh -c " + shell_quote(script) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  size_t n = 0;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = p != nullptr ? ::pclose(p) : -1;
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(RemoteRank, SshHostOfADestination) {
  EXPECT_EQ(ssh_host("user@192.0.2.2"), "192.0.2.2");
  EXPECT_EQ(ssh_host("spark2"), "spark2");
  EXPECT_EQ(ssh_host("me@[fe80::1]"), "fe80::1");
  EXPECT_EQ(ssh_host("a@b@host"), "host");
}

TEST(RemoteRank, ShellQuotingSurvivesARealShell) {
  EXPECT_EQ(shell_quote("plain/path-1.0"), "plain/path-1.0");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  const fs::path dir = fs::temp_directory_path();
  for (const std::string word : {"a b", "it's", "$HOME `id` $(id)", "semi;colon&amp|pipe", "tab\there", "\"dq\"",
                                 "new\nline", "*?[glob]", "--model=/x y"}) {
    auto [out, code] = run_sh("printf '%s' " + shell_quote(word), dir);
    EXPECT_EQ(code, 0);
    EXPECT_EQ(out, word) << shell_quote(word);
  }
}

TEST(RemoteRank, OptionsAreTakenOutInEveryForm) {
  const std::vector<std::string> args = {"serve",     "--model",   "/m",   "--port=8888", "-m/short", "--tp", "2",
                                         "--parallel", "4",        "-m",   "/again",      "--worker", "a@b",
                                         "--models-are-not-model", "--dense", "q4"};
  EXPECT_EQ(without_options(args, {"--model", "-m", "--port", "--tp", "--worker"}),
            (std::vector<std::string>{"serve", "--parallel", "4", "--models-are-not-model", "--dense", "q4"}));
  // A name that is only a prefix of another option is not taken for it.
  EXPECT_EQ(without_options({"--worker-dir", "x", "--worker", "y"}, {"--worker"}),
            (std::vector<std::string>{"--worker-dir", "x"}));
  // An option at the very end without its value goes alone.
  EXPECT_EQ(without_options({"serve", "--model"}, {"--model"}), (std::vector<std::string>{"serve"}));
}

TEST(RemoteRank, SettingsAreForwardedOnceAndExceptionsStayBehind) {
  ::setenv("TF_REMOTE_TEST_SETTING", "v1", 1);
  ::setenv("NCCL_REMOTE_TEST", "v2", 1);
  ::setenv("DENSE_REMOTE_TEST", "f32", 1);
  ::setenv("TF_REMOTE_TEST_SECRET", "no", 1);
  ::unsetenv("UNSET_REMOTE_TEST");
  const auto env = forwarded_environment({"DENSE_REMOTE_TEST", "UNSET_REMOTE_TEST", "TF_REMOTE_TEST_SETTING"},
                                         {"TF_REMOTE_TEST_SECRET"});
  auto count = [&](const std::string& name, const std::string& value) {
    int n = 0;
    for (const auto& [k, v] : env) n += k == name && v == value ? 1 : 0;
    return n;
  };
  EXPECT_EQ(count("DENSE_REMOTE_TEST", "f32"), 1);
  EXPECT_EQ(count("TF_REMOTE_TEST_SETTING", "v1"), 1);  // named and TF_*: once
  EXPECT_EQ(count("NCCL_REMOTE_TEST", "v2"), 1);
  for (const auto& [k, v] : env) {
    EXPECT_NE(k, "TF_REMOTE_TEST_SECRET");
    EXPECT_NE(k, "UNSET_REMOTE_TEST");
  }
  EXPECT_EQ(env.front().first, "DENSE_REMOTE_TEST");  // the named ones first, in their order
}

TEST(RemoteRank, TheScriptRunsInTheLoginHome) {
  const fs::path home = fs::temp_directory_path() / ("tf-remote-rank-" + std::to_string(::getpid()));
  fs::remove_all(home);
  fs::create_directories(home / "tf dir" / "lib");
  // A stand-in for the binary: prints its arguments and the settings it got.
  {
    std::ofstream f(home / "tf dir" / "tensorfold");
    f << "#!/bin/sh\necho \"args:$*\"\necho \"lib:$LD_LIBRARY_PATH\"\necho \"cache:$TF_CACHE_DIR\"\n"
         "echo \"dense:$DENSE\"\necho \"model:$MODEL_DIR\"\necho \"pwd:$PWD\"\necho \"log:$TF_LOG_FILE\"\n";
  }
  fs::permissions(home / "tf dir" / "tensorfold", fs::perms::owner_all);
  RemotePlan plan;
  plan.dir = "tf dir";  // relative to the login's home
  plan.env = {{"DENSE", "f32"}, {"MODEL_DIR", "models/it's"}, {"TF_CACHE_DIR", "/head/cache"}};
  RemoteRank rank{3, "me@host", 1};
  const std::string script = remote_rank_script(plan, rank, {"serve", "--rank", "3", "--x=a b"});
  auto [out, code] = run_sh(script, home);
  ASSERT_EQ(code, 0) << out;
  const std::string d = (home / "tf dir").string();
  EXPECT_NE(out.find("args:serve --rank 3 --x=a b\n"), std::string::npos) << out;
  EXPECT_NE(out.find("lib:" + d + "/lib\n"), std::string::npos) << out;
  EXPECT_NE(out.find("cache:" + d + "/cache\n"), std::string::npos) << out;  // the folder's, not a forwarded one
  EXPECT_NE(out.find("log:" + d + "/logs/rank3.log\n"), std::string::npos) << out;
  EXPECT_TRUE(fs::is_directory(home / "tf dir" / "logs"));
  EXPECT_NE(out.find("dense:f32\nmodel:models/it's\n"), std::string::npos) << out;
  EXPECT_NE(out.find("pwd:" + home.string() + "\n"), std::string::npos) << out;  // relative paths from home
  std::ifstream pid(home / "tf dir" / "rank3.pid");
  int written = 0;
  EXPECT_TRUE(pid >> written);
  EXPECT_GT(written, 0);

  // No folder, or no binary in it: said, with exit codes a launcher reports.
  plan.dir = "missing";
  auto [missing, missing_code] = run_sh(remote_rank_script(plan, rank, {"serve"}), home);
  EXPECT_EQ(missing_code, 126);
  EXPECT_NE(missing.find("tensorfold: no folder missing on "), std::string::npos) << missing;
  fs::remove(home / "tf dir" / "tensorfold");
  plan.dir = "tf dir";
  auto [nobin, nobin_code] = run_sh(remote_rank_script(plan, rank, {"serve"}), home);
  EXPECT_EQ(nobin_code, 127);
  EXPECT_NE(nobin.find("tensorfold: no tensorfold binary in tf dir on "), std::string::npos) << nobin;

  // The local command: the SSH client, the destination, then one word for the remote shell.
  plan.ssh = {"ssh", "-T"};
  const auto cmd = remote_rank_command(plan, rank, {"serve"});
  ASSERT_EQ(cmd.size(), 4u);
  EXPECT_EQ(cmd[0], "ssh");
  EXPECT_EQ(cmd[2], "me@host");
  EXPECT_EQ(cmd[3].rfind("sh -c '", 0), 0u);
  fs::remove_all(home);
}

TEST(RemoteRank, SshCommandFromTheEnvironment) {
  EXPECT_EQ(ssh_command_from(nullptr), ssh_default_command());
  EXPECT_EQ(ssh_command_from("  "), ssh_default_command());
  EXPECT_EQ(ssh_command_from("ssh -p 2222  -i key"), (std::vector<std::string>{"ssh", "-p", "2222", "-i", "key"}));
  const auto d = ssh_default_command();
  EXPECT_NE(std::find(d.begin(), d.end(), "BatchMode=yes"), d.end());
}

}  // namespace
}  // namespace tf::engine
