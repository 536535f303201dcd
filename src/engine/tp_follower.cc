// Follower ranks (see tp_follower.h).
#include "engine/tp_follower.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/checkpoint_pages.h"
#include "engine/step_broadcast.h"
#include "kernels/cpu/cpu_ops.h"
#if TF_HAVE_CUDA
#include "comm/nccl_communicator.h"
#include "kernels/cuda/cuda_ops.h"
#endif
#include "model/config.h"
#include "model/glm5/glm5_upload.h"
#include "model/weight_source.h"

namespace tf::engine {
namespace {

std::string rank_name(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.world_size());
}

// This rank's part of a stored state rank 0 resumes from, or null.
std::unique_ptr<Glm5Sequence> restore_part(Glm5Model& model, PromptStore* store,
                                           const std::vector<int32_t>& tokens, const std::string& rank) {
  const std::optional<uint64_t> id = store ? store->find(tokens) : std::nullopt;
  if (!id) {
    TF_LOG_WARN("{}: rank 0 resumes from a stored state this rank does not hold", rank);
    return nullptr;
  }
  Expected<StoredState> state = store->read(*id, tokens);
  if (!state) {
    TF_LOG_WARN("{}: reading a stored state failed: {}", rank, state.status().to_string());
    return nullptr;
  }
  auto seq = model.restore(state->length, state->mtp_length, state->tensors);
  if (!seq) {
    TF_LOG_WARN("{}: restoring a stored state failed: {}", rank, seq.status().to_string());
    return nullptr;
  }
  store->note_restored();
  return std::move(*seq);
}

}  // namespace

