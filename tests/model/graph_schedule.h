// A decode schedule where sequences join and leave between steps (so that a graph
// bucket's rows map to different sequences, states and pages from step to step),
// shared by the CPU (glm5_graphs_test.cc) and CUDA (glm5_graphs_cuda_test.cc) graph
// tests: run it once eagerly and once with graphs, the logits must match bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "glm5_fixture.h"

namespace tf::test {

struct ScheduleStep {
  std::vector<int> join;   // slots that get a new sequence before the step (prefilled alone)
  std::vector<int> batch;  // slots decoding one token this step, in batch order
  std::vector<int> leave;  // slots whose sequence is dropped after the step
};

// Buckets 1, 2, 4 and 8 with padded rows, reordered batches, a slot reused by a new
// sequence (whose pages come back from a dropped one).
inline std::vector<ScheduleStep> join_leave_schedule() {
  return {
      {{0, 1, 2}, {0, 1, 2}, {}},
      {{}, {2, 0, 1}, {}},
      {{3}, {0, 1, 2, 3}, {}},
      {{}, {3, 2, 1, 0}, {1}},
      {{}, {0, 2, 3}, {}},
      {{1, 4}, {4, 1, 0, 2, 3}, {}},
      {{}, {4}, {}},
      {{}, {1, 4, 2}, {4}},
      {{4, 5}, {4, 3, 5}, {0}},
      {{0}, {0, 1, 2, 3, 4, 5}, {}},
      {{}, {5, 4, 3, 2, 1, 0}, {}},
  };
}

// Runs the schedule greedily (each slot's next token is the argmax of its last logits)
// and returns the host logits of every decode row, in step and batch order.
inline std::vector<Tensor> run_join_leave(Glm5Model& model, const Fixture& f, const std::vector<ScheduleStep>& steps) {
  int slots = 0;
  for (const ScheduleStep& s : steps)
    for (const std::vector<int>* v : {&s.join, &s.batch, &s.leave})
      for (int x : *v) slots = std::max(slots, x + 1);
  std::vector<std::unique_ptr<Glm5Sequence>> seqs(static_cast<size_t>(slots));
  std::vector<int32_t> next(static_cast<size_t>(slots), 0);
  std::vector<Tensor> out;
  int joined = 0;
  auto argmax = [](const Tensor& l) {
    const std::vector<float> v = l.to_vector();
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  for (const ScheduleStep& step : steps) {
    for (int s : step.join) {
      seqs[s] = model.new_sequence();
      // A different prompt slice for every new sequence.
      const size_t off = static_cast<size_t>(joined * 3) % 16, len = 4 + static_cast<size_t>(joined) % 6;
      ++joined;
      std::vector<int32_t> prompt(f.prompt_ids.begin() + off, f.prompt_ids.begin() + off + len);
      StepEntry e{seqs[s].get(), prompt, false};
      auto r = model.step({&e, 1});
      EXPECT_TRUE(r.has_value()) << r.status().to_string();
      if (!r.has_value()) return {};
      next[s] = argmax((*r)[0].logits);
    }
    std::vector<StepEntry> batch;
    for (int s : step.batch) {
      EXPECT_TRUE(seqs[s]) << "slot " << s << " decodes without a sequence";
      if (!seqs[s]) return {};
      batch.push_back(StepEntry{seqs[s].get(), std::span<const int32_t>(&next[s], 1), false});
    }
    auto r = model.step(batch);
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return {};
    for (size_t i = 0; i < step.batch.size(); ++i) {
      out.push_back((*r)[i].logits);
      next[step.batch[i]] = argmax((*r)[i].logits);
    }
    for (int s : step.leave) seqs[s].reset();
  }
  return out;
}

}  // namespace tf::test
