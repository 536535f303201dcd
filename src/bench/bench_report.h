// Turns the records of a run into figures, an aligned table and a JSON file.
//
// Definitions (per successful request unless said otherwise):
//   TTFT            = first token time - send time
//   decode tok/s    = (output tokens - 1) / (end - first token)   (needs >= 2 tokens)
//   prefill tok/s   = prompt tokens / TTFT
//   aggregate tok/s = all generated tokens of successful requests / wall time of the run
//   decode tok/s, all streams at once = tokens the successful requests generated while every
//                   one of them was decoding (from the last first token to the first end) / that
//                   time: a batch's decode rate without the prefills around it (needs two or more
//                   requests whose decodes overlap; each request's tokens in the window are its
//                   token events there, scaled by its tokens per event)
// Distributions give median, p90 (linear interpolation between ranks, as numpy's
// default), mean, min and max. Failed requests are counted and their errors
// grouped by message; they contribute no figures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_record.h"
#include "bench/bench_spec.h"
#include "core/status.h"

namespace tf::bench {

struct Distribution {
  int count = 0;  // 0: no values (every other field 0)
  double median = 0.0, p90 = 0.0, mean = 0.0, min = 0.0, max = 0.0;
};

// q in [0, 1]; linear interpolation between the closest ranks; 0 for no values.
double percentile(std::vector<double> values, double q);
Distribution distribution(const std::vector<double>& values);

struct BenchSummary {
  int requests = 0;
  int succeeded = 0;
  int failed = 0;
  int64_t prompt_tokens = 0;   // successful requests
  int64_t output_tokens = 0;   // successful requests
  double wall_s = 0.0;
  Distribution ttft_s;
  Distribution decode_tok_s;   // per request
  Distribution prefill_tok_s;  // per request
  Distribution latency_s;      // send .. end
  double aggregate_tok_s = 0.0;
  double requests_per_s = 0.0;
  double together_s = 0.0;             // how long every successful request was decoding at once
  double together_decode_tok_s = 0.0;  // what they generated in that time / its length (0: none)
  std::map<std::string, int> errors;  // message -> count
};

BenchSummary summarize(const BenchRun& run);

// The report's note on a priming pass (BenchSpec::prime_prompts) that took `wall_s`.
std::string prime_note(const std::vector<RequestRecord>& records, double wall_s);

// Human-readable result: a header naming the run, one aligned row per metric,
// the aggregate, grouped errors, and the roofline when given (an object or null):
// its "summary" text, then one row per numeric field as "roofline tok/s"; the
// ones named like a measured figure (decode_tok_s: median per request,
// prefill_tok_s: median, aggregate_tok_s) get the measured value and its
// "% of roofline"; other string fields follow as "key: value" lines.
std::string format_table(const BenchSpec& spec, const BenchRun& run, const BenchSummary& summary,
                         const nlohmann::json& roofline = nullptr);

nlohmann::json summary_json(const BenchSummary& summary);
nlohmann::json record_json(const RequestRecord& record);
// {"tool", "mode", "model", "spec", "summary", "requests": [...], "roofline"?}; the
// roofline object is copied as given (omitted when null).
nlohmann::json report_json(const BenchSpec& spec, const BenchRun& run, const BenchSummary& summary,
                           const nlohmann::json& roofline = nullptr);

// Writes `report` (indented) to `path`; the error names the path.
Status write_report(const std::string& path, const nlohmann::json& report);

}  // namespace tf::bench
