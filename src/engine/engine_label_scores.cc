// Label scoring (GenerationRequest::label_tokens), for /v1/decisions: a request that
// generates nothing runs its prompt like any other (prompt reuse included) and, at the
// prompt's last row, reports the model's raw logprob of each label token. The row is read on
// the host in double precision: log-softmax over the text vocabulary (padding ids masked, as
// sampling masks them), no temperature, penalties or bias.
#include <cmath>
#include <limits>
#include <string>

#include "engine/engine_impl.h"

namespace tf::engine {

Status Engine::Impl::score_labels(LiveChoice& c, StepResult& result) {
  LiveRequest& r = *c.request;
  Tensor row;
  if (!result.logits.is_null()) {
    const Tensor& h = result.logits;
    row = h.slice(0, h.size(0) - 1, h.size(0));
  } else if (!result.device_logits.is_null()) {
    const Tensor& d = result.device_logits;
    row = ops->to_host(d.slice(0, d.size(0) - 1, d.size(0)));
  } else {
    return internal_error("label scoring: the model step returned no logits for the prompt's last row");
  }
  const float* v = row.data<float>();
  const int64_t vocab = std::min<int64_t>(row.shape().back(), text_vocab);
  double peak = -std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < vocab; ++t) {
    const double x = v[t];
    if (std::isnan(x) || x == std::numeric_limits<double>::infinity())
      return internal_error("label scoring: the model's logits at the prompt's end are not finite");
    peak = std::max(peak, x);
  }
  if (!std::isfinite(peak)) return internal_error("label scoring: every logit at the prompt's end is -inf");
  double sum = 0.0;
  for (int64_t t = 0; t < vocab; ++t) sum += std::exp(static_cast<double>(v[t]) - peak);
  const double log_total = peak + std::log(sum);

  GenerationEvent ev;
  ev.choice = c.index;
  ev.label_logprobs.reserve(r.req.label_tokens.size());
  for (int32_t id : r.req.label_tokens)
    ev.label_logprobs.push_back(id < vocab ? static_cast<double>(v[id]) - log_total
                                           : -std::numeric_limits<double>::infinity());
  if (!r.failed) r.sink(std::move(ev));
  return Status::ok();
}

}  // namespace tf::engine
