// Named offline benchmark scenarios (`tensorfold bench --offline --scenario ...`)
// and the roofline each one is compared with.
//
//   decode-N      N streams at once (one wave of N requests; 3 requests when N = 1),
//                 a short prompt (32 tokens) and the run's --output-tokens each:
//                 per-stream decode tok/s and aggregate tok/s at batch N.
//   decode-N@P    the same at a context of P prompt tokens a stream (P may end in k):
//                 decode where the DSA layers score every pool of a long context
//                 (one wave and no warmup past 32K). With N > 1 each prompt is run once
//                 first (1 token), so the N streams resume and decode together instead of
//                 decoding between each other's prefills.
//   prefill-P     one prompt of P tokens (P may end in k = x1024), 1 output token:
//                 TTFT -> prefill tok/s. 2 requests up to 32K, 1 beyond.
//   reuse-P       prompt reuse: one prompt of P tokens sent 3 times, 1 output token: the
//                 first TTFT runs it all, the others resume from its kept state.
//   gpu           decode-1, decode-4, decode-16, decode-64, prefill-8k, prefill-128k.
//
// Design: scenarios are values that turn a base BenchSpec into the run's spec,
// so one engine (sized for the largest) serves them all in order and each
// report says exactly what ran. The decode roofline is taken at the mean
// context of the run (prompt + half the output).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_spec.h"
#include "bench/roofline.h"
#include "core/status.h"

namespace tf::bench {

struct BenchScenario {
  enum class Kind { kDecode, kPrefill };
  std::string name;  // as written by the user, normalised ("prefill-8k")
  Kind kind = Kind::kDecode;
  int concurrency = 1;
  int requests = 1;
  int warmup = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  bool repeat_prompt = false;  // reuse-P
  bool prime_prompts = false;  // decode-N@P, N > 1
};

inline constexpr int64_t kDecodeScenarioPrompt = 32;

// A comma-separated list of scenario names (see above); `output_tokens` is the
// decode scenarios' reply length. The error names the entry at fault.
Expected<std::vector<BenchScenario>> parse_scenarios(const std::string& list, int64_t output_tokens);

// `base` with the scenario's load shape.
BenchSpec scenario_spec(const BenchSpec& base, const BenchScenario& s);

// What an engine needs to run every scenario: the most streams at once, and the
// longest window (prompt + output).
int max_concurrency(const std::vector<BenchScenario>& scenarios);
int64_t max_window(const std::vector<BenchScenario>& scenarios);

// The roofline object for a scenario (decode: at its concurrency and mean
// context; prefill: at its prompt length), with "scenario" naming it.
nlohmann::json scenario_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw,
                                 const BenchScenario& s);

// The roofline of a plain run (no scenario): decode at `spec.concurrency` and the
// mean context, and the prefill of its prompt, in one object.
nlohmann::json run_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw,
                            const BenchSpec& spec);

}  // namespace tf::bench
