// moe_experts timings for cuda_ops_bench (see cuda_moe_bench.h).
//
// Per (E, T): the op's wall-clock time per call (eager launches, 3 warm-up calls),
// the weight bytes of the experts the routing activates over that time (GB/s and %
// of the measured HBM copy bandwidth: every active expert's gate_up and down must be
// read once), and the time of the path the model used before (routing table to the
// host, tokens grouped there, then gather_rows, matmul, swiglu, matmul and
// scatter_add_rows per active expert). Both results are compared (max error relative
// to the largest value): a mismatch prints FAIL.
#include "cuda_moe_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/tensor.h"

namespace tf::bench {
namespace {

Tensor randn_host(const Shape& shape, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// A device bf16 tensor: a random 4M-element block tiled over it (fast for GBs).
Tensor bf16_device(Ops& ops, const Shape& shape, uint32_t seed, float sd) {
  Tensor t = ops.empty(shape, DType::kBF16);
  const int64_t total = t.numel(), block = std::min<int64_t>(total, int64_t{1} << 22);
  const Tensor src = ops.to_device(randn_host({block}, seed, sd).to_dtype(DType::kBF16));
  for (int64_t at = 0; at < total; at += block)
    cudaMemcpy(static_cast<char*>(t.raw()) + at * 2, src.raw(), static_cast<size_t>(std::min(block, total - at)) * 2,
               cudaMemcpyDeviceToDevice);
  return t;
}

double seconds_per_call(int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// The per-expert path (what Glm5Model::moe_forward ran before moe_experts).
void per_expert_path(Ops& ops, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& wts,
                     const Tensor& gate_up, const Tensor& down, float limit) {
  const int64_t t = x.size(0), h = x.size(1), k = ids.size(1), e = gate_up.size(0);
  const int64_t two_i = gate_up.size(1), idim = two_i / 2;
  const Tensor ids_h = ops.to_host(ids), wts_h = ops.to_host(wts);
  std::vector<std::vector<int32_t>> tok(static_cast<size_t>(e));
  std::vector<std::vector<float>> sc(static_cast<size_t>(e));
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = ids_h.data<int32_t>()[r * k + j];
      tok[id].push_back(static_cast<int32_t>(r));
      sc[id].push_back(wts_h.data<float>()[r * k + j]);
    }
  Tensor zeros = ops.zeros({t, h});
  out = zeros;
  for (int64_t ex = 0; ex < e; ++ex) {
    if (tok[ex].empty()) continue;
    const int64_t n = static_cast<int64_t>(tok[ex].size());
    const Tensor idx = ops.to_device(Tensor::view_of(tok[ex].data(), {n}, DType::kI32));
    const Tensor s = ops.to_device(Tensor::view_of(sc[ex].data(), {n}, DType::kF32));
    Tensor xe = ops.empty({n, h}), gu = ops.empty({n, two_i}), a = ops.empty({n, idim}), y = ops.empty({n, h});
    ops.gather_rows(xe, x, idx);
    ops.matmul(gu, xe, gate_up.select(0, ex));
    ops.swiglu(a, gu, limit);
    ops.matmul(y, a, down.select(0, ex));
    ops.scatter_add_rows(out, y, idx, s);
  }
}

}  // namespace

bool bench_moe_experts(Ops& ops, double hbm, int iters) {
  const int64_t h = 4096, idim = 2048, k = 8;
  const float limit = 10.0f;
  bool ok = true;
  std::printf("\nmoe_experts bf16 H=%lld I=%lld k=%lld (expert = %.1f MB of gate_up + down)\n",
              static_cast<long long>(h), static_cast<long long>(idim), static_cast<long long>(k),
              3.0 * idim * h * 2 / 1e6);
  std::printf("  %4s %4s %6s %10s %10s %8s %12s %8s %12s\n", "E", "T", "active", "us/call", "GB/s", "%HBM",
              "us per-expert", "speedup", "max rel err");
  for (int64_t e : {8, 32}) {
    const Tensor gate_up = bf16_device(ops, {e, 2 * idim, h}, 301, 0.02f);
    const Tensor down = bf16_device(ops, {e, h, idim}, 302, 0.02f);
    for (int64_t t : {1, 4, 16, 64}) {
      // Routing: k distinct experts per token, ascending, with softmax-like weights.
      std::mt19937 rng(static_cast<uint32_t>(303 + t + e));
      Tensor ids_h = Tensor::empty({t, k}, DType::kI32);
      std::vector<int32_t> pool(static_cast<size_t>(e));
      std::set<int32_t> active;
      for (int64_t r = 0; r < t; ++r) {
        std::iota(pool.begin(), pool.end(), 0);
        std::shuffle(pool.begin(), pool.end(), rng);
        std::sort(pool.begin(), pool.begin() + k);
        std::copy(pool.begin(), pool.begin() + k, ids_h.data<int32_t>() + r * k);
        active.insert(pool.begin(), pool.begin() + k);
      }
      const Tensor ids = ops.to_device(ids_h);
      const Tensor wts = ops.to_device(randn_host({t, k}, 304, 0.3f));
      const Tensor x = ops.to_device(randn_host({t, h}, 305, 1.0f));
      Tensor out = ops.empty({t, h}), ref;
      const double t_new = seconds_per_call(iters, [&] { ops.moe_experts(out, x, ids, wts, gate_up, down, limit); });
      const double t_old = seconds_per_call(std::max(5, iters / 4),
                                            [&] { per_expert_path(ops, ref, x, ids, wts, gate_up, down, limit); });
      const std::vector<float> a = ops.to_host(ref).to_vector(), b = ops.to_host(out).to_vector();
      double scale = 1e-30, worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
        if (!std::isfinite(b[i])) worst = INFINITY;
      }
      const double err = worst / scale;
      const bool good = err <= 1e-4;
      ok = ok && good;
      const double bytes = static_cast<double>(active.size()) * 3.0 * idim * h * 2;
      std::printf("  %4lld %4lld %6zu %10.1f %10.0f %7.1f%% %12.1f %7.2fx %12.2g %s\n", static_cast<long long>(e),
                  static_cast<long long>(t), active.size(), t_new * 1e6, bytes / t_new / 1e9,
                  100.0 * bytes / t_new / hbm, t_old * 1e6, t_old / t_new, err, good ? "ok" : "FAIL");
      std::printf("{\"bench\": \"moe_experts\", \"E\": %lld, \"T\": %lld, \"k\": %lld, \"active\": %zu, \"us\": %.2f, "
                  "\"us_per_expert_path\": %.2f, \"weight_gbs\": %.1f, \"pct_hbm\": %.1f, \"max_rel_err\": %.3g}\n",
                  static_cast<long long>(e), static_cast<long long>(t), static_cast<long long>(k), active.size(),
                  t_new * 1e6, t_old * 1e6, bytes / t_new / 1e9, 100.0 * bytes / t_new / hbm, err);
    }
  }
  return ok;
}

}  // namespace tf::bench
