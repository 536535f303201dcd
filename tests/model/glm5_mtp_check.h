// MTP drafts made inside model steps (StepEntry::mtp / mtp_drafts) against a reference
// built after the fact, on any backend: the helper the CPU test (glm5_mtp_test.cc) and the
// CUDA test (glm5_speculation_cuda_test.cc) share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/glm5/glm5_model.h"

namespace tf::test {

struct MtpCheck {
  int64_t verify_steps = 0, drafts = 0, partial_commits = 0;
  int64_t rows_compared = 0, rows_differing = 0;  // verified rows vs serial decoding (bit for bit)
  int64_t drafts_differing = 0;  // drafts the reference's logits do not rank first (within tolerance)
  double max_abs_diff = 0.0;     // verified rows vs serial decoding
  std::string error;
};

// Two sequences decode side by side with the MTP layer kept (prompts ids[0, prefill) and
// ids[1, prefill + 1), prefilled in two chunks). Each step gives each sequence a token from
// `ids` and asks for k = ks[...] MTP drafts (cycling, the two sequences offset), keeps
// keeps[...] rows of the verify span (0: all; the kept drafts become the sequences' tokens),
// for `steps` steps. Then, for the committed token streams, serial decoding gives every
// position's logits (the verified rows must equal them bit for bit) and final hidden state,
// and a fresh sequence's mtp_step over the pairs before each step, chained as the model
// chains, gives the drafts the step should have made: each draft must be the reference's
// greedy token, or within `tolerance` (relative to the row's largest magnitude) of it.
// One line: the steps, drafts and commits checked, the drafts and rows that differ.
std::string describe(const MtpCheck& c);

MtpCheck check_mtp_drafts(Glm5Model& model, const std::vector<int32_t>& ids, int64_t prefill, int64_t steps,
                          const std::vector<int>& ks, const std::vector<int>& keeps, double tolerance);

}  // namespace tf::test
