// Embeddings (GenerationRequest::embed, /v1/embeddings): a request that generates nothing
// runs its prompt like any other (prompt reuse included) and reports the final hidden state
// of its last token: last-token pooling, the vector the lm_head reads. The server normalizes
// it (OpenAI's embeddings have length 1).
#include <cmath>

#include "engine/engine_impl.h"

namespace tf::engine {

Status Engine::Impl::emit_embedding(LiveChoice& c, const StepResult& result) {
  if (result.hidden.is_null() || result.hidden.dim() != 2 || result.hidden.size(0) < 1)
    return internal_error("embedding: the model step returned no hidden state for the prompt's last row");
  const Tensor& h = result.hidden;
  const Tensor last = h.slice(0, h.size(0) - 1, h.size(0));
  GenerationEvent ev;
  ev.choice = c.index;
  ev.embedding = (last.device().is_cpu() ? last : ops->to_host(last)).to_vector();
  for (float x : ev.embedding)
    if (!std::isfinite(x)) return internal_error("embedding: the final hidden state is not finite");
  LiveRequest& r = *c.request;
  if (!r.failed) r.sink(std::move(ev));
  return Status::ok();
}

}  // namespace tf::engine
