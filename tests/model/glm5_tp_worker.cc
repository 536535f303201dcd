// glm5_tp_worker: one tensor-parallel rank of the GLM-5 model in its own process
// (glm5_tp_process_test spawns 2 or 3). It joins the Gloo communicator, loads
// its shard of the fixture checkpoint, runs run_greedy() (prompt prefill plus
// greedy decode steps through the batched step) and writes the result with
// write_tp_run(). Every rank writes its own file when given --out, so the test
// can check that all ranks hold the same logits.
//
//   glm5_tp_worker --rank R --world W --rendezvous HOST:PORT --fixture DIR
//                  [--out PATH] [--port-fd FD] [--steps N] [--op-timeout-ms MS]
//                  [--die-before-run 1]
// --port-fd (rank 0): writes "<port>\n" once the rendezvous listens (use port 0).
// --die-before-run: exits with code 9 once joined, before the model runs (the
// test then checks that the other ranks fail fast instead of hanging).
// Exit codes: 0 done, 1 an error, 2 kUnavailable (a peer died, hung or never
// joined), 3 usage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "comm/communicator.h"
#include "glm5_fixture.h"

namespace {

int usage(const std::string& why) {
  std::fprintf(stderr, "glm5_tp_worker: %s\n", why.c_str());
  return 3;
}

int fail(int rank, const tf::Status& s) {
  std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
  return s.code() == tf::StatusCode::kUnavailable ? 2 : 1;
}

// The fixture helpers report through gtest's EXPECT (outside a test they land in
// the ad-hoc result); any such failure makes the worker fail too.
bool gtest_failed() { return ::testing::UnitTest::GetInstance()->ad_hoc_test_result().Failed(); }

}  // namespace

int main(int argc, char** argv) {
  tf::CommOptions options;
  options.backend = tf::CommBackend::kGloo;
  // Ranks load their shards at different speeds on a loaded machine; the first
  // collective waits for the slowest, so allow more than the 8 s default.
  options.op_timeout = std::chrono::milliseconds(30000);
  std::string fixture_dir, out_path;
  int port_fd = -1, steps = 6;
  bool die_before_run = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--rank") {
      options.rank = std::atoi(value.c_str());
    } else if (flag == "--world") {
      options.world_size = std::atoi(value.c_str());
    } else if (flag == "--rendezvous") {
      options.rendezvous = value;
    } else if (flag == "--fixture") {
      fixture_dir = value;
    } else if (flag == "--out") {
      out_path = value;
    } else if (flag == "--port-fd") {
      port_fd = std::atoi(value.c_str());
    } else if (flag == "--steps") {
      steps = std::atoi(value.c_str());
    } else if (flag == "--die-before-run") {
      die_before_run = value == "1";
    } else if (flag == "--op-timeout-ms") {
      options.op_timeout = std::chrono::milliseconds(std::atoll(value.c_str()));
    } else {
      return usage("unknown flag " + flag);
    }
  }
  if (fixture_dir.empty()) return usage("--fixture is required");
  if (!std::filesystem::exists(fixture_dir + "/reference.safetensors"))
    return usage(fixture_dir + " has no reference.safetensors");
  if (steps < 0) return usage("--steps must be >= 0");
  options.on_listening = [port_fd](int port) {
    if (port_fd < 0) return;
    const std::string line = std::to_string(port) + "\n";
    [[maybe_unused]] ssize_t n = ::write(port_fd, line.data(), line.size());
  };

  auto comm = tf::make_communicator(options);
  if (!comm) return fail(options.rank, comm.status());
  const tf::test::Fixture fixture = tf::test::load_fixture(fixture_dir);
  if (gtest_failed()) return fail(options.rank, tf::invalid_argument(fixture_dir + ": the fixture did not load"));
  if (die_before_run) {
    std::fprintf(stderr, "rank %d: exiting before the run (--die-before-run)\n", options.rank);
    std::_Exit(9);
  }
  auto run = tf::test::run_greedy(fixture, **comm, steps);
  if (!run) return fail(options.rank, run.status());
  if (gtest_failed()) return fail(options.rank, tf::internal_error(fixture.name + ": a fixture helper failed"));
  if (!out_path.empty()) {
    tf::Status w = tf::test::write_tp_run(out_path, *run);
    if (!w.is_ok()) return fail(options.rank, w);
  }
  // No rank leaves while a peer may still be reading from it.
  tf::Status s = (*comm)->barrier();
  if (!s.is_ok()) return fail(options.rank, s);
  std::fprintf(stderr, "rank %d/%d: %s done (%s)\n", options.rank, options.world_size, fixture.name.c_str(),
               (*comm)->backend_name());
  return 0;
}
