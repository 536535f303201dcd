// Prompt logprobs (GenerationRequest::prompt_logprobs): what the model gives each prompt
// token after the tokens before it, for completions' echo with logprobs (scoring a text, as
// lm-evaluation-harness does).
//
// Such a request's prefill chunks score their rows on the device as the model step makes
// their logits (StepEntry::scored_tokens, through Ops::sample_rows; a block of rows at a
// time: Glm5Options::logits_block_rows): only the scores come to the host, and its chunks
// are as long as any other prompt's. Row j scores prompt token j + 1 under
// the model's raw distribution, with the sampler's raw-logprob math (padding ids masked,
// nothing else), so a prompt that repeats a reply scores its tokens as the reply reported
// them. The prompt's last row predicts the first generated token: sampling's.
// Such a request neither resumes from nor keeps a kept prompt (engine_prompt_reuse.cc).
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/engine_impl.h"
#include "sampling/logprobs.h"
#include "text/code_points.h"
#include "text/detokenizer.h"

namespace tf::engine {
namespace {

std::string token_text(const text::Tokenizer& tok, int32_t token) {
  const int32_t ids[1] = {token};
  return tok.decode(ids, /*skip_special_tokens=*/false);
}

std::vector<uint8_t> token_bytes(const text::Tokenizer& tok, int32_t token) {
  const std::string b = tok.token_bytes(token);
  return {b.begin(), b.end()};
}

// An entry: the token's logprob and the top alternatives, with the token itself among them
// (as vLLM lists it) when it is not one of the top.
TokenLogprob prompt_entry(const text::Tokenizer& tok, const tf::TokenLogprob& chosen,
                          const std::vector<tf::TokenLogprob>& top, int32_t rank) {
  TokenLogprob lp;
  lp.token = token_text(tok, chosen.token);
  lp.token_id = chosen.token;
  lp.logprob = chosen.logprob;
  lp.bytes = token_bytes(tok, chosen.token);
  lp.rank = rank;
  std::vector<tf::TokenLogprob> listed = top;
  if (!listed.empty() && std::none_of(listed.begin(), listed.end(), [&](const auto& t) { return t.token == chosen.token; }))
    listed.push_back(chosen);
  for (const tf::TokenLogprob& t : listed)
    lp.top.push_back({token_text(tok, t.token), t.logprob, token_bytes(tok, t.token), t.token});
  return lp;
}

}  // namespace

void Engine::Impl::set_prompt_scoring(StepEntry& e, const LiveChoice& c, int64_t rows) const {
  const std::vector<int32_t>& prompt = c.request->req.prompt_tokens;
  // Row j predicts prompt token c.prefilled + j + 1; the prompt's last row predicts none.
  const int64_t scored = std::clamp<int64_t>(static_cast<int64_t>(prompt.size()) - 1 - c.prefilled, 0, rows);
  e.all_logits = true;
  e.scored_tokens = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(c.prefilled + 1),
                                                             static_cast<size_t>(scored));
  e.score_params.logprob = true;
  e.score_params.rank = true;  // one comparison per logit in the pass the logprob makes anyway
  e.score_params.top_logprobs = std::clamp(c.request->req.prompt_logprobs, 0, kSampleRowsMaxTopLogprobs);
  e.score_params.vocab_limit = static_cast<int32_t>(text_vocab);  // padding ids are no tokens
}

void Engine::Impl::score_prompt_rows(LiveChoice& c, const StepResult& result, int64_t rows) {
  LiveRequest& r = *c.request;
  const std::vector<int32_t>& prompt = r.req.prompt_tokens;
  const auto length = static_cast<int64_t>(prompt.size());
  const int64_t from = c.prefilled;
  if (static_cast<int64_t>(result.scores.size()) != std::clamp<int64_t>(length - 1 - from, 0, rows))
    throw std::runtime_error("prompt logprobs: the model step scored " +
                             std::to_string(result.scores.size()) + " of the chunk's rows");
  if (from == 0) {
    TokenLogprob first;  // nothing before it: no logprob
    first.token = token_text(*tokenizer, prompt[0]);
    first.token_id = prompt[0];
    first.bytes = token_bytes(*tokenizer, prompt[0]);
    c.prompt_logprobs.push_back(std::move(first));
  }
  for (size_t j = 0; j < result.scores.size(); ++j) {
    const SampleRowResult& s = result.scores[j];
    // A row with NaN or +inf logits scores nothing (null in the reply).
    tf::TokenLogprob chosen{prompt[static_cast<size_t>(from) + j + 1],
                            std::numeric_limits<float>::quiet_NaN()};
    std::vector<tf::TokenLogprob> top;
    int32_t rank = 0;
    if (s.status == SampleRowStatus::kOk) {
      chosen.logprob = s.logprob;
      rank = s.rank;
      for (int32_t k = 0; k < s.top_count; ++k) top.push_back({s.top_tokens[k], s.top_values[k]});
    }
    c.prompt_logprobs.push_back(prompt_entry(*tokenizer, chosen, top, rank));
  }
  if (from + rows < length) return;

  // The whole prompt is scored: its text offsets, then one event before any token's.
  text::IncrementalDetokenizer detok(*tokenizer, /*skip_special_tokens=*/false);
  int64_t chars = 0;
  for (size_t i = 0; i < c.prompt_logprobs.size() && i < prompt.size(); ++i) {
    c.prompt_logprobs[i].text_offset = chars;
    chars += text::count_code_points(detok.add(prompt[i]));
  }
  GenerationEvent ev;
  ev.choice = c.index;
  ev.prompt_logprobs = std::move(c.prompt_logprobs);
  c.prompt_logprobs.clear();
  if (!r.failed) r.sink(std::move(ev));
}

}  // namespace tf::engine
