// Step commands: what rank 0 tells the follower ranks of a tensor-parallel
// world before every model step (issue #7).
//
// Only rank 0 schedules and samples; the followers hold their shard of the model
// and must run exactly the same model steps, in the same order, so that the
// step's all-reduces and all-gathers line up. Before each step rank 0
// broadcasts a StepCommand: the sequences created, forked and dropped since the last
// command (ids are the engine's RequestIds, never reused), the rows kept of their
// speculative steps, and the batch (each entry: a sequence id and its token ids). A command without a batch is a
// heartbeat: rank 0 sends one every second while idle, so that the followers'
// collective never waits longer than the communicator's op_timeout, and so
// that rank 0 notices a dead follower even with no traffic. kStop ends the
// followers' loop when the engine stops.
//
// The model setup (pool page size and count, latent and weight dtypes) travels once, before
// the models load, as a message of its own kind: the followers' pools must be as
// large as rank 0's, whatever free memory each process saw.
//
// Wire: every message is two broadcasts from rank 0: a fixed header i64[4] =
// {kWireMagic, kind, payload bytes, 0}, then the payload as a u8 tensor (skipped
// when empty). The payload is little-endian fixed-width fields written by
// encode_step_command(); decode_step_command() checks every count against the
// bytes left, so a corrupt payload is an error, never an overread. All ranks of
// one world run the same binary on one host or hosts of one byte order.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tf::engine {

enum class StepCommandKind : uint8_t {
  kStep = 1,  // creates, forks, drops, then one model step over `entries` (none: a heartbeat)
  kStop = 2,  // the engine stopped: followers return
};
const char* step_command_kind_name(StepCommandKind kind);

struct StepCommandEntry {
  uint64_t sequence = 0;
  std::vector<int32_t> tokens;
  bool all_logits = false;
  bool speculative = false;  // StepEntry::speculative: a verify step (committed by a later command)
  bool mtp = false;          // StepEntry::mtp
  int32_t mtp_drafts = 0;    // StepEntry::mtp_drafts (each rank drafts the same tokens itself)
  // Image/video features at placeholder rows (StepEntry::embed_runs): runs of
  // {row in the span, rows, first row of embeds}, and embeds [rows, embed_width] f32.
  std::vector<std::array<int64_t, 3>> embed_runs;
  int64_t embed_width = 0;
  std::vector<float> embeds;

  bool operator==(const StepCommandEntry&) const = default;
};

// PROMPT_STORE under tensor parallelism: a sequence (or a new kept prompt's id) with the
// prompt tokens whose state it holds.
struct StoredPrompt {
  uint64_t sequence = 0;
  std::vector<int32_t> tokens;

  bool operator==(const StoredPrompt&) const = default;
};

struct StepCommand {
  StepCommandKind kind = StepCommandKind::kStep;
  std::vector<uint64_t> create;  // new sequences, before the step
  // Sequences made as Glm5Model::fork of another (prompt reuse), after the creates and in
  // this order: {new id, source id}. A fork may take a fork of the same command as source.
  std::vector<std::array<uint64_t, 2>> forks;
  // Speculative decoding: {sequence id, rows kept} of the last verify step of each, applied
  // first (Glm5Model::commit_speculation, the rows rank 0 kept after sampling).
  std::vector<std::array<uint64_t, 2>> commits;
  std::vector<uint64_t> drop;    // finished sequences (after the forks), before the step
  // PROMPT_STORE: sequences whose state each rank writes to its own store, as they are when
  // the command arrives (first of all); and kept prompts each rank reads back from its own
  // store as new sequences (after the drops), after which every rank calls
  // all_ranks_agree: a prompt is kept only when every rank read its state.
  std::vector<StoredPrompt> stores;
  std::vector<StoredPrompt> restores;
  // Stored states (by their tokens; `sequence` unused) each rank starts reading ahead from
  // its own store, for restores to come (PromptStore::prefetch).
  std::vector<StoredPrompt> prefetches;
  std::vector<StepCommandEntry> entries;

  bool is_heartbeat() const { return kind == StepCommandKind::kStep && entries.empty(); }
  bool operator==(const StepCommand&) const = default;
};

// Whether every rank of `comm` says `mine` is true (one all-reduce; every rank must call it).
Expected<bool> all_ranks_agree(Communicator& comm, bool mine);

// The payload of one command (the header is added by send_step_command).
std::vector<uint8_t> encode_step_command(const StepCommand& command);
// kInvalidArgument naming the field at fault for anything truncated, oversized or trailing.
Expected<StepCommand> decode_step_command(std::span<const uint8_t> payload);

// The model setup rank 0 decided (its memory plan, how it holds the matrices),
// for the followers' model load.
struct TpModelSetup {
  int64_t page_size = 0;
  int64_t num_pages = 0;
  DType latent_dtype = DType::kBF16;
  DType weight_dtype = DType::kF32;  // the projection matrices: f32, or bf16 on the GPU
  // DENSE=q4 / fp8: the large dense matrices re-quantized at load (Glm5Options::dense_quant),
  // as a MatrixFormat value (0 = dense).
  uint8_t dense_quant = 0;
  uint8_t head_quant = 0;  // LM_HEAD=q4 / fp8 (Glm5Options::head_quant), likewise
  uint8_t draft_head_quant = 0;  // the MTP drafts' head (Glm5Options::draft_head_quant), likewise

  bool operator==(const TpModelSetup&) const = default;
};

// Collective over the world: rank 0 sends, every other rank receives.
Status send_step_command(Communicator& comm, const StepCommand& command);
Expected<StepCommand> receive_step_command(Communicator& comm);
Status send_model_setup(Communicator& comm, const TpModelSetup& setup);
Expected<TpModelSetup> receive_model_setup(Communicator& comm);

// Rank 0's bookkeeping: the creates and drops since the last command ride on
// the next one (step or heartbeat). Used by the engine thread only.
class StepBroadcaster {
 public:
  explicit StepBroadcaster(Communicator& comm) : comm_(comm) {}

  void sequence_created(uint64_t id) { pending_.create.push_back(id); }
  void sequence_forked(uint64_t id, uint64_t from) { pending_.forks.push_back({id, from}); }
  void sequence_dropped(uint64_t id) { pending_.drop.push_back(id); }
  void sequence_stored(uint64_t id, std::vector<int32_t> tokens) {
    pending_.stores.push_back({id, std::move(tokens)});
  }
  void prefetch_stored(std::vector<int32_t> tokens) { pending_.prefetches.push_back({0, std::move(tokens)}); }
  // Sends the pending creates/forks/drops with `restores` at once (a command without a
  // batch); the caller then calls all_ranks_agree as every follower does.
  Status send_restores(std::vector<StoredPrompt> restores) {
    pending_.restores = std::move(restores);
    return send_step({});
  }
  void sequence_committed(uint64_t id, int64_t rows) {
    pending_.commits.push_back({id, static_cast<uint64_t>(rows)});
  }
  // Sends the pending creates/drops with this batch; the batch must be what
  // rank 0 is about to pass to model->step.
  Status send_step(std::vector<StepCommandEntry> entries);
  Status send_heartbeat() { return send_step({}); }
  // Sends kStop once; later calls do nothing. A failure is returned (the
  // followers then see the closed sockets instead).
  Status send_stop();
  bool stopped() const { return stopped_; }

 private:
  Communicator& comm_;
  StepCommand pending_;
  bool stopped_ = false;
};

}  // namespace tf::engine
