// cuda_kda_lowrank_bench: the KDA low-rank ups of one GLM-5.3-Flash decode layer
// (issue #8): g = kda_gate(fa · f_b^T), gate = ga · g_b^T, beta = sigmoid(beta_logits)
// with f_b, g_b bf16 [8192, 128] (2 MB each), at 1 and 8 rows, graph-replayed:
//   before        the sequence the model ran (matmul, kda_gate, sigmoid, matmul: 4 launches;
//                 legacy_small_ops() forces Ops::kda_lowrank_gates' default)
//   after         the fused op (one launch, programmatic dependent launch on)
//   after no PDL  the fused op launched plainly
// Every call reads its own copy of f_b and g_b (>= 256 MB in all, more than L2), as in
// decode; us per call, weight GB/s and % of the measured HBM copy bandwidth.
// Self-checking: the fused outputs equal the sequence's bit for bit (with and without
// PDL); a mismatch prints "[kda-lowrank] FAIL" and the exit code is 1.
//   cuda_kda_lowrank_bench
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_kda_lowrank.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/legacy_small_ops.h"
#include "cuda_graph_timing.h"

namespace {

using tf::DType;
using tf::Tensor;

int g_failures = 0;

Tensor host_randn(const tf::Shape& shape, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::printf("[kda-lowrank] FAIL %s\n", what.c_str());
}

double measure_hbm() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, bytes));
  BENCH_CUDA(cudaMalloc(&b, bytes));
  BENCH_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < 5; ++i) BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  BENCH_CUDA(cudaEventRecord(e1));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 2.0 * 5 * static_cast<double>(bytes) / (ms / 1e3);
}

struct Layer {
  Tensor f_b, g_b;
};

void bench_rows(tf::Ops& ops, cudaStream_t stream, double hbm, const std::vector<Layer>& layers,
                const Tensor& dt_bias, const Tensor& a_log, int64_t rows) {
  const int64_t heads = 64, dk = 128, c = heads * dk, r = 128;
  const Tensor fa = ops.to_device(host_randn({rows, r}, 40 + static_cast<uint32_t>(rows)));
  const Tensor ga = ops.to_device(host_randn({rows, r}, 41 + static_cast<uint32_t>(rows)));
  const Tensor logits = ops.to_device(host_randn({rows, heads}, 42 + static_cast<uint32_t>(rows), 2.0f));
  Tensor g = ops.empty({rows, c}), gate = ops.empty({rows, c}), beta = ops.empty({rows, heads});
  const int n = static_cast<int>(layers.size());
  auto call = [&](int i) {
    const Layer& l = layers[static_cast<size_t>(i % n)];
    ops.kda_lowrank_gates(g, gate, beta, fa, ga, logits, l.f_b, l.g_b, dt_bias, a_log, true, -5.0f);
  };
  auto snapshot = [&]() { return std::vector<Tensor>{ops.to_host(g), ops.to_host(gate), ops.to_host(beta)}; };
  auto compare = [&](const std::vector<Tensor>& ref, const std::vector<Tensor>& got, const char* what) {
    const char* names[3] = {"g", "gate", "beta"};
    for (int i = 0; i < 3; ++i)
      check(same_bits(ref[static_cast<size_t>(i)], got[static_cast<size_t>(i)]),
            std::string(what) + " rows=" + std::to_string(rows) + ": " + names[i] + " bits differ from the sequence");
  };
  const int calls = 2 * n;
  // Eager first in each mode: the checks, and the allocator's blocks exist before capture.
  tf::cuda::legacy_small_ops() = true;
  call(0);
  const auto ref = snapshot();
  const double before = tf::bench::graph_time_per_call(stream, calls, call, {30.0, 20, 0});
  tf::cuda::legacy_small_ops() = false;
  tf::cuda::kda_lowrank_pdl() = false;
  call(0);
  compare(ref, snapshot(), "fused (no PDL)");
  const double plain = tf::bench::graph_time_per_call(stream, calls, call, {30.0, 20, 0});
  tf::cuda::kda_lowrank_pdl() = true;
  call(0);
  compare(ref, snapshot(), "fused (PDL)");
  const double after = tf::bench::graph_time_per_call(stream, calls, call, {30.0, 20, 0});
  const double bytes = 2.0 * c * r * 2;  // f_b + g_b, bf16
  auto line = [&](const char* mode, double s) {
    std::printf("[kda-lowrank] rows=%lld %-13s %7.2f us  %6.0f GB/s  %5.1f%% HBM\n", static_cast<long long>(rows),
                mode, s * 1e6, bytes / s / 1e9, 100.0 * bytes / s / hbm);
  };
  line("before (4 ops)", before);
  line("after no PDL", plain);
  line("after", after);
  std::printf("[kda-lowrank] rows=%lld speedup x%.2f (%.2f us saved per KDA layer, %.0f us per token over 34 layers)\n",
              static_cast<long long>(rows), before / after, (before - after) * 1e6, (before - after) * 1e6 * 34);
  std::printf(
      "{\"bench\": \"kda_lowrank\", \"rows\": %lld, \"us_before\": %.3f, \"us_after\": %.3f, \"us_after_no_pdl\": "
      "%.3f, \"pct_hbm\": %.2f}\n",
      static_cast<long long>(rows), before * 1e6, after * 1e6, plain * 1e6, 100.0 * bytes / after / hbm);
}

}  // namespace

int main() {
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::fprintf(stderr, "cuda_kda_lowrank_bench: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaStream_t stream = tf::cuda_ops_stream(ops);
  const double hbm = measure_hbm();
  std::printf("[kda-lowrank] measured HBM bandwidth (D2D copy): %.0f GB/s\n", hbm / 1e9);
  try {
    const int64_t heads = 64, c = heads * 128, r = 128;
    // 64 copies of the layer's two matrices: 256 MB, read from HBM at every call.
    std::vector<Layer> layers;
    const Tensor fb = host_randn({c, r}, 1, 1.0f / 11.0f).to_dtype(DType::kBF16);
    const Tensor gb = host_randn({c, r}, 2, 1.0f / 11.0f).to_dtype(DType::kBF16);
    for (int i = 0; i < 64; ++i) layers.push_back({ops.to_device(fb), ops.to_device(gb)});
    const Tensor dt_bias = ops.to_device(host_randn({c}, 3, 0.5f));
    const Tensor a_log = ops.to_device(host_randn({heads}, 4, 0.5f));
    for (int64_t rows : {1, 8, 64}) bench_rows(ops, stream, hbm, layers, dt_bias, a_log, rows);
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_kda_lowrank_bench: %s\n", e.status().to_string().c_str());
    return 1;
  }
  std::printf("[kda-lowrank] %s (%d check failures)\n", g_failures == 0 ? "ALL CHECKS PASSED" : "CHECKS FAILED",
              g_failures);
  return g_failures == 0 ? 0 : 1;
}
