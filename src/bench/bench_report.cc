// See bench_report.h.
#include "bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "core/version.h"

namespace tf::bench {

using Json = nlohmann::json;

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  q = std::clamp(q, 0.0, 1.0);
  double rank = q * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  if (values.empty()) return d;
  d.count = static_cast<int>(values.size());
  d.median = percentile(values, 0.5);
  d.p90 = percentile(values, 0.9);
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  d.min = *mn;
  d.max = *mx;
  return d;
}

namespace {

// BenchSummary::together_s / together_decode_tok_s (bench_report.h).
void together(const BenchRun& run, BenchSummary& s) {
  double w0 = 0.0, w1 = 0.0;
  int decoding = 0;
  for (const RequestRecord& r : run.records) {
    if (!r.ok || r.first_token_s < 0 || r.token_times_s.empty()) continue;
    w0 = decoding == 0 ? r.first_token_s : std::max(w0, r.first_token_s);
    w1 = decoding == 0 ? r.end_s : std::min(w1, r.end_s);
    ++decoding;
  }
  if (decoding < 2 || w1 <= w0) return;
  double tokens = 0.0;
  for (const RequestRecord& r : run.records) {
    if (!r.ok || r.first_token_s < 0 || r.token_times_s.empty()) continue;
    const auto in = std::count_if(r.token_times_s.begin(), r.token_times_s.end(),
                                  [&](double t) { return t > w0 && t <= w1; });
    tokens += static_cast<double>(in) * static_cast<double>(r.output_tokens) /
              static_cast<double>(r.token_times_s.size());
  }
  s.together_s = w1 - w0;
  s.together_decode_tok_s = tokens / s.together_s;
}

}  // namespace

BenchSummary summarize(const BenchRun& run) {
  BenchSummary s;
  s.requests = static_cast<int>(run.records.size());
  s.wall_s = run.wall_s;
  std::vector<double> ttft, decode, prefill, latency;
  for (const RequestRecord& r : run.records) {
    if (!r.ok) {
      ++s.failed;
      ++s.errors[r.error.empty() ? std::string("unknown error") : r.error];
      continue;
    }
    ++s.succeeded;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    latency.push_back(r.end_s - r.start_s);
    if (r.first_token_s < 0) continue;
    double t = r.first_token_s - r.start_s;
    ttft.push_back(t);
    if (t > 0 && r.prompt_tokens > 0) prefill.push_back(static_cast<double>(r.prompt_tokens) / t);
    double decode_s = r.end_s - r.first_token_s;
    if (r.output_tokens >= 2 && decode_s > 0)
      decode.push_back(static_cast<double>(r.output_tokens - 1) / decode_s);
  }
  together(run, s);
  s.ttft_s = distribution(ttft);
  s.decode_tok_s = distribution(decode);
  s.prefill_tok_s = distribution(prefill);
  s.latency_s = distribution(latency);
  if (run.wall_s > 0) {
    s.aggregate_tok_s = static_cast<double>(s.output_tokens) / run.wall_s;
    s.requests_per_s = static_cast<double>(s.succeeded) / run.wall_s;
  }
  return s;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string prime_note(const std::vector<RequestRecord>& records, double wall_s) {
  const auto failed =
      std::count_if(records.begin(), records.end(), [](const RequestRecord& r) { return !r.ok; });
  return "each prompt ran once before (1 token, one at a time: " + fixed(wall_s, 3) + " s" +
         (failed > 0 ? ", " + std::to_string(failed) + " of them failed" : std::string()) +
         "), so TTFT is a resume from its kept state and the streams decode together";
}

namespace {

// Pads every column to its widest cell; the first column is left-aligned.
std::string aligned(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      std::string pad(width[c] - row[c].size(), ' ');
      line += c == 0 ? row[c] + pad : "  " + pad + row[c];
    }
    out += line + "\n";
  }
  return out;
}

std::vector<std::string> row(const std::string& name, const Distribution& d, double scale, int digits) {
  if (d.count == 0) return {name, "-", "-", "-", "-", "-", "0"};
  return {name,
          fixed(d.median * scale, digits),
          fixed(d.p90 * scale, digits),
          fixed(d.mean * scale, digits),
          fixed(d.min * scale, digits),
          fixed(d.max * scale, digits),
          std::to_string(d.count)};
}

Json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"median", d.median}, {"p90", d.p90}, {"mean", d.mean}, {"min", d.min}, {"max", d.max}};
}

// The roofline beside the measured figures: one row per bound, with the measured
// value and its share of the bound when the bound names a measured figure.
std::string roofline_table(const BenchSummary& s, const Json& roofline) {
  std::string out = "roofline:\n";
  if (roofline.contains("summary") && roofline["summary"].is_string()) {
    std::string text = roofline["summary"].get<std::string>();
    for (size_t b = 0; b < text.size();) {
      size_t e = text.find('\n', b);
      if (e == std::string::npos) e = text.size();
      out += "  " + text.substr(b, e - b) + "\n";
      b = e + 1;
    }
  }
  std::vector<std::vector<std::string>> rows = {{"  figure", "measured", "roofline tok/s", "% of roofline"}};
  for (const auto& [key, value] : roofline.items()) {
    if (!value.is_number()) continue;
    const double bound = value.get<double>();
    std::string label = "  " + key;
    double measured = -1;
    if (key == "decode_tok_s") {
      label = "  decode tok/s per request";
      if (s.decode_tok_s.count) measured = s.decode_tok_s.median;
    } else if (key == "prefill_tok_s") {
      label = "  prefill tok/s per request";
      if (s.prefill_tok_s.count) measured = s.prefill_tok_s.median;
    } else if (key == "aggregate_tok_s") {
      label = "  aggregate tok/s";
      if (s.output_tokens > 0) measured = s.aggregate_tok_s;
    }
    rows.push_back({label, measured >= 0 ? fixed(measured, 1) : "-", fixed(bound, 1),
                    measured >= 0 && bound > 0 ? fixed(100.0 * measured / bound, 1) + "%" : "-"});
  }
  if (rows.size() > 1) out += aligned(rows);
  for (const auto& [key, value] : roofline.items())
    if (value.is_string() && key != "summary") out += "  " + key + ": " + value.get<std::string>() + "\n";
  return out;
}

}  // namespace

