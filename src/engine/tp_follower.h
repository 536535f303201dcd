// Follower ranks of tensor-parallel serving (issue #7): every rank but 0 loads
// its shard of the model and runs the model steps rank 0 broadcasts
// (step_broadcast.h), so that the collectives inside each step line up with
// rank 0's. A follower schedules nothing, samples nothing and keeps no text
// state: it mirrors rank 0's sequences (id -> Glm5Sequence) and throws the
// logits away. On CUDA ranks the host channel (Gloo) carries the commands and
// the model's collectives run on NCCL (two communicators of the same world).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_options.h"
#include "engine/prompt_store.h"
#include "kernels/api/ops.h"
#include "model/glm5/glm5_model.h"

namespace tf::engine {

// Follows rank 0's commands until the stop command (then Status::ok()). A lost
// rank 0 (dead: its sockets closed; hung: past the communicator's op_timeout)
// is kUnavailable naming it; a command that does not match the sequences this
// rank holds (a protocol bug) is kInternal. A model step that fails on its own
// (e.g. bad input) is logged and the loop goes on, as rank 0 fails that step's
// requests and goes on; a step that fails in a collective ends the loop.
// `store` (PROMPT_STORE, may be null): this rank's own store, written and read as rank 0's
// commands say (StepCommand::stores / restores).
Status run_follower(Glm5Model& model, Communicator& comm, PromptStore* store = nullptr);

// A whole follower process's work: reads options.model_dir's config, receives
// the model setup from rank 0 (Engine::create sends it) over `comm` (the host
// channel), loads this rank's shard on options.device (cuda: GPU
// options.cuda_device, the model's collectives through options.model_comm),
// then run_follower().
Status serve_follower(const EngineOptions& options, Communicator& comm);

// Checks that the model's communicator fits the device and binds it: `model`
// (null: the host channel `host` itself) must span the same ranks; with
// --device cuda it must be NCCL on `ops`' GPU, and its collectives are put on
// the ops' stream (they then follow the kernels that produced their input);
// CPU ranks cannot use NCCL. Returns the communicator the model should use.
Expected<Communicator*> bind_model_comm(Communicator& host, Communicator* model, const std::string& device, Ops& ops);

}  // namespace tf::engine
