// See bench_spec.h.
#include "bench/bench_spec.h"

namespace tf::bench {

BenchSpec priming_spec(const BenchSpec& spec) {
  BenchSpec prime = spec;
  prime.concurrency = 1;
  prime.output_tokens = 1;
  return prime;
}

Status validate(const BenchSpec& spec) {
  auto bad = [](const std::string& field, const std::string& rule, const std::string& got) {
    return invalid_argument("bench: " + field + " must be " + rule + ", got " + got);
  };
  if (spec.concurrency < 1) return bad("concurrency", ">= 1", std::to_string(spec.concurrency));
  if (spec.concurrency > 4096) return bad("concurrency", "<= 4096", std::to_string(spec.concurrency));
  if (spec.requests < 1) return bad("requests", ">= 1", std::to_string(spec.requests));
  if (spec.warmup < 0) return bad("warmup", ">= 0", std::to_string(spec.warmup));
  if (spec.prompt_tokens < 1) return bad("prompt_tokens", ">= 1", std::to_string(spec.prompt_tokens));
  // A bound that keeps synthesis and request bodies sane (well above the 1M window).
  if (spec.prompt_tokens > (int64_t{1} << 24)) return bad("prompt_tokens", "<= 16777216", std::to_string(spec.prompt_tokens));
  if (spec.output_tokens < 1) return bad("output_tokens", ">= 1", std::to_string(spec.output_tokens));
  if (!(spec.temperature >= 0.0 && spec.temperature <= 2.0))
    return bad("temperature", "in [0, 2]", std::to_string(spec.temperature));
  if (!(spec.timeout_s > 0.0)) return bad("timeout_s", "> 0", std::to_string(spec.timeout_s));
  return Status::ok();
}

nlohmann::json to_json(const BenchSpec& spec) {
  return {{"url", spec.url},
          {"model", spec.model},
          {"endpoint", spec.chat ? "/v1/chat/completions" : "/v1/completions"},
          {"concurrency", spec.concurrency},
          {"requests", spec.requests},
          {"warmup", spec.warmup},
          {"prompt_tokens", spec.prompt_tokens},
          {"output_tokens", spec.output_tokens},
          {"ignore_eos", spec.ignore_eos},
          {"temperature", spec.temperature},
          {"thinking", spec.thinking},
          {"streaming", spec.streaming},
          {"seed", spec.seed},
          {"repeat_prompt", spec.repeat_prompt},
          {"prime_prompts", spec.prime_prompts},
          {"timeout_s", spec.timeout_s}};
}

}  // namespace tf::bench
