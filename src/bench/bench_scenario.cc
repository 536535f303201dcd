// See bench_scenario.h.
#include "bench/bench_scenario.h"

#include <algorithm>
#include <cctype>

namespace tf::bench {

using Json = nlohmann::json;

namespace {

// A positive count with an optional k (x1024) suffix; -1 when malformed or out of range.
int64_t parse_count(const std::string& s, bool allow_k) {
  if (s.empty() || s.size() > 9) return -1;
  int64_t scale = 1;
  std::string digits = s;
  if (allow_k && (digits.back() == 'k' || digits.back() == 'K')) {
    scale = 1024;
    digits.pop_back();
  }
  if (digits.empty()) return -1;
  int64_t v = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    v = v * 10 + (c - '0');
  }
  return v > 0 ? v * scale : -1;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

Expected<BenchScenario> parse_one(const std::string& name, int64_t output_tokens) {
  BenchScenario s;
  s.name = name;
  auto bad = [&](const std::string& why) {
    return invalid_argument("bench: --scenario '" + name + "': " + why +
                            " (expected decode-N[@P[k]], prefill-P[k], reuse-P[k] or gpu)");
  };
  if (name.rfind("decode-", 0) == 0) {
    // decode-N, or decode-N@P: each stream's prompt P tokens long (decode at that context).
    const size_t at = name.find('@');
    const int64_t n =
        parse_count(name.substr(7, at == std::string::npos ? std::string::npos : at - 7), false);
    if (n < 1 || n > 4096) return bad("N must be 1..4096 streams");
    s.kind = BenchScenario::Kind::kDecode;
    s.concurrency = static_cast<int>(n);
    s.output_tokens = output_tokens;
    s.prompt_tokens = kDecodeScenarioPrompt;
    // One stream: a few requests for a median; more: exactly one wave at that batch.
    s.requests = n == 1 ? 3 : static_cast<int>(n);
    s.warmup = 1;
    if (at != std::string::npos) {
      const int64_t p = parse_count(name.substr(at + 1), true);
      if (p < 1 || p > (int64_t{1} << 24)) return bad("P must be 1..16M tokens");
      s.prompt_tokens = p;
      s.prime_prompts = n > 1;
      // Past 32K tokens a prompt's prefill is the run's cost: one wave, no warmup.
      if (p > 32768) {
        s.requests = static_cast<int>(n);
        s.warmup = 0;
      }
    }
    return s;
  }
  const bool reuse = name.rfind("reuse-", 0) == 0;
  if (name.rfind("prefill-", 0) == 0 || reuse) {
    const int64_t p = parse_count(name.substr(reuse ? 6 : 8), true);
    if (p < 1 || p > (int64_t{1} << 24)) return bad("P must be 1..16M tokens");
    s.kind = BenchScenario::Kind::kPrefill;
    s.concurrency = 1;
    s.requests = p <= 32768 ? 2 : 1;
    s.warmup = p <= 32768 ? 1 : 0;
    s.prompt_tokens = p;
    s.output_tokens = 1;
    if (reuse) {
      s.requests = 3;
      s.warmup = 0;
      s.repeat_prompt = true;
    }
    return s;
  }
  return bad("unknown scenario");
}

}  // namespace

Expected<std::vector<BenchScenario>> parse_scenarios(const std::string& list, int64_t output_tokens) {
  if (output_tokens < 2) {
    return invalid_argument("bench: decode scenarios need --output-tokens >= 2 (decode tok/s spans the tokens after "
                            "the first), got " + std::to_string(output_tokens));
  }
  std::vector<BenchScenario> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string name = trim(list.substr(start, comma - start));
    start = comma + 1;
    if (name.empty()) continue;
    if (name == "gpu") {
      for (const char* n : {"decode-1", "decode-4", "decode-16", "decode-64", "prefill-8k", "prefill-128k"}) {
        auto s = parse_one(n, output_tokens);
        if (!s) return s.status();
        out.push_back(*s);
      }
      continue;
    }
    auto s = parse_one(name, output_tokens);
    if (!s) return s.status();
    out.push_back(*s);
  }
  if (out.empty()) return invalid_argument("bench: --scenario names no scenario");
  return out;
}

BenchSpec scenario_spec(const BenchSpec& base, const BenchScenario& s) {
  BenchSpec spec = base;
  spec.concurrency = s.concurrency;
  spec.requests = s.requests;
  spec.warmup = s.warmup;
  spec.prompt_tokens = s.prompt_tokens;
  spec.output_tokens = s.output_tokens;
  spec.repeat_prompt = s.repeat_prompt;
  spec.prime_prompts = s.prime_prompts;
  spec.ignore_eos = true;  // the roofline assumes exactly output_tokens per request
  return spec;
}

int max_concurrency(const std::vector<BenchScenario>& scenarios) {
  int c = 1;
  for (const BenchScenario& s : scenarios) c = std::max(c, s.concurrency);
  return c;
}

int64_t max_window(const std::vector<BenchScenario>& scenarios) {
  int64_t w = 1;
  for (const BenchScenario& s : scenarios) w = std::max(w, s.prompt_tokens + s.output_tokens);
  return w;
}

Json scenario_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw,
                       const BenchScenario& s) {
  Json j = s.kind == BenchScenario::Kind::kDecode
               ? decode_roofline(m, d, hw, s.concurrency, s.prompt_tokens + s.output_tokens / 2)
               : prefill_roofline(m, d, hw, s.prompt_tokens);
  j["scenario"] = s.name;
  return j;
}

Json run_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw, const BenchSpec& spec) {
  Json decode = decode_roofline(m, d, hw, spec.concurrency, spec.prompt_tokens + spec.output_tokens / 2);
  Json prefill = prefill_roofline(m, d, hw, spec.prompt_tokens);
  Json j = {{"decode_tok_s", decode["decode_tok_s"]},
            {"aggregate_tok_s", decode["aggregate_tok_s"]},
            {"prefill_tok_s", prefill["prefill_tok_s"]},
            {"summary", decode["summary"].get<std::string>() + "\n" + prefill["summary"].get<std::string>()},
            {"detail", {{"decode", decode["detail"]}, {"prefill", prefill["detail"]}}}};
  return j;
}

}  // namespace tf::bench
