// cuda_ops_bench: times the CUDA backend's hot ops at GLM-5.3-Flash shapes and
// prints each beside its roofline: the measured device-to-device copy bandwidth
// (HBM, bytes read + written per second) for the memory-bound ops, the measured
// cuBLAS BF16 tensor-core peak (`measured_bf16_tflops`, 8192^3 GEMM, fp32
// accumulate) for prefill GEMMs.
//
// Matmul with bf16 weights at M = 1..64 (the own small-GEMM kernel) and 128/2048
// (cuBLAS): time per call, GB/s of weight bytes, % of HBM, TFLOP/s, and one JSON
// line per case ({"bench": "matmul", ...}). Small-GEMM times come from a CUDA
// graph of many calls (kernel time, as in a graphed decode step); "eager" is the
// wall clock of ops.matmul calls (launch overhead included). Weight matrices
// rotate over copies totalling >= 512 MB so L2 (60 MB) cannot serve them.
// A sweep over the kernel's columns-per-warp choice shows what its plan picks.
// matmul_many: a layer's projections of one x, separate calls vs one call
// (cuda_matmul_many_bench.cc); --matmul-many runs only that section.
//   cuda_ops_bench [--iters N] [--matmul-many]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "cuda_matmul_many_bench.h"
#include "cuda_moe_bench.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/small_gemm.h"
#include "cuda_graph_timing.h"