Status run_follower(Glm5Model& model, Communicator& comm, PromptStore* store) {
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
    for (const StoredPrompt& s : command->stores) {
      auto it = sequences.find(s.sequence);
      if (it == sequences.end()) {
        return internal_error(rank_name(comm) + ": rank 0 stored sequence " + std::to_string(s.sequence) +
                              ", which this rank does not hold");
      }
      // This rank's part of the state rank 0 writes (its queue may be full, or the state too
      // large, as rank 0's may not: a part missing later only costs that resume).
      if (store) store_sequence_state(model, *store, *it->second, s.tokens, rank_name(comm) + ": ");
    }
    // Rank 0 reads a stored state ahead for a waiting request: this rank reads its part.
    for (const StoredPrompt& p : command->prefetches)
      if (const std::optional<uint64_t> id = store ? store->find(p.tokens) : std::nullopt)
        (void)store->prefetch(*id, p.tokens, nullptr);
    for (const auto& [id, rows] : command->commits) {
      auto it = sequences.find(id);
      if (it == sequences.end()) {
        return internal_error(rank_name(comm) + ": rank 0 committed sequence " + std::to_string(id) +
                              ", which this rank does not hold");
      }
      // Rank 0 committed the same verify step on the same state: a failure is its too.
      if (Status s = model.commit_speculation(*it->second, static_cast<int64_t>(rows)); !s.is_ok())
        TF_LOG_WARN("{}: commit of sequence {} failed (rank 0 fails its request): {}", rank_name(comm), id,
                    s.to_string());
    }
    for (uint64_t id : command->create) {
      if (sequences.count(id)) {
        return internal_error(rank_name(comm) + ": rank 0 created sequence " + std::to_string(id) + " twice");
      }
      sequences.emplace(id, model.new_sequence());
    }
    for (const auto& [id, from] : command->forks) {
      auto src = sequences.find(from);
      if (sequences.count(id) || src == sequences.end()) {
        return internal_error(rank_name(comm) + ": rank 0 forked sequence " + std::to_string(id) + " from " +
                              std::to_string(from) + ", which this rank " +
                              (src == sequences.end() ? "does not hold" : "holds already"));
      }
      auto forked = model.fork(*src->second);
      if (!forked) return forked.status().with_context(rank_name(comm) + ": forking sequence " + std::to_string(from));
      sequences.emplace(id, std::move(*forked));
    }
    for (uint64_t id : command->drop) {
      if (sequences.erase(id) == 0) {
        return internal_error(rank_name(comm) + ": rank 0 dropped sequence " + std::to_string(id) +
                              ", which this rank does not hold");
      }
    }
    if (!command->restores.empty()) {
      bool all = true;
      std::vector<std::pair<uint64_t, std::unique_ptr<Glm5Sequence>>> parts;
      for (const StoredPrompt& r : command->restores) {
        if (sequences.count(r.sequence)) {
          return internal_error(rank_name(comm) + ": rank 0 restored sequence " + std::to_string(r.sequence) +
                                ", which this rank holds already");
        }
        parts.emplace_back(r.sequence, restore_part(model, store, r.tokens, rank_name(comm)));
        all = all && parts.back().second != nullptr;
      }
      // Rank 0 keeps them only if every rank read its part (then all do; else none).
      Expected<bool> agreed = all_ranks_agree(comm, all);
      if (!agreed)
        return agreed.status().with_context(rank_name(comm) + ": agreeing on restored prompt states");
      if (*agreed)
        for (auto& [id, seq] : parts) sequences.emplace(id, std::move(seq));
    }
    if (command->entries.empty()) continue;  // a heartbeat

    std::vector<StepEntry> batch;
    batch.reserve(command->entries.size());
    // Image/video features of the entries that carry them (kept alive for the step).
    std::vector<std::vector<StepEntry::EmbedRun>> runs(command->entries.size());
    std::vector<Tensor> embeds(command->entries.size());
    for (StepCommandEntry& e : command->entries) {
      auto it = sequences.find(e.sequence);
      if (it == sequences.end()) {
        return internal_error(rank_name(comm) + ": rank 0 stepped sequence " + std::to_string(e.sequence) +
                              ", which this rank does not hold");
      }
      StepEntry entry;
      entry.sequence = it->second.get();
      entry.tokens = e.tokens;
      entry.all_logits = e.all_logits;
      entry.speculative = e.speculative;
      entry.mtp = e.mtp;
      entry.mtp_drafts = e.mtp_drafts;
      // A follower throws the logits away: no download ([rows, vocab] f32 per step, which
      // grows with the rows and delayed this rank's next step, so rank 0's collectives).
      entry.host_logits = false;
      if (!e.embed_runs.empty()) {
        const size_t k = batch.size();
        for (const auto& r : e.embed_runs) runs[k].push_back({r[0], r[1], r[2]});
        embeds[k] = Tensor::view_of(e.embeds.data(),
                                    {static_cast<int64_t>(e.embeds.size()) / e.embed_width, e.embed_width},
                                    DType::kF32);
        entry.embed_runs = runs[k];
        entry.embeds = &embeds[k];
      }
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

Expected<Communicator*> bind_model_comm(Communicator& host, Communicator* model, const std::string& device, Ops& ops) {
  Communicator& m = model != nullptr ? *model : host;
  const std::string backend = m.backend_name();
  if (m.world_size() != host.world_size() || m.rank() != host.rank()) {
    return internal_error("tensor parallelism: the model's communicator is rank " + std::to_string(m.rank()) + " of " +
                          std::to_string(m.world_size()) + ", the host channel rank " + std::to_string(host.rank()) +
                          " of " + std::to_string(host.world_size()));
  }
  if (device == "cuda") {
    if (backend != "nccl") {
      return unimplemented("--tp " + std::to_string(m.world_size()) +
                           " with --device cuda: the model's collectives need the NCCL communicator, not " + backend +
                           (model == nullptr ? " (no model communicator was given)" : ""));
    }
#if TF_HAVE_CUDA
    auto* nccl = dynamic_cast<NcclCommunicator*>(&m);
    if (nccl == nullptr) return internal_error("tensor parallelism: an 'nccl' communicator of another type");
    const Device d = ops_device(ops);
    if (d.kind != DeviceKind::kCuda || d.index != nccl->cuda_device()) {
      return invalid_argument("tensor parallelism: rank " + std::to_string(m.rank()) + " computes on " +
                              d.to_string() + " but its NCCL communicator is on cuda:" +
                              std::to_string(nccl->cuda_device()));
    }
    nccl->set_stream(cuda_ops_stream(ops));
#else
    (void)ops;
    return unimplemented("--device cuda: this tensorfold was built without CUDA (configure with -DTF_CUDA=ON)");
#endif
  } else if (backend == "nccl") {
    return invalid_argument("--tp " + std::to_string(m.world_size()) + " with --device " + device +
                            ": the NCCL communicator needs CUDA tensors (use --device cuda, or Gloo for CPU ranks)");
  }
  return &m;
}

Status serve_follower(const EngineOptions& options, Communicator& comm) {
  if (Status s = options.validate(); !s.is_ok()) return s;
  auto config = load_glm5_config(options.model_dir);
  if (!config) return config.status();
  auto weights = open_weight_source(options.model_dir, *config);
  if (!weights) return weights.status();
  std::unique_ptr<Ops> ops;
  if (options.device == "cuda") {
#if TF_HAVE_CUDA
    auto cuda_ops = make_cuda_ops(options.cuda_device, options.exact_rows);
    if (!cuda_ops) {
      return cuda_ops.status().with_context(rank_name(comm) + ": --device cuda (GPU " +
                                            std::to_string(options.cuda_device) + ")");
    }
    ops = std::move(*cuda_ops);
#else
    return unimplemented("--device cuda: this tensorfold was built without CUDA (configure with -DTF_CUDA=ON)");
#endif
  } else {
    ops = make_cpu_ops();
  }
  decide_checkpoint_pages(options.device, options.cuda_device);
  TF_ASSIGN_OR_RETURN(Communicator * model_comm,
                      bind_model_comm(comm, options.model_comm.get(), options.device, *ops));
  // Rank 0 sends the setup once it planned its memory; its pool decides ours.
  auto setup = receive_model_setup(comm);
  if (!setup) return setup.status().with_context(rank_name(comm) + ": receiving the model setup from rank 0");
  Glm5Options mo;
  mo.latent_dtype = setup->latent_dtype;
  mo.weight_dtype = setup->weight_dtype;
  mo.dense_quant = static_cast<MatrixFormat>(setup->dense_quant);
  mo.head_quant = static_cast<MatrixFormat>(setup->head_quant);
  mo.draft_head_quant = static_cast<MatrixFormat>(setup->draft_head_quant);
  mo.page_size = setup->page_size;
  mo.num_pages = setup->num_pages;
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Glm5Model::load(*config, **weights, *ops, *model_comm, mo);
  if (!model) return model.status().with_context(rank_name(comm));
  TF_LOG_INFO("{}: loaded its shard on {} in {:.1f} s ({} pages of {} tokens, model collectives over {}); "
              "following rank 0",
              rank_name(comm), ops_device(*ops).to_string(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), mo.num_pages,
              mo.page_size, model_comm->backend_name());
  // PROMPT_STORE: this rank's own store (its folder named by its rank among the rest).
  std::unique_ptr<PromptStore> store;
  if (!options.prompt_store.empty() && options.kept_prompts > 0) {
    const int64_t grain = prompt_reuse_grain(options, mo.page_size, config->text.index_kpool);
    TF_ASSIGN_OR_RETURN(store,
                        open_prompt_store(options, mo.page_size, grain, comm.rank(), comm.world_size()));
    TF_LOG_INFO("{}: prompt store {} ({} states)", rank_name(comm), store->folder(), store->stats().files);
  }
  Status s = run_follower(**model, comm, store.get());
  const CommStats st = model_comm->stats();
  if (st.all_reduce_calls > 0) {
    TF_LOG_INFO("{}: {} all-reduces ({:.1f} MB) took {:.3f} s in all", rank_name(comm), st.all_reduce_calls,
                st.all_reduce_bytes / 1e6, st.all_reduce_seconds);
  }
  if (st.all_reduce_captured + st.all_gather_captured > 0) {
    // Captured into the decode-step graphs: they ran at every replay, untimed.
    TF_LOG_INFO("{}: {} all-reduces and {} all-gathers captured into decode-step graphs", rank_name(comm),
                st.all_reduce_captured, st.all_gather_captured);
  }
  return s;
}

}  // namespace tf::engine
