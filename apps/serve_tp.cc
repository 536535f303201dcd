// `tensorfold serve --tp N` process management (see serve_tp.h).
#include "apps/serve_tp.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <chrono>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "engine/tp_follower.h"
#if TF_HAVE_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace tf::apps {
namespace {

// How long rank 0 gives the followers to leave after the stop command, and how
// long a failed rank 0 may take to stop before it exits the hard way.
constexpr auto kFollowerGrace = std::chrono::seconds(10);
constexpr auto kFailureDeadline = std::chrono::seconds(10);
constexpr auto kJoinTimeout = std::chrono::seconds(60);

// This process's arguments, argv[0] included (what the followers are started with).
Expected<std::vector<std::string>> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  if (!f) return unavailable("/proc/self/cmdline: cannot read this process's arguments");
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (args.empty()) return unavailable("/proc/self/cmdline is empty");
  return args;
}

CommOptions comm_options(const TpServeOptions& tp) {
  CommOptions o;
  o.backend = CommBackend::kGloo;
  o.world_size = tp.world;
  o.rank = tp.rank;
  o.rendezvous = tp.rendezvous;
  o.timeout = kJoinTimeout;
  o.op_timeout = std::chrono::seconds(tp.timeout_s);
  o.cuda_device = tp.rank;  // one GPU per rank (NCCL only)
  return o;
}

// Joins the world: the host channel (Gloo) always; with --device cuda also NCCL
// for the model's collectives, from the same rendezvous. Sets engine.tp_comm,
// engine.model_comm and engine.cuda_device.
Status join_world(engine::EngineOptions& engine, const CommOptions& co) {
  const bool cuda = engine.device == "cuda";
  std::vector<CommBackend> backends{CommBackend::kGloo};
  if (cuda) backends.push_back(CommBackend::kNccl);
  TF_ASSIGN_OR_RETURN(auto comms, make_communicators(co, backends));
  engine.tp_comm = std::shared_ptr<Communicator>(std::move(comms[0]));
  if (cuda) {
    engine.model_comm = std::shared_ptr<Communicator>(std::move(comms[1]));
    engine.cuda_device = co.cuda_device;
  }
  return Status::ok();
}

// --device cuda: enough GPUs for one per rank, checked before anything starts.
Status check_devices(const engine::EngineOptions& engine, int world) {
  if (engine.device != "cuda") return Status::ok();
#if TF_HAVE_CUDA
  std::string why;
  const int visible = visible_cuda_devices(&why);
  return engine::check_rank_gpus(world, visible, std::getenv("CUDA_VISIBLE_DEVICES"), why);
#else
  return unimplemented("--tp " + std::to_string(world) +
                       " --device cuda: this tensorfold was built without CUDA (configure with -DTF_CUDA=ON)");
#endif
}

}  // namespace

int run_tp_follower(const engine::EngineOptions& engine, const TpServeOptions& tp) {
  init_logging(tp.rank);
  // Ctrl-C reaches the whole process group: rank 0 handles it and stops us with
  // the stop command. SIGTERM keeps its default (rank 0's death sends it).
  std::signal(SIGINT, SIG_IGN);
  if (tp.rank < 1 || tp.rank >= tp.world) {
    TF_LOG_ERROR("--rank {} is outside 1..{} (--tp {})", tp.rank, tp.world - 1, tp.world);
    return 1;
  }
  if (tp.rendezvous.empty()) {
    TF_LOG_ERROR("--rank {} needs --rendezvous HOST:PORT (rank 0 passes both)", tp.rank);
    return 1;
  }
  engine::EngineOptions options = engine;
  if (Status joined = join_world(options, comm_options(tp)); !joined.is_ok()) {
    TF_LOG_ERROR("joining rank 0 at {}: {}", tp.rendezvous, joined.to_string());
    return joined.code() == StatusCode::kUnavailable ? 3 : 1;
  }
  Status s = engine::serve_follower(options, *options.tp_comm);
  if (!s.is_ok()) {
    TF_LOG_ERROR("{}", s.to_string());
    return s.code() == StatusCode::kUnavailable ? 3 : 1;
  }
  return 0;
}

