// StepGraphs: the segments of a decode step, captured once per (segment, batch-size
// bucket) and replayed (Ops::capture / Ops::replay).
//
// A decode step (every entry one token, at most kMaxBucket rows) runs padded to a
// bucket of rows (1, 2, 4, ..., 64) as one segment per layer plus a first and a final
// one (Glm5Model::step). A layer's segment holds the whole layer, its stateful
// attention core included: the KDA conv/recurrence and the MLA/indexer decode rows
// read every per-row quantity (positions, page tables, state addresses) from one
// metadata buffer that the host fills with one upload before the replays, so the
// step's host work is "upload, then replay". Padded rows are harmless: their KDA state
// address is 0 (the kernels write zeros and touch no state) and their MLA rows write
// and read position 0 of the latent pool's scratch page with a scratch indexer state.
// When an address a graph holds moves (the metadata buffer grows, the indexer's score
// width doubles) the model drops every entry (clear()) and the segments capture again.
//
// A segment whose capture fails (a host sync: the routed experts grouped on the host
// above EXACT_ROWS, the kTorchCpu indexer top-k) stays eager on its buffers (one log
// line); a MoE layer that failed whole then runs as two segments around its routed
// experts (which run eagerly). Prefill and mixed steps (any entry with more than one
// token) run everything eagerly: the decode rows of a mixed step go through the same
// *_rows ops as a graph step's, but chunked prefill is not captured (its launches
// depend on the lengths). With graphs off (GRAPHS=0) run() is simply the body.
//
// Tensor parallelism: a segment's collectives (the all-reduces after the attention
// and FFN outputs, the logits all-gather) are captured with it (NCCL calls enqueue
// on the capturing stream, comm/nccl_communicator.h). Every rank runs the same steps
// on the same rows, so every rank creates, captures and replays the same entries in
// the same order, which NCCL requires of captured collectives. The model watches a
// graph step's replays as a whole (Communicator::flush, bounded by the op timeout)
// in place of the per-call watch of eager collectives.
//
// A graph replays on fixed addresses, so every entry owns its input and output buffers
// ([bucket, ...]):
//  - a "stable" input is a tensor that is the same storage every step (the output
//    of the previous segment of the same bucket, a constant): it is used in place;
//  - any other input (an eager part's result, n rows) is copied into the entry's
//    zero-initialised buffer before the replay (padded rows keep old, finite data);
//  - the outputs are the buffers of the entry's first, eager run; the graph copies
//    its results into them, so they stay valid until the segment runs again.
// The first run of an entry is eager (it also gives the output shapes and advances the
// sequences' states once); then the body is captured (recorded, not run). Disabled,
// run() is simply the body on the given inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/api/ops.h"

namespace tf {

class StepGraphs {
 public:
  static constexpr int64_t kMaxBucket = 64;
  // Outputs from inputs; must depend only on the input tensors (not on step state).
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  struct Input {
    Tensor t;
    bool stable = false;
  };
  struct Stats {
    int64_t captured = 0, eager_fallbacks = 0, replays = 0;
  };

  StepGraphs(Ops& ops, bool enabled) : ops_(ops), enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  // The bucket for n rows (the next power of two), or 0 when n is over kMaxBucket.
  static int64_t bucket_for(int64_t n);

  // Runs segment `key` for n rows padded to `bucket`: inputs with n rows (stable
  // ones with `bucket` rows), outputs with `bucket` rows. bucket 0: eager, unpadded.
  std::vector<Tensor> run(int key, int64_t bucket, int64_t n, const std::vector<Input>& inputs, const Body& body);

  // Whether segment `key` at `bucket` exists and runs eagerly (its capture failed).
  bool fell_back(int key, int64_t bucket) const;
  // Tests: make every later capture "fail" (the CPU backend's captures never do).
  void refuse_captures(bool refuse) { refuse_ = refuse; }
  const Stats& stats() const { return stats_; }
  // Drops every entry (graphs and buffers): the next run of each segment captures
  // again. For when an address a graph baked in moves (the step's metadata buffer).
  void clear() { entries_.clear(); }
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<Tensor> in, out;
    std::unique_ptr<Ops::Graph> graph;  // null: the body runs eagerly on in/out
  };
  Entry& create(int key, int64_t bucket, int64_t n, const std::vector<Input>& inputs, const Body& body);
  void fill_inputs(Entry& e, int64_t n, const std::vector<Input>& inputs);
  static void copy_outputs(Ops& ops, std::vector<Tensor>& out, const std::vector<Tensor>& res);

  Ops& ops_;
  bool enabled_;
  bool refuse_ = false;
  std::map<std::pair<int, int64_t>, Entry> entries_;
  Stats stats_;
};

}  // namespace tf
