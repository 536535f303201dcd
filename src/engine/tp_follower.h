// Follower ranks of tensor-parallel serving (issue #7): every rank but 0 loads
// its shard of the model and runs the model steps rank 0 broadcasts
// (step_broadcast.h), so that the collectives inside each step line up with
// rank 0's. A follower schedules nothing, samples nothing and keeps no text
// state: it mirrors rank 0's sequences (id -> Glm5Sequence) and throws the
// logits away.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_options.h"
#include "model/glm5/glm5_model.h"

namespace tf::engine {

// Follows rank 0's commands until the stop command (then Status::ok()). A lost
// rank 0 (dead: its sockets closed; hung: past the communicator's op_timeout)
// is kUnavailable naming it; a command that does not match the sequences this
// rank holds (a protocol bug) is kInternal. A model step that fails on its own
// (e.g. bad input) is logged and the loop goes on, as rank 0 fails that step's
// requests and goes on; a step that fails in a collective ends the loop.
Status run_follower(Glm5Model& model, Communicator& comm);

// A whole follower process's work: reads options.model_dir's config, receives
// the model setup from rank 0 (Engine::create sends it), loads this rank's
// shard on the CPU backend, then run_follower().
Status serve_follower(const EngineOptions& options, Communicator& comm);

}  // namespace tf::engine
