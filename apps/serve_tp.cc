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

#include "comm/route_address.h"
#include "core/logging.h"
#include "engine/remote_rank.h"
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
  o.cuda_device = tp.gpu >= 0 ? tp.gpu : tp.rank;  // one GPU per rank (NCCL only)
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

// Options a follower must not get from rank 0's command line: rank 0's own
// (a follower given them would start ranks itself) and those each rank gets anew.
const std::vector<std::string> kRankZeroOptions = {"--worker",       "--fabric-peer", "--worker-dir",
                                                   "--worker-model", "--tp",          "--rank",
                                                   "--rendezvous",   "--gpu",         "--device"};
// ... and, on a worker, what names paths or ports of this machine.
const std::vector<std::string> kThisMachineOptions = {"--model", "-m",        "--cache-dir",   "--host",
                                                      "--port",  "--api-key", "--api-key-file"};
// Settings rank 0's environment gives that a worker gets otherwise (or not at all).
const std::vector<std::string> kNotForwarded = {
    "MODEL_DIR", "TF_CACHE_DIR", "HOST",        "PORT",       "API_KEY",          "API_KEY_FILE",
    "TP",        "WORKER",       "FABRIC_PEER", "WORKER_DIR", "WORKER_MODEL_DIR", "TF_LOG_FILE"};

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Where the other ranks reach rank 0: loopback on one machine; with workers,
// this machine's address toward the first of them (its fabric address when given).
Expected<std::string> rank_zero_address(const TpServeOptions& tp) {
  if (tp.workers.empty()) return std::string("127.0.0.1");
  const bool fabric = !tp.fabric_peers.empty();
  const std::string peer = fabric ? tp.fabric_peers.front() : engine::ssh_host(tp.workers.front());
  auto address = local_address_toward(peer);
  if (!address) {
    return address.status().with_context(
        fabric ? "--fabric-peer " + peer
               : "--worker " + tp.workers.front() +
                     " (set FABRIC_PEER / --fabric-peer to the worker's address on the link between the machines)");
  }
  return *address;
}

// The ranks on workers: the last tp.workers.size() ranks, each on GPU 0 of its
// machine (GPU k for the k-th repeat of a destination).
std::vector<engine::RemoteRank> remote_ranks(const TpServeOptions& tp) {
  std::vector<engine::RemoteRank> out;
  const int first = tp.world - static_cast<int>(tp.workers.size());
  for (size_t i = 0; i < tp.workers.size(); ++i) {
    int gpu = 0;
    for (size_t j = 0; j < i; ++j) gpu += tp.workers[j] == tp.workers[i] ? 1 : 0;
    out.push_back({first + static_cast<int>(i), tp.workers[i], gpu});
  }
  return out;
}

}  // namespace

Expected<int> world_with_workers(int tp, size_t workers) {
  if (workers == 0) return tp;
  const int needed = 1 + static_cast<int>(workers);
  if (tp == 1) return needed;
  if (tp < needed) {
    return invalid_argument("--tp " + std::to_string(tp) + " with " + std::to_string(workers) +
                            " worker(s): rank 0 stays on this machine, so --tp must be at least " +
                            std::to_string(needed));
  }
  return tp;
}

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
  for (const std::string& w : tp.workers) {
    if (w.empty() || w.front() == '-' || w.find_first_of(" \t\n'\"") != std::string::npos)
      return invalid_argument("--worker '" + w + "' is not an SSH destination (user@host or host)");
  }
  const int local_ranks = tp.world - static_cast<int>(tp.workers.size());
  if (local_ranks < 1) return world_with_workers(tp.world, tp.workers.size()).status();
  TF_RETURN_IF_ERROR(check_devices(engine, local_ranks));
  init_logging(0);
  TF_ASSIGN_OR_RETURN(std::vector<std::string> args, own_arguments());
  TF_ASSIGN_OR_RETURN(const std::string address, rank_zero_address(tp));
  std::unique_ptr<TpLeader> leader(new TpLeader());
  TpLeader* raw = leader.get();

  // Every follower: rank 0's arguments (less its own options), then its rank's.
  const std::vector<std::string> shared(args.begin() + 1, args.end());
  const std::vector<std::string> local_args = engine::without_options(shared, kRankZeroOptions);
  std::vector<std::string> remote_args = engine::without_options(local_args, kThisMachineOptions);
  engine::RemotePlan plan;
  plan.ssh = engine::ssh_command_from(std::getenv("TF_SSH"));
  plan.dir = tp.worker_dir;
  plan.model_dir = tp.worker_model;
  plan.env = engine::forwarded_environment(tp.option_env_names, kNotForwarded);
  if (!plan.model_dir.empty()) plan.env.push_back({"MODEL_DIR", plan.model_dir});
  if (engine.device == "cuda" && std::getenv("NCCL_NVLS_ENABLE") == nullptr) {
    plan.env.push_back({"NCCL_NVLS_ENABLE", "0"});
  }
  const std::vector<engine::RemoteRank> remotes = remote_ranks(tp);

  TpServeOptions self = tp;
  self.rank = 0;
  self.rendezvous = host_port(address, 0);
  CommOptions co = comm_options(self);
  // Runs on this (the main) thread once the rendezvous listens: the children's
  // PR_SET_PDEATHSIG is tied to this thread, which lives as long as the process.
  co.on_listening = [&, raw](int port) {
    const std::string rendezvous = host_port(address, port);
    // The device rank 0 runs on (DEVICE=auto chosen here), so that no rank chooses another.
    auto rank_options = [&tp, device = engine.device, rendezvous](int rank) {
      return std::vector<std::string>{"--tp",         std::to_string(tp.world),
                                      "--rank",       std::to_string(rank),
                                      "--rendezvous", rendezvous,
                                      "--device",     device};
    };
    engine::RankLaunchOptions lo;
    lo.argv = {args.front()};
    lo.argv.insert(lo.argv.end(), local_args.begin(), local_args.end());
    lo.world_size = tp.world;
    lo.rank_args = rank_options;
    lo.rank_command = [&](int rank) {
      if (rank < local_ranks) return std::vector<std::string>();
      const engine::RemoteRank& remote = remotes[rank - local_ranks];
      std::vector<std::string> a = remote_args;
      for (std::string& o : rank_options(rank)) a.push_back(std::move(o));
      a.push_back("--gpu");
      a.push_back(std::to_string(remote.gpu));
      TF_LOG_INFO("rank {}: {} (GPU {}), in {}", rank, remote.target, remote.gpu, plan.dir);
      return engine::remote_rank_command(plan, remote, a);
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
  if (!tp.workers.empty()) {
    TF_LOG_INFO("tensor parallelism: {} rank(s) here, {} on other machines; rank 0 at {}", local_ranks,
                tp.workers.size(), address);
  }
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

void TpLeader::wait_for_lost_rank(std::chrono::milliseconds limit) const {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!failed() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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
