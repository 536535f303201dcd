// `tensorfold serve --tp N` (issue #7): one process per rank, on this host
// and, with --worker, on other machines (one rank per worker, over SSH:
// engine/remote_rank.h; scripts/prepare.sh copies what a worker needs).
//
// Rank 0 is the process the user started. It joins a Gloo world on
// 127.0.0.1 (a free port), starting ranks 1..N-1 as copies of itself with the
// same arguments plus `--rank r --rendezvous 127.0.0.1:PORT` (and MODEL_DIR set
// to the resolved checkpoint, e.g. the demo). Rank 0 serves HTTP and drives
// every step (engine/step_broadcast.h); the others load their shard and follow
// (engine/tp_follower.h).
//
// --device cuda: rank r computes on GPU r (of those CUDA_VISIBLE_DEVICES leaves;
// fewer GPUs than ranks is refused before anything starts). The same rendezvous
// then also bootstraps an NCCL communicator: step commands and the model setup
// stay on Gloo (a host channel that may wait indefinitely and needs no GPU
// memory), the model's all-reduces and all-gathers run on NCCL on the device.
// NCCL_NVLS_ENABLE=0 unless set.
//
// --worker user@host (repeatable; WORKER=a,b): ranks N-W..N-1 run on those
// machines (W workers; --tp defaults to 1 + W, and ranks 0..N-W-1 stay here).
// The rendezvous then listens on this machine's address toward the first
// worker (toward --fabric-peer when SSH goes over another network), every
// rank's Gloo and NCCL sockets use the interface toward rank 0, and a rank on
// a worker computes on that machine's GPU 0 (1, 2, ... for a destination named
// again).
//
// Failure: if any rank dies (rank 0's watcher sees the exit: "rank r exited
// (exit code 1)") or the world breaks (a collective fails: a peer died or hung
// past --tp-timeout), rank 0 logs it, stops the HTTP server (the port is
// released) and exits with code 1; if it was still starting it exits at once.
// The followers get the stop command when rank 0 stops, or see its sockets
// close (and SIGTERM through PR_SET_PDEATHSIG) when it dies.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_options.h"
#include "engine/rank_launcher.h"

namespace tf::apps {

struct TpServeOptions {
  int world = 1;           // --tp
  int rank = 0;            // --rank: set by rank 0 on the processes it starts
  std::string rendezvous;  // --rendezvous: rank 0's host:port (followers)
  // --tp-timeout: how long a rank waits for the others in one collective; it
  // covers uneven shard loading. A dead rank is noticed at once regardless.
  int timeout_s = 120;
  int gpu = -1;  // --gpu: set by rank 0 on the ranks it starts on workers; -1: GPU `rank`

  // Ranks on other machines (rank 0 only).
  std::vector<std::string> workers;       // --worker: SSH destinations, one rank each
  std::vector<std::string> fabric_peers;  // --fabric-peer: the first worker's address on the rank link
  std::string worker_dir = ".cache/tensorfold";  // --worker-dir: the tensorfold folder on each worker
  std::string worker_model;  // --worker-model: the checkpoint there (serve: --model's path); empty: the demo
  // The environment variables serve's options read (forwarded to the workers).
  std::vector<std::string> option_env_names;
};

// --tp with --worker: 1 + workers when --tp was left at 1; otherwise --tp, which
// must leave at least rank 0 on this machine. kInvalidArgument says why.
Expected<int> world_with_workers(int tp, size_t workers);

// A follower process (rank > 0): joins rank 0's world, loads its shard and
// follows until rank 0 stops. Returns the process exit code (0: stopped by
// rank 0; 1: an error; 3: rank 0 was lost).
int run_tp_follower(const engine::EngineOptions& engine, const TpServeOptions& tp);

// Rank 0's side of the world.
class TpLeader {
 public:
  // Starts the other ranks and joins the world (returns once all joined); sets
  // engine.tp_comm and engine.on_tp_failure. engine.model_dir must be resolved.
  static Expected<std::unique_ptr<TpLeader>> start(engine::EngineOptions& engine, const TpServeOptions& tp);
  ~TpLeader();

  // How to stop the server once it is up (runs at once if the world already broke).
  void set_stop(std::function<void()> stop);
  bool failed() const;
  // Starting failed in a way a lost rank explains (a collective broke): gives the
  // launcher's watcher up to `limit` to see the exit, so that the message names
  // the rank and how it ended (fail() then exits the process) rather than the socket.
  void wait_for_lost_rank(std::chrono::milliseconds limit) const;
  // The server stops on purpose: the followers' exits are expected from now on.
  // Call before the engine is destroyed (its thread sends the stop command).
  void begin_shutdown();
  // Once the engine is gone: waits for the followers (stragglers are killed).
  // Returns the exit code for rank 0: 0, or 1 when a rank was lost.
  int finish();

 private:
  TpLeader() = default;
  // The world broke: log, stop the server (or exit when there is none yet).
  void fail(const std::string& why);
  // Makes an NCCL collective in progress (a dead peer's) fail at once.
  void abort_model_comm(const std::string& why);

  mutable std::mutex mu_;
  bool failed_ = false;
  std::shared_ptr<Communicator> model_comm_;  // NCCL with --device cuda, else null
  std::function<void()> stop_;
  std::unique_ptr<engine::RankLauncher> launcher_;
};

}  // namespace tf::apps
