// Speculative verify steps against serial decoding, on any backend: the helper the CPU
// test (glm5_speculation_test.cc) and the CUDA test (glm5_speculation_cuda_test.cc) share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/glm5/glm5_model.h"

namespace tf::test {

struct SpeculationCheck {
  int64_t rows_compared = 0;
  int64_t rows_differing = 0;  // rows whose logits are not bit-equal to serial decoding's
  double max_abs_diff = 0.0;   // over all compared logits
  int64_t verify_steps = 0, partial_commits = 0;
  std::string error;           // a step or commit that failed
};

// Feeds ids[prefill..] to a sequence prefilled with ids[0, prefill): once one token per
// step (serial decoding, each step's logits kept), once as speculative spans whose
// lengths and kept rows cycle through `spans` and `keeps` (a keep of 0 keeps the whole
// span), committing each before the next. Every verified row's logits are compared with
// serial decoding's at the same position; rows past a commit are re-run, so a
// rollback that leaves any trace in the states shows up as differing rows later.
// `busy` adds a second sequence decoding beside every step (a batch-mate).
SpeculationCheck check_speculation(Glm5Model& model, const std::vector<int32_t>& ids, int64_t prefill,
                                   const std::vector<int>& spans, const std::vector<int>& keeps, bool busy);

}  // namespace tf::test
