// StepGraphs: the row-only segments of a decode step, captured once per
// (segment, batch-size bucket) and replayed (Ops::capture / Ops::replay).
//
// A decode step alternates row-only work (mHC, norms, projections, FFN/MoE,
// lm_head: a pure function of its input rows and the weights) with stateful
// per-sequence parts (KDA recurrence, latent cache, indexer, attention) that stay
// eager. Each row-only segment becomes one graph per bucket of rows (1, 2, 4, ...,
// 64): the step's n rows are padded to the bucket. A graph replays on fixed
// addresses, so every entry owns its input and output buffers ([bucket, ...]):
//  - a "stable" input is a tensor that is the same storage every step (the output
//    of the previous segment of the same bucket, a constant): it is used in place;
//  - any other input (an eager part's result, n rows) is copied into the entry's
//    zero-initialised buffer before the replay (padded rows keep old, finite data);
//  - the outputs are the buffers of the entry's first, eager run; the graph copies
//    its results into them, so they stay valid until the segment runs again.
// The first run of an entry is eager (it also gives the output shapes); then the
// body is captured. A body that cannot be captured (a host sync, an upload) stays
// eager on the entry's buffers, with one log line. Disabled, run() is simply the
// body on the given inputs.
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
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<Tensor> in, out;
    std::unique_ptr<Ops::Graph> graph;  // null: the body runs eagerly on in/out
  };
  Entry& create(int key, int64_t bucket, int64_t n, const std::vector<Input>& inputs, const Body& body);
  void fill_inputs(Entry& e, int64_t n, const std::vector<Input>& inputs);

  Ops& ops_;
  bool enabled_;
  bool refuse_ = false;
  std::map<std::pair<int, int64_t>, Entry> entries_;
  Stats stats_;
};

}  // namespace tf
