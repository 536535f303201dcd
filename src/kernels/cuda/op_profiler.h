// OpProfiler: TF_PROFILE_OPS=1 times every CUDA op of a model step on the GPU.
//
// Each op (its outermost Ops call) gets a cudaEvent pair recorded on the stream
// around its launches, and each step one pair around all of it; nothing waits
// inside a step. Every TF_PROFILE_OPS_EVERY steps (default 50) and when the backend
// goes, the profiler waits for the last event and prints, per op name, the launch
// count and GPU time, and per step the host wall time, the GPU span from the
// step's first to last event, and the sum of op GPU time: span minus op time is
// the time the GPU sat idle waiting for the host (launch-bound steps). Recording
// an event costs ~2 us of host time, so the idle share is inflated a little.
// Off (the default) the backend holds no profiler: one null-pointer test per op.
// Ops inside a graph capture are not timed (a replay is timed as "graph replay").
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tf::cuda {

class OpProfiler {
 public:
  // A profiler when TF_PROFILE_OPS is set to 1, else null.
  static std::unique_ptr<OpProfiler> from_env(cudaStream_t stream);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void begin_op(const char* name);
  void end_op();
  void begin_step();
  void end_step();
  // While true (graph capture) nothing is recorded.
  void set_paused(bool p) { paused_ = p; }
  // The report of the steps since the last one ("" when there were none).
  std::string report();

 private:
  OpProfiler(cudaStream_t stream, int every) : stream_(stream), every_(every) {}
  cudaEvent_t event();
  void collect();  // waits for the recorded events and adds them to the totals

  struct Rec {
    const char* name;
    cudaEvent_t a, b;
  };
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };
  cudaStream_t stream_;
  int every_;
  bool paused_ = false;
  int depth_ = 0;
  bool in_step_ = false;
  std::vector<Rec> ops_, steps_;
  std::vector<cudaEvent_t> spare_;
  const char* open_name_ = nullptr;
  cudaEvent_t open_a_ = nullptr, step_a_ = nullptr;
  std::chrono::steady_clock::time_point step_t0_;
  std::map<std::string, Total> totals_;
  int64_t steps_done_ = 0, steps_since_report_ = 0;
  double host_ms_ = 0, span_ms_ = 0, op_ms_ = 0;
};

// Times one op for the profiler when there is one (RAII).
class OpScope {
 public:
  OpScope(OpProfiler* p, const char* name) : p_(p) {
    if (p_) p_->begin_op(name);
  }
  ~OpScope() {
    if (p_) p_->end_op();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpProfiler* p_;
};

}  // namespace tf::cuda
