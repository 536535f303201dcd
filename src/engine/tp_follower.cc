// Follower ranks (see tp_follower.h).
#include "engine/tp_follower.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/step_broadcast.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace tf::engine {
namespace {

std::string rank_name(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.world_size());
}

}  // namespace

Status run_follower(Glm5Model& model, Communicator& comm) {
  if (comm.rank() == 0) return internal_error("run_follower: rank 0 leads, it does not follow");
  std::map<uint64_t, std::unique_ptr<Glm5Sequence>> sequences;
  int64_t steps = 0;
  for (;;) {
    auto command = receive_step_command(comm);
    if (!command) {
      const Status& s = command.status();
      if (s.code() == StatusCode::kUnavailable) {
        return unavailable(
            rank_name(comm) +
            ": lost rank 0 (it exited, or hung) while waiting for its next step: " + s.message());
      }
      return s.with_context(rank_name(comm) + ": receiving rank 0's next step");
    }
    if (command->kind == StepCommandKind::kStop) {
      TF_LOG_INFO("{}: rank 0 stopped after {} steps; {} sequences were open", rank_name(comm), steps,
                  sequences.size());
      return Status::ok();
    }
    for (uint64_t id : command->create) {
      if (sequences.count(id)) {
        return internal_error(rank_name(comm) + ": rank 0 created sequence " + std::to_string(id) + " twice");
      }
      sequences.emplace(id, model.new_sequence());
    }
    for (uint64_t id : command->drop) {
      if (sequences.erase(id) == 0) {
        return internal_error(rank_name(comm) + ": rank 0 dropped sequence " + std::to_string(id) +
                              ", which this rank does not hold");
      }
    }
    if (command->entries.empty()) continue;  // a heartbeat

    std::vector<StepEntry> batch;
    batch.reserve(command->entries.size());
    for (const StepCommandEntry& e : command->entries) {
      auto it = sequences.find(e.sequence);
      if (it == sequences.end()) {
        return internal_error(rank_name(comm) + ": rank 0 stepped sequence " + std::to_string(e.sequence) +
                              ", which this rank does not hold");
      }
      StepEntry entry;
      entry.sequence = it->second.get();
      entry.tokens = e.tokens;
      entry.all_logits = e.all_logits;
      batch.push_back(entry);
    }
    ++steps;
    auto results = model.step(batch);
    if (!results) {
      // Rank 0 ran the same step on the same state: it saw the same failure,
      // fails those requests and drops their sequences with the next command.
      if (results.status().code() == StatusCode::kUnavailable) {
        return results.status().with_context(rank_name(comm) + ": model step " + std::to_string(steps));
      }
      TF_LOG_WARN("{}: model step {} failed (rank 0 fails its requests): {}", rank_name(comm), steps,
                  results.status().to_string());
    }
  }
}

Status serve_follower(const EngineOptions& options, Communicator& comm) {
  if (Status s = options.validate(); !s.is_ok()) return s;
  if (options.device != "cpu") {
    return unimplemented("--device " + options.device +
                         ": follower ranks run on the CPU backend only (so far)");
  }
  auto config = load_glm5_config(options.model_dir);
  if (!config) return config.status();
  auto weights = open_weight_source(options.model_dir, *config);
  if (!weights) return weights.status();
  auto ops = make_cpu_ops();
  // Rank 0 sends the setup once it planned its memory; its pool decides ours.
  auto setup = receive_model_setup(comm);
  if (!setup) return setup.status().with_context(rank_name(comm) + ": receiving the model setup from rank 0");
  Glm5Options mo;
  mo.latent_dtype = setup->latent_dtype;
  mo.page_size = setup->page_size;
  mo.num_pages = setup->num_pages;
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Glm5Model::load(*config, **weights, *ops, comm, mo);
  if (!model) return model.status().with_context(rank_name(comm));
  TF_LOG_INFO("{}: loaded its shard in {:.1f} s ({} pages of {} tokens); following rank 0", rank_name(comm),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), mo.num_pages,
              mo.page_size);
  return run_follower(**model, comm);
}

}  // namespace tf::engine
