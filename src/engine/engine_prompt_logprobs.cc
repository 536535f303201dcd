// Prompt logprobs (GenerationRequest::prompt_logprobs): what the model gives each prompt
// token after the tokens before it, for completions' echo with logprobs (scoring a text, as
// lm-evaluation-harness does).
//
// Such a request's prefill chunks bring all their rows' logits to the host (StepEntry::
// all_logits), kPromptLogprobsChunk rows at most per step. Row j scores prompt token j + 1
// under the model's raw distribution, exactly as the sampler's raw logprobs do (padding ids
// masked, nothing else), so a prompt that repeats a reply scores its tokens as the reply
// reported them. The prompt's last row predicts the first generated token: sampling's.
// Such a request neither resumes from nor keeps a kept prompt (engine_prompt_reuse.cc).
#include <algorithm>
#include <stdexcept>

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
                          const std::vector<tf::TokenLogprob>& top) {
  TokenLogprob lp;
  lp.token = token_text(tok, chosen.token);
  lp.token_id = chosen.token;
  lp.logprob = chosen.logprob;
  lp.bytes = token_bytes(tok, chosen.token);
  std::vector<tf::TokenLogprob> listed = top;
  if (!listed.empty() && std::none_of(listed.begin(), listed.end(), [&](const auto& t) { return t.token == chosen.token; }))
    listed.push_back(chosen);
  for (const tf::TokenLogprob& t : listed) lp.top.push_back({token_text(tok, t.token), t.logprob, token_bytes(tok, t.token)});
  return lp;
}

}  // namespace

void Engine::Impl::score_prompt_rows(LiveChoice& c, StepResult& result) {
  LiveRequest& r = *c.request;
  const std::vector<int32_t>& prompt = r.req.prompt_tokens;
  const auto length = static_cast<int64_t>(prompt.size());
  Tensor& logits = result.logits;
  if (logits.is_null() || logits.size(0) < 1) throw std::runtime_error("prompt logprobs: the model step returned no logits");
  const int64_t rows = logits.size(0), vocab = logits.size(1), from = c.prefilled;
  if (from == 0) {
    TokenLogprob first;  // nothing before it: no logprob
    first.token = token_text(*tokenizer, prompt[0]);
    first.token_id = prompt[0];
    first.bytes = token_bytes(*tokenizer, prompt[0]);
    c.prompt_logprobs.push_back(std::move(first));
  }
  // Row j scores token from + j + 1; the prompt's last row scores nothing.
  const int64_t scored = std::clamp<int64_t>(length - 1 - from, 0, rows);
  std::vector<tf::TokenLogprob> chosen(static_cast<size_t>(scored));
  std::vector<std::vector<tf::TokenLogprob>> tops(static_cast<size_t>(scored));
  sample_pool.parallel_for(scored, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const std::span<float> row(logits.data<float>() + j * vocab, static_cast<size_t>(vocab));
      mask_padding(row);
      const double lse = log_sum_exp(row);
      const int32_t next = prompt[static_cast<size_t>(from + j + 1)];
      chosen[static_cast<size_t>(j)] = {next, static_cast<float>(static_cast<double>(row[static_cast<size_t>(next)]) - lse)};
      tops[static_cast<size_t>(j)] = top_logprobs(row, r.req.prompt_logprobs, lse);
    }
  });
  for (size_t j = 0; j < chosen.size(); ++j) c.prompt_logprobs.push_back(prompt_entry(*tokenizer, chosen[j], tops[j]));
  // Sampling reads the first row of the host logits: the chunk's last.
  logits = logits.slice(0, rows - 1, rows);
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
