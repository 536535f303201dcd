// OpProfiler (see op_profiler.h): event pairs per op and per step, summed when
// they are reported.
#include "kernels/cuda/op_profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tf::cuda {

std::unique_ptr<OpProfiler> OpProfiler::from_env(cudaStream_t stream) {
  const char* on = std::getenv("TF_PROFILE_OPS");
  if (on == nullptr || std::string(on) != "1") return nullptr;
  int every = 50;
  if (const char* e = std::getenv("TF_PROFILE_OPS_EVERY")) every = std::max(1, std::atoi(e));
  return std::unique_ptr<OpProfiler>(new OpProfiler(stream, every));
}

OpProfiler::~OpProfiler() {
  const std::string r = report();
  if (!r.empty()) {
    std::fputs(r.c_str(), stderr);
    std::fflush(stderr);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event() {
  if (!spare_.empty()) {
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return e;
}

void OpProfiler::begin_op(const char* name) {
  if (paused_ || !in_step_ || depth_++ > 0) return;  // nested calls (to_device -> copy) count once
  open_name_ = name;
  open_a_ = event();
  if (open_a_) cudaEventRecord(open_a_, stream_);
}

void OpProfiler::end_op() {
  if (paused_ || !in_step_ || depth_ == 0 || --depth_ > 0) return;
  if (open_a_ == nullptr) return;
  cudaEvent_t b = event();
  if (b == nullptr) return;
  cudaEventRecord(b, stream_);
  ops_.push_back({open_name_, open_a_, b});
  open_a_ = nullptr;
}

void OpProfiler::begin_step() {
  if (paused_ || in_step_) return;
  in_step_ = true;
  depth_ = 0;
  step_t0_ = std::chrono::steady_clock::now();
  step_a_ = event();
  if (step_a_) cudaEventRecord(step_a_, stream_);
}

void OpProfiler::end_step() {
  if (!in_step_) return;
  in_step_ = false;
  cudaEvent_t b = event();
  if (step_a_ && b) {
    cudaEventRecord(b, stream_);
    steps_.push_back({"step", step_a_, b});
  }
  step_a_ = nullptr;
  host_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_t0_).count();
  ++steps_since_report_;
  if (steps_since_report_ >= every_) {
    const std::string r = report();
    std::fputs(r.c_str(), stderr);
    std::fflush(stderr);
  }
}

void OpProfiler::collect() {
  if (!steps_.empty()) cudaEventSynchronize(steps_.back().b);
  if (!ops_.empty()) cudaEventSynchronize(ops_.back().b);
  for (auto* list : {&ops_, &steps_}) {
    for (const Rec& r : *list) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, r.a, r.b) != cudaSuccess) {
        (void)cudaGetLastError();
        ms = 0;
      }
      if (list == &ops_) {
        Total& t = totals_[r.name];
        ++t.calls;
        t.ms += ms;
        op_ms_ += ms;
      } else {
        span_ms_ += ms;
      }
      spare_.push_back(r.a);
      spare_.push_back(r.b);
    }
    list->clear();
  }
}

std::string OpProfiler::report() {
  collect();
  const int64_t n = steps_since_report_;
  if (n == 0 && totals_.empty()) return "";
  const double per = n > 0 ? 1.0 / static_cast<double>(n) : 1.0;
  int64_t calls = 0;
  for (const auto& [name, t] : totals_) calls += t.calls;
  std::string out;
  char line[256];
  steps_done_ += n;
  std::snprintf(line, sizeof line,
                "[op-profile] steps %lld-%lld: host wall %.3f ms/step, GPU span %.3f ms/step, op GPU time %.3f "
                "ms/step (%.1f%% of span), idle gap %.3f ms/step, %.1f ops/step\n",
                static_cast<long long>(steps_done_ - n + 1), static_cast<long long>(steps_done_), host_ms_ * per,
                span_ms_ * per, op_ms_ * per, span_ms_ > 0 ? 100.0 * op_ms_ / span_ms_ : 0.0,
                (span_ms_ - op_ms_) * per, static_cast<double>(calls) * per);
  out += line;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::snprintf(line, sizeof line, "[op-profile]   %-28s %12s %14s %10s %7s\n", "op", "calls/step", "GPU ms/step",
                "avg us", "share");
  out += line;
  for (const auto& [name, t] : rows) {
    std::snprintf(line, sizeof line, "[op-profile]   %-28s %12.1f %14.4f %10.2f %6.1f%%\n", name.c_str(),
                  static_cast<double>(t.calls) * per, t.ms * per, t.calls ? 1000.0 * t.ms / t.calls : 0.0,
                  op_ms_ > 0 ? 100.0 * t.ms / op_ms_ : 0.0);
    out += line;
  }
  totals_.clear();
  steps_since_report_ = 0;
  host_ms_ = span_ms_ = op_ms_ = 0;
  return out;
}

}  // namespace tf::cuda