Expected<std::unique_ptr<TpLeader>> TpLeader::start(engine::EngineOptions& engine, const TpServeOptions& tp) {
  if (tp.world < 2)
    return invalid_argument("TpLeader: --tp " + std::to_string(tp.world) + " needs no followers");
  if (tp.timeout_s < 1)
    return invalid_argument("--tp-timeout must be >= 1 s, got " + std::to_string(tp.timeout_s));
  TF_RETURN_IF_ERROR(check_devices(engine, tp.world));
  init_logging(0);
  TF_ASSIGN_OR_RETURN(std::vector<std::string> args, own_arguments());
  std::unique_ptr<TpLeader> leader(new TpLeader());
  TpLeader* raw = leader.get();

  TpServeOptions self = tp;
  self.rank = 0;
  self.rendezvous = "127.0.0.1:0";
  CommOptions co = comm_options(self);
  // Runs on this (the main) thread once the rendezvous listens: the children's
  // PR_SET_PDEATHSIG is tied to this thread, which lives as long as the process.
  co.on_listening = [&, raw](int port) {
    engine::RankLaunchOptions lo;
    lo.argv = args;
    lo.world_size = tp.world;
    lo.rank_args = [port](int rank) {
      return std::vector<std::string>{"--rank", std::to_string(rank), "--rendezvous",
                                      "127.0.0.1:" + std::to_string(port)};
    };
    lo.env = {{"MODEL_DIR", engine.model_dir}};
    // NVLink multicast can wedge shared GPUs: off unless the user decided otherwise
    // (make_nccl_communicator sets it for this process the same way).
    if (engine.device == "cuda" && std::getenv("NCCL_NVLS_ENABLE") == nullptr) {
      lo.env.push_back({"NCCL_NVLS_ENABLE", "0"});
    }
    lo.on_unexpected_exit = [raw](const engine::RankExit& e) {
      const std::string why = "rank " + std::to_string(e.rank) + " exited (" + e.describe() + ")";
      TF_LOG_ERROR("{}", why);
      raw->fail(why);
    };
    auto launcher = engine::RankLauncher::spawn(std::move(lo));
    if (!launcher) {
      raw->fail("starting the follower ranks: " + launcher.status().to_string());
      return;
    }
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->launcher_ = std::move(*launcher);
  };
  if (engine.device == "cuda") {
    TF_LOG_INFO("tensor parallelism: starting {} CUDA ranks (GPUs 0..{}; steps over Gloo, the model over NCCL)",
                tp.world, tp.world - 1);
  } else {
    TF_LOG_INFO("tensor parallelism: starting {} CPU ranks (Gloo)", tp.world);
  }
  if (Status joined = join_world(engine, co); !joined.is_ok()) {
    return joined.with_context("--tp " + std::to_string(tp.world) + ": joining the ranks");
  }
  {
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->model_comm_ = engine.model_comm;
  }
  engine.on_tp_failure = [raw](const Status& s) {
    // A follower's death breaks the step channel at once, usually before the launcher's
    // watcher (polling every 20 ms) has reaped it: give the watcher a moment, so that the
    // message names the rank that died, not only the socket that broke.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!raw->failed() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    raw->fail(s.to_string());
  };
  TF_LOG_INFO("tensor parallelism: {} ranks joined", tp.world);
  return leader;
}

TpLeader::~TpLeader() = default;

void TpLeader::fail(const std::string& why) {
  std::function<void()> stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    stop = stop_;
  }
  TF_LOG_ERROR("tensor-parallel world broken ({}): stopping the server", why);
  abort_model_comm(why);
  if (!stop) {
    // Still starting (loading): there is no server to stop. The followers get
    // SIGTERM from PR_SET_PDEATHSIG when this process is gone.
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
  // A stop can be lost in the moment between bind and listen, and the engine
  // could wait in a collective for a hung peer: bound the shutdown.
  std::thread([] {
    std::this_thread::sleep_for(kFailureDeadline);
    TF_LOG_ERROR("the server did not stop within {} s after the failure; exiting", kFailureDeadline.count());
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::_Exit(1);
  }).detach();
  stop();
}

void TpLeader::abort_model_comm(const std::string& why) {
#if TF_HAVE_CUDA
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    comm = model_comm_;
  }
  // An NCCL collective waiting for a dead peer would otherwise spin until its
  // timeout: make it (and the engine's step) fail now.
  if (auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get())) nccl->abort(why);
#else
  (void)why;
#endif
}

void TpLeader::set_stop(std::function<void()> stop) {
  bool already = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = stop;
    already = failed_;
  }
  if (already) stop();
}

bool TpLeader::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void TpLeader::begin_shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (launcher_) launcher_->expect_exits();
}

int TpLeader::finish() {
  begin_shutdown();
  engine::RankLauncher* launcher = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    launcher = launcher_.get();
  }
  if (launcher) {
    const auto grace =
        failed() ? std::chrono::duration_cast<std::chrono::seconds>(kFollowerGrace / 5) : kFollowerGrace;
    for (const engine::RankExit& e : launcher->wait_all(grace)) {
      if (!e.clean() && !failed()) TF_LOG_WARN("rank {} ended with {}", e.rank, e.describe());
    }
  }
  return failed() ? 1 : 0;
}

}  // namespace tf::apps
