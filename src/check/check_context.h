// What every live check needs: the options, the server's own figures, and request helpers.
//
// Design: the context reads GET /v1/models and GET /health once, before any check runs, so
// each check sizes its work to the server it meets (its window, PARALLEL, cache pool) instead
// of assuming a configuration. Requests go out greedy (temperature 0) with the reasoning
// effort the options name, so two runs of a check send the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check/check_client.h"

namespace tf::check {

struct CheckOptions {
  std::string url = "http://127.0.0.1:8888";
  std::string api_key;
  std::string model;                      // default: the first of /v1/models
  double timeout_s = 900.0;               // per request
  std::string reasoning_effort = "none";  // "" sends none: the server's default
  int64_t needle_tokens = 8192;           // haystack size (cut to fit the window)
  int eot_prompts = 24;  // end_of_turn: prompts (of the built-in list, repeated with a twist)
  int64_t eot_max_tokens = 1024;
  double eot_max_rate = 0.10;          // end_of_turn: highest share that may run to max_tokens
  int64_t reuse_tokens = 6000;         // prompt_reuse: the system prompt's size (cut to fit the window)
  int pressure_requests = 0;           // pool_pressure: 0 = 2 x PARALLEL + 2
  int64_t pressure_prompt_tokens = 0;  // pool_pressure: 0 = sized to fill the pool (at most 16,384)
};

// Read from the server before the checks run.
struct ServerFacts {
  std::string model;
  int64_t context_length = 0;  // /v1/models max_model_len, else /health context_length
  int streams_max = 1;         // /health streams.max (PARALLEL)
  int64_t pool_tokens = 0;     // /health pool_tokens (0: not reported)
  bool health = true;          // /health answers with a JSON object
};

class CheckContext {
 public:
  static Expected<CheckContext> connect(const CheckOptions& options);

  const CheckOptions& options() const { return options_; }
  const ServerFacts& facts() const { return facts_; }
  const bench::HttpTarget& target() const { return target_; }
  // A new client (one per thread).
  CheckClient client() const { return CheckClient(target_, options_.api_key, options_.timeout_s); }
  // A greedy chat request body with the options' reasoning effort.
  Json chat_body(Json messages, int64_t max_tokens) const;
  // Token ids of text (POST /tokenize, no special tokens).
  Expected<std::vector<int32_t>> tokenize(CheckClient& client, const std::string& text) const;
  // Tokens per sentence of haystack.h's filler, measured on a sample, to size long prompts.
  Expected<double> tokens_per_filler_sentence(CheckClient& client) const;
  // GET /health as JSON.
  Expected<Json> health(CheckClient& client) const;

 private:
  CheckOptions options_;
  ServerFacts facts_;
  bench::HttpTarget target_;
};

}  // namespace tf::check
