// GPU time per call of work captured into one CUDA graph and replayed, shared by the
// CUDA benchmarks: replaying a graph leaves no launch gaps between the calls, so the
// events measure the kernels themselves. Header-only (the benches are single files).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

// Ends the benchmark with the failing call and CUDA's message (a bench has no caller
// that could recover).
#define BENCH_CUDA(call)                                                                            \
  do {                                                                                              \
    const cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s: %s failed: %s\n", __FILE__, #call, cudaGetErrorString(e_));        \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace tf::bench {

// How many replays are timed: exactly `fixed_reps` when it is > 0, else as many as fill
// about `target_ms` judged by one probe replay (1..max_reps).
struct ReplayPlan {
  double target_ms = 100.0;
  int max_reps = 50;
  int fixed_reps = 0;
  unsigned instantiate_flags = 0;  // cudaGraphInstantiate flags (e.g. keep node priorities)
};

// Seconds per repetition of `body` (work enqueued on `stream`), by events around `reps` of them.
inline double event_seconds(cudaStream_t stream, int reps, const std::function<void()>& body) {
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  BENCH_CUDA(cudaEventRecord(t0, stream));
  for (int r = 0; r < reps; ++r) body();
  BENCH_CUDA(cudaEventRecord(t1, stream));
  BENCH_CUDA(cudaEventSynchronize(t1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms / 1e3 / reps;
}

// Instantiates `graph` (which holds `calls` calls), replays it once to warm up, times the
// planned replays on `stream` and returns seconds per call. Destroys the graph.
inline double replay_seconds_per_call(cudaStream_t stream, cudaGraph_t graph, int calls, ReplayPlan plan = {}) {
  cudaGraphExec_t exec = nullptr;
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, plan.instantiate_flags));
  auto replay = [&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); };
  replay();  // warm-up
  int reps = plan.fixed_reps;
  if (reps <= 0) {
    const double probe_ms = event_seconds(stream, 1, replay) * 1e3;
    reps = static_cast<int>(std::clamp(plan.target_ms / std::max(probe_ms, 1e-3), 1.0, double(plan.max_reps)));
  }
  const double per_replay = event_seconds(stream, reps, replay);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return per_replay / calls;
}

// Seconds per call of `calls` enqueues captured into one graph on `stream` and replayed.
// Waits for the whole device first (inputs uploaded on another stream must be ready).
inline double graph_time_per_call(cudaStream_t stream, int calls, const std::function<void(int)>& enqueue,
                                  ReplayPlan plan = {}) {
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaDeviceSynchronize());
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) enqueue(i);
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  return replay_seconds_per_call(stream, graph, calls, plan);
}

}  // namespace tf::bench
