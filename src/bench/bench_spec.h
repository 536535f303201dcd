// What one benchmark run measures: the load shape (concurrency, number of
// requests, prompt and output lengths), sampling, warmup and the transport.
//
// Design: a plain value that both drivers (HTTP load generator, offline runner)
// read and that the report copies into its JSON, so a result file always says
// what produced it. Defaults follow how users benchmark GLM-5.3-Flash
// (reference-deployment.md §1.3): temperature 0, thinking off, fixed-length
// replies (ignore_eos), medians over several requests.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tf::bench {

struct BenchSpec {
  // HTTP mode only: the server (http://host:port, an optional path prefix is kept)
  // and the model name sent with each request (empty: the server's only model).
  std::string url = "http://127.0.0.1:8888";
  std::string model;
  std::string api_key;         // sent as "Authorization: Bearer ..." when set
  bool chat = false;           // /v1/chat/completions instead of /v1/completions

  int concurrency = 1;         // requests in flight at once
  int requests = 4;            // measured requests
  int warmup = 0;              // requests run (and discarded) before the measured ones
  int64_t prompt_tokens = 512;
  int64_t output_tokens = 128; // max_tokens of every request
  bool ignore_eos = true;      // replies of exactly output_tokens tokens
  double temperature = 0.0;
  bool thinking = false;       // chat only: chat_template_kwargs.enable_thinking
  bool streaming = true;       // without streaming TTFT equals the whole latency
  uint64_t seed = 0;           // varies the synthetic prompts
  // Every request sends the same prompt (else no two share a prefix): what prompt reuse
  // makes of a repeated prompt (the first request runs it, the others resume).
  bool repeat_prompt = false;
  // Every measured prompt is run once first (1 output token, one at a time), so the measured
  // requests resume from its kept state: the decode of N long-context streams at once, with
  // the prefills that would otherwise interleave with it run before (TTFT is then a resume's).
  bool prime_prompts = false;
  double timeout_s = 600.0;    // per request
};

// The priming pass of `spec` (prime_prompts): its prompts one at a time, one token each.
BenchSpec priming_spec(const BenchSpec& spec);

// Names the first field out of range ("concurrency must be >= 1, got 0").
Status validate(const BenchSpec& spec);

// Every field except api_key (secrets stay out of result files).
nlohmann::json to_json(const BenchSpec& spec);

}  // namespace tf::bench
