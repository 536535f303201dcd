// cuda_ops_bench: times the CUDA backend's hot ops at GLM-5.3-Flash shapes and
// prints each beside its roofline (weight/cache bytes over the measured
// device-to-device copy bandwidth; GEMM FLOPs for the cuBLAS path).
// Eager launches, wall clock over many calls after a warm-up: launch overhead
// is included, as it is in an un-graphed decode step.
//   cuda_ops_bench [--iters N]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/cuda_ops.h"

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

}  // namespace

int main(int argc, char** argv) {
  int iters = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::fprintf(stderr, "cuda_ops_bench: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // Roofline: device-to-device copy of 2 GiB (bytes read + written per second).
  const size_t copy_bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cudaMalloc(&a, copy_bytes);
  cudaMalloc(&b, copy_bytes);
  const double t_copy = time_per_call(10, [&](int) { cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double hbm = 2.0 * copy_bytes / t_copy;
  cudaFree(a);
  cudaFree(b);
  std::printf("measured HBM bandwidth (D2D copy): %.0f GB/s\n\n", hbm / 1e9);

  // Matmul with bf16 weights; 8 distinct weight matrices in turn so L2 (60 MB) cannot hold them.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {12288, 4096}, {4096, 12288}}) {
    std::vector<Tensor> ws;
    for (int i = 0; i < 8; ++i) ws.push_back(ops.to_device(host_randn({n, k}, 10 + i, 0.02f).to_dtype(DType::kBF16)));
    std::printf("matmul bf16 weights N=%lld K=%lld (%.0f MB)\n", static_cast<long long>(n),
                static_cast<long long>(k), n * k * 2 / 1e6);
    std::printf("  %6s %10s %10s %8s %10s\n", "M", "us/call", "GB/s", "%HBM", "TFLOP/s");
    for (int64_t m : {1, 2, 4, 8, 16, 32, 64, 128, 512, 2048}) {
      Tensor x = ops.to_device(host_randn({m, k}, 3));
      Tensor out = ops.empty({m, n});
      const double t = time_per_call(iters, [&](int i) { ops.matmul(out, x, ws[i % 8]); });
      const double bytes = n * k * 2.0 + m * k * 4.0 + m * n * 4.0;
      std::printf("  %6lld %10.1f %10.0f %7.1f%% %10.1f\n", static_cast<long long>(m), t * 1e6, bytes / t / 1e9,
                  100.0 * bytes / t / hbm, 2.0 * m * n * k / t / 1e12);
    }
    std::printf("\n");
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
