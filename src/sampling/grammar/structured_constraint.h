// One choice's structured-output constraint while it decodes: the grammar's matcher,
// the logits mask it implies, and the step over each sampled token.
//
// End tokens (EOS and the like) are allowed exactly when the text so far is a
// complete sentence; other tokens when their bytes keep it a prefix of one. Masks are
// cached by matcher state (inside a JSON string, for instance, the state repeats from
// character to character), so a repeated state costs one lookup; the cache is shared by
// the choices of a request (shared_masks.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "sampling/grammar/shared_masks.h"
#include "sampling/grammar/token_mask.h"

namespace tf::grammar {

class StructuredConstraint {
 public:
  // `masks`: shared with the request's other choices (the same grammar and vocabulary);
  // null: this choice's own.
  StructuredConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab,
                       std::vector<int32_t> end_ids, uint64_t max_mask_work = kMaxMaskWork,
                       std::shared_ptr<SharedMasks> masks = nullptr);

  // Sets logits[t] = -inf for every token t not allowed next (ids past the vocabulary too).
  // kInvalidArgument when the grammar is too ambiguous to mask in time (token_mask.h), here
  // or for another choice of the request.
  Status mask(std::span<float> logits);
  // Computes the mask of the current state ahead of mask(), which then finds it cached:
  // the engine runs this beside the model's step, so the mask is off the critical path.
  void prepare() { (void)allowed_now(); }
  // Steps over a sampled token; an error when the grammar does not allow it.
  Status accept(int32_t token);
  // The output so far is a complete sentence.
  bool complete() const { return matcher_.is_complete(); }
  // Complete, and no character may follow: the answer is over.
  bool finished() const { return matcher_.is_complete() && !matcher_.can_continue(); }

 private:
  SharedMasks::Mask allowed_now();

  GrammarMatcher matcher_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::vector<int32_t> end_ids_;
  uint64_t max_mask_work_;
  std::shared_ptr<SharedMasks> masks_;
};

}  // namespace tf::grammar
