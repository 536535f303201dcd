// Building OpenAI response objects from engine events (api.md §1.4-§1.5, §2, §3).
//
// ChoiceState accumulates one choice's deltas (the non-streaming answer is the
// concatenation of exactly the deltas the stream would send, so the two agree by
// construction). The *_chunk functions build one streaming chunk each.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/engine_api.h"
#include "server/json_fields.h"

namespace tf::server {

struct ToolCallState {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChoiceState {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallState> tool_calls;
  std::vector<TokenLogprob> logprobs;
  // Per logprobs entry: code points of `content` before its token (the engine's count,
  // or the content of the events before it when the engine gives none).
  std::vector<int64_t> text_offsets;
  // Completions' echo with logprobs: one entry per prompt token (the first one's logprob
  // null), before the generated tokens' (GenerationEvent::prompt_logprobs).
  std::vector<TokenLogprob> prompt_logprobs;
  std::vector<int32_t> token_ids;  // return_token_ids: the generated tokens' ids
  std::vector<double> label_logprobs;  // GenerationRequest::label_tokens' logprobs (decisions)
  int64_t tokens_so_far = 0;       // generated tokens the events so far report (continuous usage)
  int64_t content_chars = 0;  // code points in `content`
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  std::string stop_string;  // the stop string that ended the choice, "" when none did
  std::string token_sha256;  // the engine's digest of the choice's token ids (on finish)
  std::vector<float> embedding;  // GenerationRequest::embed: the prompt's last hidden state
  void apply(const GenerationEvent& ev);
};

struct UsageTotals {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  int64_t cached_tokens = 0;
  // Adds another prompt's usage (completions with a list of prompts).
  UsageTotals& operator+=(const UsageTotals& o) {
    prompt_tokens += o.prompt_tokens;
    completion_tokens += o.completion_tokens;
    reasoning_tokens += o.reasoning_tokens;
    cached_tokens += o.cached_tokens;
    return *this;
  }
};
UsageTotals sum_usage(const std::vector<ChoiceState>& choices, int64_t prompt_tokens);
Json chat_usage_json(const UsageTotals& u);
Json completion_usage_json(const UsageTotals& u);

std::string make_id(const std::string& prefix);  // prefix + 24 random hex chars
int64_t unix_now();

// Unicode code points in UTF-8 text (Python's len(str), what text_offset counts).
int64_t code_points(std::string_view utf8);

Json chat_logprobs_json(std::span<const TokenLogprob> lps);
// Completions logprobs {tokens, token_logprobs, top_logprobs, text_offset} of the choice's
// entries [begin, end). text_offset is a code-point offset into the returned text: after
// the echoed prompt (echo_chars), never past the choice's text so far (a token of a stop
// string that was cut points at the end).
Json completion_logprobs_json(const ChoiceState& c, size_t begin, size_t end, int64_t echo_chars);
// The same arrays for the echoed prompt's tokens (ChoiceState::prompt_logprobs): the first
// token's logprob and top_logprobs are null (nothing precedes it); offsets count into the
// echoed prompt (echo_chars code points), never past it.
Json prompt_logprobs_json(std::span<const TokenLogprob> entries, int64_t echo_chars);
// vLLM's prompt_logprobs: per prompt position null (the first token; a row that could not be
// scored) or {"<id>": {logprob, rank, decoded_token}}: the prompt's own token first, then the
// `top_n` most likely (ranks 1..top_n). A -inf logprob reads -9999.0, as vLLM clamps it.
Json vllm_prompt_logprobs_json(std::span<const TokenLogprob> entries, int top_n);
// Each entry's alternatives cut to the `top_n` most likely, the entry's own token kept where
// it was listed (the engine scored more than one field asked for).
void keep_top_logprobs(std::vector<TokenLogprob>& entries, int top_n);
// `first`'s arrays followed by `then`'s (the echoed prompt's entries, then the reply's).
Json concat_completion_logprobs(Json first, const Json& then);

struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// A finished choice's token_sha256 (an extension: the SHA-256 of its token ids, for checking
// that two replies are the same tokens), set on `choice` when the engine gave one.
void add_token_sha256(Json& choice, const ChoiceState& c);
Json chat_completion_json(const ResponseMeta& meta, const std::vector<ChoiceState>& choices, const UsageTotals& usage,
                          bool include_reasoning, bool want_logprobs);
Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, const Json& finish_reason,
                     const Json& logprobs = nullptr);
// The delta object for one engine event (reasoning/content/tool_calls); null when empty.
Json chat_delta_json(const GenerationEvent& ev, bool include_reasoning);

Json text_completion_json(const ResponseMeta& meta, const std::vector<ChoiceState>& choices,
                          const std::vector<std::string>& echo_prefix, int n, const UsageTotals& usage,
                          bool want_logprobs);
Json text_completion_chunk_json(const ResponseMeta& meta, int index, const std::string& text,
                                const Json& finish_reason, const Json& logprobs = nullptr);

// A Responses API object; status completed/incomplete/in_progress.
Json response_object_json(const ResponseMeta& meta, const Json& echo, const std::string& status, const Json& output,
                          const Json& usage);
Json response_usage_json(const UsageTotals& u);
// Output items of a finished choice (reasoning, message, function calls) with stable ids.
// with_logprobs: the message's output_text part carries the answer's tokens' logprobs.
// sealed_reasoning: the reasoning item carries its text as encrypted_content too.
Json response_output_items(const ChoiceState& c, const std::string& id_seed, bool with_logprobs = false,
                           bool sealed_reasoning = false);
// The answer's logprobs (reasoning tokens left out) in the Responses API's form.
Json answer_logprobs_json(std::span<const TokenLogprob> lps);

std::string sse_data(const Json& payload);                           // "data: {...}\n\n"
std::string sse_event(const std::string& event, const Json& payload);  // "event: t\ndata: {...}\n\n"

}  // namespace tf::server
