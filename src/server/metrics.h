// Prometheus metrics of the HTTP layer (text exposition format 0.0.4).
//
// Each series is exported under a `tensorfold:` name and under vLLM's name (label
// model_name) so existing dashboards work. Request counters and histograms live
// here; gauges are read from EngineHealth at scrape time. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/engine_api.h"

namespace tf::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name_bucket{...,le}` (cumulative), `name_sum`, `name_count` lines.
  void write(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, non-cumulative; last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);
  void record_request(const std::string& endpoint, int status, double latency_s);
  void record_ttft(double seconds);
  void record_generation(int64_t prompt_tokens, int64_t completion_tokens, const std::string& finish_reason,
                         double e2e_seconds);
  std::string render(const EngineHealth& health) const;

 private:
  std::string model_label() const;
  std::string model_name_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> finished_;
  Histogram http_latency_;
  Histogram e2e_latency_;
  Histogram ttft_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
};

}  // namespace tf::server