namespace {

using tf::DType;
using tf::Tensor;

Tensor host_randn(const tf::Shape& shape, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// Seconds per call of fn (after 3 warm-up calls), synchronising at the end.
double time_per_call(int iters, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn(i);
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// Seconds per call of fn, wall clock: 3 warm-up calls, then enough calls for
// ~0.1 s (at least 5, at most max_iters), synchronising at the end.
double time_adaptive(int max_iters, const std::function<void(int)>& fn) {
  const double t1 = time_per_call(3, fn);
  const int iters = static_cast<int>(std::clamp(0.1 / std::max(t1, 1e-7), 5.0, static_cast<double>(max_iters)));
  return time_per_call(iters, fn);
}

using tf::bench::graph_time_per_call;

// A device bf16 tensor filled with N(0, sd) values: a 4M-element random block
// tiled over it (fast for the 1.3 GB lm_head; repeats do not matter for timing).
Tensor device_bf16_randn(tf::Ops& ops, const tf::Shape& shape, uint32_t seed, float sd) {
  Tensor t = ops.empty(shape, DType::kBF16);
  const int64_t total = t.numel(), block = std::min<int64_t>(total, int64_t{1} << 22);
  const Tensor src = ops.to_device(host_randn({block}, seed, sd).to_dtype(DType::kBF16));
  for (int64_t at = 0; at < total; at += block) {
    const int64_t len = std::min(block, total - at);
    BENCH_CUDA(cudaMemcpy(static_cast<char*>(t.raw()) + at * 2, src.raw(), static_cast<size_t>(len) * 2,
                          cudaMemcpyDeviceToDevice));
  }
  return t;
}

// cuBLAS bf16 GEMM 8192^3 (bf16 in and out, fp32 accumulate): TFLOP/s.
double measure_bf16_tflops(tf::Ops& ops) {
  const int64_t s = 8192;
  Tensor a = device_bf16_randn(ops, {s, s}, 90, 1.0f), b = device_bf16_randn(ops, {s, s}, 91, 1.0f);
  Tensor c = ops.empty({s, s}, DType::kBF16);
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&](int) {
    const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(s), int(s), int(s), &alpha, a.raw(),
                                           CUDA_R_16BF, int(s), b.raw(), CUDA_R_16BF, int(s), &beta, c.raw(),
                                           CUDA_R_16BF, int(s), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cuda_ops_bench: cublasGemmEx failed (%d)\n", int(st));
      std::exit(1);
    }
  };
  const double t = time_per_call(20, gemm);
  cublasDestroy(h);
  return 2.0 * s * s * s / t / 1e12;
}

struct MatShape {
  int64_t n, k;
};

// Matmul with bf16 weights at one [N, K]: small-GEMM rows (graph and eager) and
// cuBLAS rows (eager), a table and one JSON line per M.
void bench_matmul_bf16(tf::Ops& ops, cudaStream_t stream, int sms, double hbm, int iters, MatShape sh) {
  const int64_t n = sh.n, k = sh.k;
  const double wbytes = 2.0 * n * k;
  const int copies = static_cast<int>(std::clamp(std::ceil(512e6 / wbytes), 1.0, 8.0));
  std::vector<Tensor> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(device_bf16_randn(ops, {n, k}, 10 + i, 0.02f));
  std::printf("matmul bf16 weights N=%lld K=%lld (%.1f MB, %d copies)\n", static_cast<long long>(n),
              static_cast<long long>(k), wbytes / 1e6, copies);
  std::printf("  %5s %6s %12s %12s %12s %7s %8s\n", "M", "plan", "us (graph)", "us (eager)", "weight GB/s", "%HBM",
              "TFLOP/s");
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 2048}) {
    if (m == 2048 && n > 16384) continue;  // lm_head prefill is chunked elsewhere; keeps the run short
    Tensor x = ops.to_device(host_randn({m, k}, 3));
    Tensor out = ops.empty({m, n});
    const double t_eager = time_adaptive(iters, [&](int i) { ops.matmul(out, x, ws[i % copies]); });
    const bool small = m <= tf::cuda::kSmallGemmMaxRows;
    double t = t_eager, t_graph = 0;
    std::string plan = "cublas";
    if (small) {
      const tf::cuda::SmallGemmPlan p = tf::cuda::small_gemm_plan(m, n, 1, sms);
      plan = std::to_string(p.rows_per_warp) + "x" + std::to_string(p.cols_per_warp);
      tf::cuda::SmallGemmArgs a;
      a.out = out.data<float>();
      a.ldo = n;
      a.x = x.data<float>();
      a.ldx = k;
      a.w_dtype = DType::kBF16;
      a.m = m;
      a.n = n;
      a.k = k;
      t_graph = graph_time_per_call(stream, 4 * copies, [&](int i) {
        a.w = ws[i % copies].raw();
        tf::cuda::small_gemm(stream, a);
      });
      t = t_graph;
    }
    const double gbs = wbytes / t / 1e9, pct = 100.0 * wbytes / t / hbm, tflops = 2.0 * m * n * k / t / 1e12;
    std::printf("  %5lld %6s %12.2f %12.2f %12.0f %6.1f%% %8.2f\n", static_cast<long long>(m), plan.c_str(),
                t_graph * 1e6, t_eager * 1e6, gbs, pct, tflops);
    std::printf("{\"bench\": \"matmul\", \"w\": \"bf16\", \"n\": %lld, \"k\": %lld, \"m\": %lld, \"path\": \"%s\", "
                "\"plan\": \"%s\", \"us\": %.3f, \"us_graph\": %.3f, \"us_eager\": %.3f, \"weight_gbs\": %.1f, "
                "\"pct_hbm\": %.2f, \"tflops\": %.3f}\n",
                static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(m),
                small ? "small_gemm" : "cublas", plan.c_str(), t * 1e6, t_graph * 1e6, t_eager * 1e6, gbs, pct,
                tflops);
  }
  std::printf("\n");
}

