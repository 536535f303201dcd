// See structured_constraint.h.
#include "sampling/grammar/structured_constraint.h"

#include <algorithm>
#include <limits>

namespace tf::grammar {

StructuredConstraint::StructuredConstraint(std::shared_ptr<const Grammar> grammar,
                                           std::shared_ptr<const TokenVocabulary> vocab,
                                           std::vector<int32_t> end_ids, uint64_t max_mask_work,
                                           std::shared_ptr<SharedMasks> masks)
    : matcher_(std::move(grammar)),
      vocab_(std::move(vocab)),
      end_ids_(std::move(end_ids)),
      max_mask_work_(max_mask_work),
      masks_(masks ? std::move(masks) : std::make_shared<SharedMasks>()) {}

SharedMasks::Mask StructuredConstraint::allowed_now() {
  if (masks_->refused()) return nullptr;
  std::string key = GrammarMatcher::key(matcher_.state());
  if (SharedMasks::Mask found = masks_->find(key)) return found;
  auto allowed = std::make_shared<std::vector<uint8_t>>();
  if (!fill_token_mask(matcher_, *vocab_, *allowed, max_mask_work_)) {
    masks_->refuse();
    return nullptr;
  }
  masks_->put(key, allowed);
  return allowed;
}

Status StructuredConstraint::mask(std::span<float> logits) {
  // End tokens have no bytes, so the grammar's mask never allows them: keep their
  // logits and put them back once the sentence is complete.
  std::vector<float> ends;
  for (int32_t e : end_ids_)
    ends.push_back(e >= 0 && static_cast<size_t>(e) < logits.size() ? logits[static_cast<size_t>(e)] : 0.0f);
  const SharedMasks::Mask found = allowed_now();
  if (found == nullptr)
    // The client's grammar, not the server's load: a 400, never a retryable 429.
    return invalid_argument(
        "structured output: the grammar is too ambiguous here to compute the next token's mask (" +
        matcher_limits_text() + ", or too much work for one mask)");
  const std::vector<uint8_t>& allowed = *found;
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), allowed.size());
  for (size_t t = 0; t < n; ++t)
    if (!allowed[t]) logits[t] = ninf;
  for (size_t t = n; t < logits.size(); ++t) logits[t] = ninf;
  if (!matcher_.is_complete()) return Status::ok();
  for (size_t i = 0; i < end_ids_.size(); ++i)
    if (end_ids_[i] >= 0 && static_cast<size_t>(end_ids_[i]) < logits.size())
      logits[static_cast<size_t>(end_ids_[i])] = ends[i];
  return Status::ok();
}

Status StructuredConstraint::accept(int32_t token) {
  if (std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end()) {
    if (matcher_.is_complete()) return Status::ok();
    return invalid_argument("structured output: the output ended before the grammar was complete");
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->size())
    return invalid_argument("structured output: token " + std::to_string(token) + " is outside the vocabulary");
  if (!matcher_.accept(vocab_->bytes(token)))
    return invalid_argument("structured output: token " + std::to_string(token) + " is not allowed by the grammar");
  return Status::ok();
}

}  // namespace tf::grammar