std::string format_table(const BenchSpec& spec, const BenchRun& run, const BenchSummary& s, const Json& roofline) {
  std::string out = "tensorfold bench (" + run.mode + ")";
  if (run.mode == "http") out += " " + spec.url + (spec.chat ? " /v1/chat/completions" : " /v1/completions");
  if (!run.model.empty()) out += ", model " + run.model;
  out += "\n";
  out += "concurrency " + std::to_string(spec.concurrency) + ", " + std::to_string(s.requests) + " requests (" +
         std::to_string(s.succeeded) + " ok, " + std::to_string(s.failed) + " failed), prompt " +
         std::to_string(spec.prompt_tokens) + " tokens, output " + std::to_string(spec.output_tokens) +
         " tokens" + (spec.ignore_eos ? " (ignore_eos)" : "") + ", temperature " + fixed(spec.temperature, 2) +
         (spec.streaming ? "" : ", not streamed (TTFT = latency)") + "\n\n";
  out += aligned({{"metric", "median", "p90", "mean", "min", "max", "n"},
                  row("TTFT (ms)", s.ttft_s, 1000.0, 1),
                  row("decode tok/s per request", s.decode_tok_s, 1.0, 1),
                  row("prefill tok/s per request", s.prefill_tok_s, 1.0, 1),
                  row("latency (s)", s.latency_s, 1.0, 3)});
  out += "\naggregate: " + fixed(s.aggregate_tok_s, 1) + " tok/s (" + std::to_string(s.output_tokens) +
         " tokens in " + fixed(s.wall_s, 3) + " s), " + fixed(s.requests_per_s, 3) + " requests/s\n";
  if (s.together_s > 0)
    out += "decode tok/s, all " + std::to_string(s.succeeded) +
           " streams at once: " + fixed(s.together_decode_tok_s, 1) + " aggregate, " +
           fixed(s.together_decode_tok_s / s.succeeded, 1) + " a stream (over " + fixed(s.together_s, 3) +
           " s)\n";
  for (const std::string& note : run.notes) out += "note: " + note + "\n";
  if (!s.errors.empty()) {
    out += "errors:\n";
    for (const auto& [message, count] : s.errors) out += "  " + std::to_string(count) + " x " + message + "\n";
  }
  if (roofline.is_object() && !roofline.empty()) out += roofline_table(s, roofline);
  return out;
}

Json summary_json(const BenchSummary& s) {
  Json errors = Json::array();
  for (const auto& [message, count] : s.errors) errors.push_back({{"message", message}, {"count", count}});
  return {{"requests", s.requests},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"prompt_tokens", s.prompt_tokens},
          {"output_tokens", s.output_tokens},
          {"wall_s", s.wall_s},
          {"ttft_s", distribution_json(s.ttft_s)},
          {"decode_tok_s", distribution_json(s.decode_tok_s)},
          {"prefill_tok_s", distribution_json(s.prefill_tok_s)},
          {"latency_s", distribution_json(s.latency_s)},
          {"aggregate_tok_s", s.aggregate_tok_s},
          {"requests_per_s", s.requests_per_s},
          {"together_s", s.together_s},
          {"together_decode_tok_s", s.together_decode_tok_s},
          {"errors", errors}};
}

Json record_json(const RequestRecord& r) {
  Json j = {{"index", r.index},
            {"ok", r.ok},
            {"start_s", r.start_s},
            {"first_token_s", r.first_token_s >= 0 ? Json(r.first_token_s) : Json()},
            {"end_s", r.end_s},
            {"prompt_tokens", r.prompt_tokens},
            {"output_tokens", r.output_tokens},
            {"output_tokens_from_usage", r.output_tokens_from_usage},
            {"finish_reason", r.finish_reason},
            {"token_times_s", r.token_times_s}};
  if (r.http_status != 0) j["http_status"] = r.http_status;
  if (!r.ok) j["error"] = r.error;
  return j;
}

Json report_json(const BenchSpec& spec, const BenchRun& run, const BenchSummary& summary, const Json& roofline) {
  Json requests = Json::array();
  for (const RequestRecord& r : run.records) requests.push_back(record_json(r));
  Json out = {{"tool", std::string("tensorfold bench ") + kVersion},
              {"mode", run.mode},
              {"model", run.model},
              {"spec", to_json(spec)},
              {"summary", summary_json(summary)},
              {"requests", requests},
              {"notes", run.notes}};
  if (!roofline.is_null()) out["roofline"] = roofline;
  return out;
}

Status write_report(const std::string& path, const Json& report) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid_argument("bench: cannot open " + path + " for writing");
  // Replace invalid UTF-8 (an error text from a hostile server) instead of throwing.
  f << report.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  f.close();
  if (!f) return internal_error("bench: writing " + path + " failed (disk full?)");
  return Status::ok();
}

}  // namespace tf::bench