// The small-GEMM kernel at every columns-per-warp choice ("*": what its plan picks).
void sweep_small_gemm(tf::Ops& ops, cudaStream_t stream, int sms, double hbm, MatShape sh, DType wdt) {
  const int64_t n = sh.n, k = sh.k;
  const double wbytes = static_cast<double>(tf::dtype_size(wdt)) * n * k;
  const int copies = static_cast<int>(std::clamp(std::ceil(512e6 / wbytes), 1.0, 8.0));
  std::vector<Tensor> ws;
  for (int i = 0; i < copies; ++i) {
    Tensor w = device_bf16_randn(ops, {n, k}, 40 + i, 0.02f);
    if (wdt == DType::kF32) {
      w = ops.to_device(ops.to_host(w).to_f32());
    }
    ws.push_back(w);
  }
  std::printf("small_gemm sweep, %s weights N=%lld K=%lld: %% of HBM per columns-per-warp (* = plan)\n",
              tf::dtype_name(wdt), static_cast<long long>(n), static_cast<long long>(k));
  for (int64_t m : {1, 2, 4, 8, 16, 32, 64}) {
    Tensor x = ops.to_device(host_randn({m, k}, 4));
    Tensor out = ops.empty({m, n});
    const int chosen = tf::cuda::small_gemm_plan(m, n, 1, sms).cols_per_warp;
    std::printf("  M=%-3lld", static_cast<long long>(m));
    std::vector<std::string> json;
    for (int nc : {1, 2, 4, 8}) {
      tf::cuda::SmallGemmArgs a;
      a.out = out.data<float>();
      a.ldo = n;
      a.x = x.data<float>();
      a.ldx = k;
      a.w_dtype = wdt;
      a.m = m;
      a.n = n;
      a.k = k;
      const double t = graph_time_per_call(stream, 4 * copies, [&](int i) {
        a.w = ws[i % copies].raw();
        tf::cuda::small_gemm(stream, a, nc);
      });
      const double pct = 100.0 * wbytes / t / hbm;
      std::printf("  nc=%d %8.2f us %5.1f%%%s", nc, t * 1e6, pct, nc == chosen ? "*" : " ");
      char line[256];
      std::snprintf(line, sizeof line,
                    "{\"bench\": \"small_gemm_sweep\", \"w\": \"%s\", \"n\": %lld, \"k\": %lld, \"m\": %lld, "
                    "\"cols_per_warp\": %d, \"chosen\": %s, \"us\": %.3f, \"pct_hbm\": %.2f}",
                    tf::dtype_name(wdt), static_cast<long long>(n), static_cast<long long>(k),
                    static_cast<long long>(m), nc, nc == chosen ? "true" : "false", t * 1e6, pct);
      json.emplace_back(line);
    }
    std::printf("\n");
    for (const std::string& j : json) std::printf("%s\n", j.c_str());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  bool only_many = false;  // --matmul-many: the HBM copy and the matmul_many section only
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--matmul-many") == 0) only_many = true;
  }
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t stream = nullptr;
  // Non-blocking: capturing it into a graph must not involve the legacy stream.
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Roofline: device-to-device copy of 1 GiB (bytes read + written per second).
  const size_t copy_bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, copy_bytes));
  BENCH_CUDA(cudaMalloc(&b, copy_bytes));
  const double t_copy = time_per_call(10, [&](int) { cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double hbm = 2.0 * copy_bytes / t_copy;
  cudaFree(a);
  cudaFree(b);
  std::printf("measured HBM bandwidth (D2D copy): %.0f GB/s\n", hbm / 1e9);
  std::printf("{\"bench\": \"hbm_copy\", \"gbs\": %.1f}\n", hbm / 1e9);
  // One layer's projections of a shared x: separate calls vs matmul_many (cuda_matmul_many_bench.cc).
  try {
    const bool many_ok = tf::bench::bench_matmul_many(ops, hbm);
    if (only_many) return many_ok ? 0 : 1;
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_ops_bench (matmul_many): %s\n", e.status().to_string().c_str());
    return 1;
  }
  const double bf16_tflops = measure_bf16_tflops(ops);
  std::printf("measured_bf16_tflops: %.1f (cuBLAS bf16 GEMM 8192^3, fp32 accumulate)\n", bf16_tflops);
  std::printf("{\"bench\": \"cublas_bf16_gemm\", \"size\": 8192, \"measured_bf16_tflops\": %.1f}\n\n", bf16_tflops);

  try {
    const int sms = prop.multiProcessorCount;
    for (MatShape sh : {MatShape{8192, 4096}, {4096, 8192}, {12288, 4096}, {4096, 12288}, {2048, 4096}, {4096, 2048},
                        {154880, 4096}})
      bench_matmul_bf16(ops, stream, sms, hbm, iters, sh);
    sweep_small_gemm(ops, stream, sms, hbm, {8192, 4096}, DType::kBF16);
    sweep_small_gemm(ops, stream, sms, hbm, {2048, 4096}, DType::kBF16);
    sweep_small_gemm(ops, stream, sms, hbm, {4096, 4096}, DType::kF32);
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", e.status().to_string().c_str());
    return 1;
  }

  // Routed experts grouped on the device (cuda_moe_bench.cc).
  try {
    if (!tf::bench::bench_moe_experts(ops, hbm, iters)) std::printf("moe_experts: RESULT CHECK FAILED\n");
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_ops_bench (moe_experts): %s\n", e.status().to_string().c_str());
    return 1;
  }

  // Decode-shaped attention-side ops (one token; heads as at TP=1).
  {
    const int64_t heads = 64, r = 512, w = 2048, tokens = 8192, page = 64, pages = tokens / page;
    std::vector<int32_t> table(pages);
    for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
    Tensor ttable = Tensor::empty({pages}, DType::kI32);
    std::memcpy(ttable.raw(), table.data(), pages * 4);
    Tensor dtable = ops.to_device(ttable);
    Tensor cache = ops.zeros({pages * page * r}, DType::kBF16);
    tf::LatentPagesView view{cache.raw(), nullptr, DType::kBF16, page, r, page * r, dtable.data<int32_t>(), tokens};
    Tensor lat = ops.to_device(host_randn({tokens, r}, 5));
    ops.latent_store(view, cache.raw(), nullptr, lat, 0);
    std::vector<int32_t> idx(w);
    std::mt19937 rng(6);
    for (auto& i : idx) i = static_cast<int32_t>(rng() % tokens);
    Tensor tidx = Tensor::empty({1, w}, DType::kI32);
    std::memcpy(tidx.raw(), idx.data(), w * 4);
    Tensor didx = ops.to_device(tidx);
    Tensor q = ops.to_device(host_randn({1, heads, r}, 7, 0.1f));
    Tensor out = ops.empty({1, heads, r});
    const double t = time_per_call(iters, [&](int) { ops.mla_sparse_attention(out, q, view, didx, 0.04f); });
    const double bytes = static_cast<double>(w) * r * 2;
    std::printf("mla_sparse_attention T=1 H=%lld R=%lld W=%lld bf16: %.1f us (%.0f GB/s of unique latents, %.1f%% HBM)\n",
                static_cast<long long>(heads), static_cast<long long>(r), static_cast<long long>(w), t * 1e6,
                bytes / t / 1e9, 100.0 * bytes / t / hbm);
  }
  {
    const int64_t h = 64, dk = 128, dv = 128;
    Tensor q = ops.to_device(host_randn({1, h, dk}, 8)), k = ops.to_device(host_randn({1, h, dk}, 9));
    Tensor v = ops.to_device(host_randn({1, h, dv}, 10)), g = ops.zeros({1, h, dk});
    Tensor beta = ops.zeros({1, h}), st = ops.zeros({h, dk, dv}), out = ops.empty({1, h, dv});
    const double t = time_per_call(iters, [&](int) { ops.kda_recurrent(out, q, k, v, g, beta, st); });
    const double bytes = 2.0 * h * dk * dv * 4;
    std::printf("kda_recurrent T=1 H=%lld Dk=Dv=%lld: %.1f us (state read+write %.0f GB/s, %.1f%% HBM)\n",
                static_cast<long long>(h), static_cast<long long>(dk), t * 1e6, bytes / t / 1e9,
                100.0 * bytes / t / hbm);
  }
  {
    Tensor logits = ops.to_device(host_randn({1, 288}, 11)), bias = ops.zeros({288});
    Tensor wts = ops.empty({1, 8}), ids = ops.empty({1, 8}, DType::kI32);
    const double t = time_per_call(iters, [&](int) { ops.moe_route(wts, ids, logits, bias, 1, 1, 8, true, 2.5f); });
    std::printf("moe_route T=1 E=288 k=8: %.1f us\n", t * 1e6);
    Tensor x = ops.to_device(host_randn({1, 4096}, 12)), wn = ops.to_device(host_randn({4096}, 13));
    Tensor y = ops.empty({1, 4096});
    const double t2 = time_per_call(iters, [&](int) { ops.rms_norm(y, x, wn, 1e-6f); });
    std::printf("rms_norm T=1 D=4096: %.1f us\n", t2 * 1e6);
  }
  return 0;
}
