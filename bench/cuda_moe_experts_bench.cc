// moe_experts on the GPU at GLM-5.3-Flash expert shapes (H 4096, I 2048, top-8, bf16
// weights), beside the HBM roofline of the active experts' weights and, for prefill,
// the BF16 tensor-core FLOPs. Self-checking; exits 1 on a failed check.
//
// Sections ("[moe-bench]" lines, one JSON line per row for the results table):
//   decode: E 8 and 32 stored experts, T 1..64 tokens, the model's EXACT_ROWS = 8
//     (T <= 8: row-independent f32 path; above: tensor-core tiles). Each call is timed
//     inside a CUDA graph of 20 calls (which also proves the call is capturable: no host
//     sync) and checked against the f32 path (exact_rows 64: bit-equal up to 8 tokens,
//     bf16 tolerance above). us/call, GB/s of expert weights, % of measured HBM, and
//     T=16 / T=1 (target <= 1.3x).
//   plans: the f32 path's launch plans at T 1..8 (cuda_moe.h): time each, check every
//     plan gives the default plan's bits.
//   prefill: E 8 and 288 (all of GLM-5.3-Flash's experts), T 1024 and 8192, eager
//     calls; TFLOP/s (2 * pairs * 3 * H * I) and % of HBM; three tokens checked against
//     a host f64 reference.
//   fp8 (also alone: --fp8): moe_experts_fp8, the official release's FP8 experts (e4m3,
//     a scale per 128x128 block), E 8 and 288, T 1..64, graphs of 20 calls; % of HBM of
//     the active experts' FP8 bytes; at E 8 checked against moe_experts' f32 path on the
//     same weights dequantized (max rel err <= 1e-5).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_moe.h"
#include "kernels/cuda/cuda_moe_fp8.h"
#include "kernels/cuda/device_probe.h"
#include "cuda_graph_timing.h"

namespace {

using tf::DType;
using tf::Tensor;
using tf::cuda::CudaContext;

constexpr int64_t kH = 4096, kI = 2048, kK = 8;
constexpr float kLimit = 10.0f;
constexpr int64_t kBlock = int64_t{1} << 22;  // weights: this many random bf16 values, tiled

CudaContext g_ctx;
std::vector<uint16_t> g_block;  // the tiled weight block (host copy, for the reference)
bool g_ok = true;

Tensor dev_alloc(const tf::Shape& shape, DType dtype) {
  const int64_t n = tf::shape_numel(shape) * static_cast<int64_t>(tf::dtype_size(dtype));
  auto s = g_ctx.alloc->allocate(static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (!s) {
    std::fprintf(stderr, "cuda_moe_experts_bench: %s\n", s.status().to_string().c_str());
    std::exit(1);
  }
  return Tensor::on_storage(*s, 0, shape, dtype);
}

Tensor dev_copy(const Tensor& host) {
  Tensor d = dev_alloc(host.shape(), host.dtype());
  BENCH_CUDA(cudaMemcpy(d.raw(), host.raw(), static_cast<size_t>(host.nbytes()), cudaMemcpyHostToDevice));
  return d;
}

Tensor host_of(const Tensor& d) {
  Tensor h = Tensor::empty(d.shape(), d.dtype());
  BENCH_CUDA(cudaStreamSynchronize(g_ctx.stream));
  BENCH_CUDA(cudaMemcpy(h.raw(), d.raw(), static_cast<size_t>(d.nbytes()), cudaMemcpyDeviceToHost));
  return h;
}

// Expert weights [e, rows, cols] bf16: g_block tiled (element i = g_block[i % kBlock]).
Tensor weights(int64_t e, int64_t rows, int64_t cols) {
  Tensor t = dev_alloc({e, rows, cols}, DType::kBF16);
  Tensor src = dev_alloc({kBlock}, DType::kBF16);
  BENCH_CUDA(cudaMemcpy(src.raw(), g_block.data(), kBlock * 2, cudaMemcpyHostToDevice));
  const int64_t total = t.numel();
  for (int64_t at = 0; at < total; at += kBlock)
    BENCH_CUDA(cudaMemcpy(static_cast<char*>(t.raw()) + at * 2, src.raw(),
                        static_cast<size_t>(std::min(kBlock, total - at)) * 2, cudaMemcpyDeviceToDevice));
  return t;
}

Tensor randn_host(const tf::Shape& shape, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// k distinct experts per token, ascending (as moe_route gives them); the set of active experts.
Tensor routing(int64_t t, int64_t e, uint32_t seed, std::set<int32_t>& active) {
  std::mt19937 rng(seed);
  Tensor ids = Tensor::empty({t, kK}, DType::kI32);
  std::vector<int32_t> pool(static_cast<size_t>(e));
  for (int64_t r = 0; r < t; ++r) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t j = 0; j < kK; ++j) std::swap(pool[j], pool[j + rng() % (e - j)]);
    std::sort(pool.begin(), pool.begin() + kK);
    std::copy(pool.begin(), pool.begin() + kK, ids.data<int32_t>() + r * kK);
    active.insert(pool.begin(), pool.begin() + kK);
  }
  return ids;
}

void call(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& w, const Tensor& gu, const Tensor& dn,
          const tf::cuda::MoeGemvPlan* plan = nullptr) {
  if (plan) tf::cuda::moe_experts_with_plan(g_ctx, out, x, ids, w, gu, dn, kLimit, *plan);
  else tf::cuda::moe_experts(g_ctx, out, x, ids, w, gu, dn, kLimit);
}

// Seconds per call of fn captured `calls` times into one graph (after 3 eager warm-ups);
// a negative result: the capture failed (fn synchronised with the host).
double graph_seconds(int calls, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  BENCH_CUDA(cudaStreamSynchronize(g_ctx.stream));
  cudaGraph_t graph = nullptr;
  BENCH_CUDA(cudaStreamBeginCapture(g_ctx.stream, cudaStreamCaptureModeThreadLocal));
  g_ctx.capturing = true;
  bool threw = false;
  try {
    for (int i = 0; i < calls; ++i) fn();
  } catch (const tf::StatusError&) {
    threw = true;
  }
  g_ctx.capturing = false;
  const cudaError_t end = cudaStreamEndCapture(g_ctx.stream, &graph);
  if (threw || end != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return -1.0;
  }
  return tf::bench::replay_seconds_per_call(g_ctx.stream, graph, calls, {0.0, 0, 4});
}

double eager_seconds(int iters, const std::function<void()>& fn) {
  fn();
  BENCH_CUDA(cudaStreamSynchronize(g_ctx.stream));
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  BENCH_CUDA(cudaEventRecord(t0, g_ctx.stream));
  for (int i = 0; i < iters; ++i) fn();
  BENCH_CUDA(cudaEventRecord(t1, g_ctx.stream));
  BENCH_CUDA(cudaEventSynchronize(t1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms / 1e3 / iters;
}

// Largest |a - b| relative to the largest |a|; infinite on a non-finite b.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    if (!std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ha = host_of(a), hb = host_of(b);
  return std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())) == 0;
}

double expert_bytes(size_t active) { return static_cast<double>(active) * 3.0 * kI * kH * 2; }

void decode_section(double hbm_gbs) {
  std::printf("\n[moe-bench] decode: bf16 H=%lld I=%lld k=%lld, EXACT_ROWS=8, CUDA graph of 20 calls per figure\n",
              static_cast<long long>(kH), static_cast<long long>(kI), static_cast<long long>(kK));
  std::printf("[moe-bench] %4s %4s %6s %10s %9s %7s %8s %11s %s\n", "E", "T", "active", "us/call", "GB/s", "%HBM",
              "xT=1", "max rel err", "path");
  for (int64_t e : {8, 32}) {
    const Tensor gu = weights(e, 2 * kI, kH), dn = weights(e, kH, kI);
    double t1 = 0;
    for (int64_t t : {1, 2, 4, 8, 9, 16, 24, 32, 48, 64}) {
      std::set<int32_t> active;
      const Tensor ids = dev_copy(routing(t, e, static_cast<uint32_t>(1000 + 7 * t + e), active));
      const Tensor w = dev_copy(randn_host({t, kK}, 11, 0.3f)), x = dev_copy(randn_host({t, kH}, 12, 1.0f));
      Tensor out = dev_alloc({t, kH}, DType::kF32), ref = dev_alloc({t, kH}, DType::kF32);
      const double s = graph_seconds(20, [&] { call(out, x, ids, w, gu, dn); });
      // The reference: the f32 path (exact_rows 64).
      g_ctx.exact_rows = 64;
      call(ref, x, ids, w, gu, dn);
      g_ctx.exact_rows = 8;
      call(out, x, ids, w, gu, dn);
      const double err = rel_err(host_of(ref).to_vector(), host_of(out).to_vector());
      const bool exact = t <= 8;
      const bool good = s > 0 && (exact ? same_bits(ref, out) : err <= 2e-2);
      g_ok = g_ok && good;
      if (t == 1) t1 = s;
      const double bytes = expert_bytes(active.size());
      std::printf("[moe-bench] %4lld %4lld %6zu %10.1f %9.0f %6.1f%% %7.2fx %11.2g %s%s%s\n",
                  static_cast<long long>(e), static_cast<long long>(t), active.size(), s * 1e6, bytes / s / 1e9,
                  100.0 * bytes / s / 1e9 / hbm_gbs, s / t1, err, exact ? "f32" : "tensor-cores",
                  s > 0 ? "" : " CAPTURE-FAILED", good ? "" : " FAIL");
      std::printf("{\"bench\": \"moe_decode\", \"E\": %lld, \"T\": %lld, \"active\": %zu, \"us\": %.2f, "
                  "\"weight_gbs\": %.1f, \"pct_hbm\": %.1f, \"vs_t1\": %.3f, \"max_rel_err\": %.3g}\n",
                  static_cast<long long>(e), static_cast<long long>(t), active.size(), s * 1e6, bytes / s / 1e9,
                  100.0 * bytes / s / 1e9 / hbm_gbs, s / t1, err);
    }
  }
}

void plans_section(double hbm_gbs) {
  using tf::cuda::MoeGemvPlan;
  const std::vector<std::pair<const char*, MoeGemvPlan>> plans = {
      {"nc1 ldg", {1, 0, false}},     {"nc1 noL1", {1, 0, true}}, {"nc1 u8 noL1", {1, 8, true}},
      {"nc2 noL1", {2, 0, true}},     {"nc4 u2 noL1", {4, 2, true}}};
  std::printf("\n[moe-bench] plans of the f32 path (E=8, bits must equal the default plan's)\n");
  const int64_t e = 8;
  const Tensor gu = weights(e, 2 * kI, kH), dn = weights(e, kH, kI);
  for (int64_t t : {1, 2, 4, 8}) {
    std::set<int32_t> active;
    const Tensor ids = dev_copy(routing(t, e, static_cast<uint32_t>(2000 + t), active));
    const Tensor w = dev_copy(randn_host({t, kK}, 21, 0.3f)), x = dev_copy(randn_host({t, kH}, 22, 1.0f));
    Tensor ref = dev_alloc({t, kH}, DType::kF32), out = dev_alloc({t, kH}, DType::kF32);
    call(ref, x, ids, w, gu, dn, &plans[0].second);
    for (const auto& [name, plan] : plans) {
      const double s = graph_seconds(20, [&] { call(out, x, ids, w, gu, dn, &plan); });
      const bool good = s > 0 && same_bits(ref, out);
      g_ok = g_ok && good;
      const double bytes = expert_bytes(active.size());
      std::printf("[moe-bench] plan T=%lld %-22s %8.1f us %6.1f%% HBM %s\n", static_cast<long long>(t), name, s * 1e6,
                  100.0 * bytes / s / 1e9 / hbm_gbs, good ? "same bits" : "FAIL");
    }
  }
}

// Host f64 reference of one token's output (x rounded as given, weights from g_block).
std::vector<double> host_token(const float* x, const int32_t* ids, const float* w, int64_t h, int64_t idim) {
  std::vector<double> out(static_cast<size_t>(h), 0.0), act(static_cast<size_t>(idim));
  auto wv = [&](int64_t i) { return static_cast<double>(tf::bf16_to_float(g_block[static_cast<size_t>(i % kBlock)])); };
  for (int64_t j = 0; j < kK; ++j) {
    const int64_t e = ids[j];
    const int64_t gu0 = e * 2 * idim * h, dn0 = e * h * idim;
    for (int64_t c = 0; c < idim; ++c) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < h; ++i) {
        g += wv(gu0 + c * h + i) * x[i];
        u += wv(gu0 + (idim + c) * h + i) * x[i];
      }
      g = std::min(g, static_cast<double>(kLimit));
      u = std::clamp(u, -static_cast<double>(kLimit), static_cast<double>(kLimit));
      act[c] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t c = 0; c < h; ++c) {
      double y = 0;
      for (int64_t i = 0; i < idim; ++i) y += wv(dn0 + c * idim + i) * act[i];
      out[c] += w[j] * y;
    }
  }
  return out;
}

void prefill_section(double hbm_gbs, double tflops_peak) {
  std::printf("\n[moe-bench] prefill: tensor-core tiles vs cuBLAS grouped GEMM, eager calls\n");
  std::printf("[moe-bench] %4s %5s %6s %10s %8s %7s %8s %7s %11s %s\n", "E", "T", "active", "us/call", "TFLOP/s",
              "%peak", "GB/s", "%HBM", "max rel err", "path");
  for (int64_t e : {8, 288}) {
    const Tensor gu = weights(e, 2 * kI, kH), dn = weights(e, kH, kI);
    for (int64_t t : {1024, 8192}) {
      std::set<int32_t> active;
      const Tensor ids_h = routing(t, e, static_cast<uint32_t>(3000 + t + e), active);
      const Tensor w_h = randn_host({t, kK}, 31, 0.3f), x_h = randn_host({t, kH}, 32, 1.0f);
      const Tensor ids = dev_copy(ids_h), w = dev_copy(w_h), x = dev_copy(x_h);
      for (int path : {1, 2}) {  // the tensor-core tiles, cuBLAS grouped GEMM
        tf::cuda::MoeGemvPlan plan;
        plan.prefill = path;
        Tensor out = dev_alloc({t, kH}, DType::kF32);
        const double s = eager_seconds(t >= 8192 ? 3 : 10, [&] { call(out, x, ids, w, gu, dn, &plan); });
        const Tensor o = host_of(out);
        double err = 0;
        for (int64_t r : {int64_t{0}, t / 2, t - 1}) {
          const std::vector<double> want = host_token(x_h.data<float>() + r * kH, ids_h.data<int32_t>() + r * kK,
                                                      w_h.data<float>() + r * kK, kH, kI);
          double scale = 1e-30, worst = 0;
          for (int64_t c = 0; c < kH; ++c) {
            scale = std::max(scale, std::fabs(want[c]));
            const double got = o.data<float>()[r * kH + c];
            worst = std::isfinite(got) ? std::max(worst, std::fabs(got - want[c])) : INFINITY;
          }
          err = std::max(err, worst / scale);
        }
        const bool good = err <= 2e-2;
        g_ok = g_ok && good;
        const char* name = path == 1 ? "tiles" : tf::cuda::moe_prefill_last_path();
        const double flops = 2.0 * t * kK * 3.0 * kH * kI, bytes = expert_bytes(active.size());
        std::printf("[moe-bench] %4lld %5lld %6zu %10.1f %8.1f %6.1f%% %8.0f %6.1f%% %11.2g %s %s\n",
                    static_cast<long long>(e), static_cast<long long>(t), active.size(), s * 1e6, flops / s / 1e12,
                    100.0 * flops / s / 1e12 / tflops_peak, bytes / s / 1e9, 100.0 * bytes / s / 1e9 / hbm_gbs, err,
                    name, good ? "ok" : "FAIL");
        std::printf("{\"bench\": \"moe_prefill\", \"path\": \"%s\", \"E\": %lld, \"T\": %lld, \"active\": %zu, "
                    "\"us\": %.2f, \"tflops\": %.2f, \"pct_peak\": %.1f, \"pct_hbm\": %.1f, \"max_rel_err\": %.3g}\n",
                    name, static_cast<long long>(e), static_cast<long long>(t), active.size(), s * 1e6,
                    flops / s / 1e12, 100.0 * flops / s / 1e12 / tflops_peak, 100.0 * bytes / s / 1e9 / hbm_gbs, err);
      }
      g_ctx.alloc->release_cached();
    }
  }
}

// FP8 stacks: a block of random finite e4m3 bytes tiled (element i = g_fp8[i % kBlock]),
// every 128x128 block its own scale (host copies kept for the reference).
std::vector<uint8_t> g_fp8;
struct HostFp8 {
  tf::Fp8ExpertStack dev;
  std::vector<float> gate_s, up_s, down_s;
};
Tensor fp8_codes(int64_t e, int64_t rows, int64_t cols) {
  Tensor t = dev_alloc({e, rows, cols}, DType::kF8E4M3);
  Tensor src = dev_alloc({kBlock}, DType::kF8E4M3);
  BENCH_CUDA(cudaMemcpy(src.raw(), g_fp8.data(), kBlock, cudaMemcpyHostToDevice));
  const int64_t total = t.numel();
  for (int64_t at = 0; at < total; at += kBlock)
    BENCH_CUDA(cudaMemcpy(static_cast<char*>(t.raw()) + at, src.raw(), static_cast<size_t>(std::min(kBlock, total - at)),
                          cudaMemcpyDeviceToDevice));
  return t;
}
Tensor fp8_scales(int64_t e, int64_t rows, int64_t cols, uint32_t seed, std::vector<float>& host) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.005f, 0.015f);
  const tf::Shape shape = {e, (rows + 127) / 128, (cols + 127) / 128};
  host.resize(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& v : host) v = u(rng);
  Tensor h = Tensor::from_floats(shape, host);
  return dev_copy(h);
}
HostFp8 fp8_stack(int64_t e) {
  HostFp8 s;
  s.dev.gate = fp8_codes(e, kI, kH);
  s.dev.up = fp8_codes(e, kI, kH);
  s.dev.down = fp8_codes(e, kH, kI);
  s.dev.gate_scales = fp8_scales(e, kI, kH, 41, s.gate_s);
  s.dev.up_scales = fp8_scales(e, kI, kH, 42, s.up_s);
  s.dev.down_scales = fp8_scales(e, kH, kI, 43, s.down_s);
  return s;
}
// The stack dequantized into moe_experts' f32 layout ([E, 2I, H] gate rows then up rows, [E, H, I]).
void fp8_dequantized(const HostFp8& s, int64_t e, Tensor* gu, Tensor* dn) {
  Tensor hg = Tensor::empty({e, 2 * kI, kH}, DType::kF32), hd = Tensor::empty({e, kH, kI}, DType::kF32);
  auto code = [&](int64_t i) { return tf::fp8_e4m3_to_float(g_fp8[static_cast<size_t>(i % kBlock)]); };
  const int64_t hb = (kH + 127) / 128, ib = (kI + 127) / 128;
  for (int64_t x = 0; x < e; ++x)
    for (int64_t r = 0; r < kI; ++r)
      for (int64_t c = 0; c < kH; ++c) {
        const int64_t i = (x * kI + r) * kH + c, sb = (x * ib + r / 128) * hb + c / 128;
        hg.data<float>()[(x * 2 * kI + r) * kH + c] = code(i) * s.gate_s[static_cast<size_t>(sb)];
        hg.data<float>()[(x * 2 * kI + kI + r) * kH + c] = code(i) * s.up_s[static_cast<size_t>(sb)];
      }
  for (int64_t x = 0; x < e; ++x)
    for (int64_t r = 0; r < kH; ++r)
      for (int64_t c = 0; c < kI; ++c) {
        const int64_t i = (x * kH + r) * kI + c, sb = (x * hb + r / 128) * ib + c / 128;
        hd.data<float>()[i] = code(i) * s.down_s[static_cast<size_t>(sb)];
      }
  *gu = dev_copy(hg);
  *dn = dev_copy(hd);
}

// The grouped FP8 kernels' plans (cuda_moe_fp8.h) on the release's 288 experts: time each,
// check every plan gives the default plan's bits.
void fp8_plans(const HostFp8& st, double hbm_gbs) {
  const std::vector<std::pair<const char*, tf::cuda::MoeFp8Plan>> plans = {
      {"nc1 u2", {1, 2}}, {"nc1 u4", {1, 4}}, {"nc2 u1", {2, 1}}, {"nc2 u2", {2, 2}},
      {"nc2 u4", {2, 4}}, {"nc4 u1", {4, 1}}, {"nc4 u2", {4, 2}}};
  for (int64_t t : {1, 2, 3, 4, 8, 16, 64}) {
    std::set<int32_t> active;
    const Tensor ids = dev_copy(routing(t, 288, static_cast<uint32_t>(4500 + t), active));
    const Tensor w = dev_copy(randn_host({t, kK}, 61, 0.3f)), x = dev_copy(randn_host({t, kH}, 62, 1.0f));
    Tensor ref = dev_alloc({t, kH}, DType::kF32), out = dev_alloc({t, kH}, DType::kF32);
    tf::cuda::moe_experts_fp8(g_ctx, ref, x, ids, w, st.dev, kLimit);
    for (const auto& [name, plan] : plans) {
      const double s = graph_seconds(
          20, [&] { tf::cuda::moe_experts_fp8_with_plan(g_ctx, out, x, ids, w, st.dev, kLimit, plan); });
      const bool good = s > 0 && same_bits(ref, out);
      g_ok = g_ok && good;
      const double bytes = static_cast<double>(active.size()) * 3.0 * kI * kH * (1.0 + 4.0 / (128.0 * 128.0));
      std::printf("[moe-bench] fp8 plan E=288 T=%lld %-8s %8.1f us %6.1f%% HBM %s\n", static_cast<long long>(t), name,
                  s * 1e6, 100.0 * bytes / s / 1e9 / hbm_gbs, good ? "same bits" : "FAIL");
    }
  }
}

void fp8_section(double hbm_gbs) {
  std::printf("\n[moe-bench] fp8 (moe_experts_fp8): e4m3 + 128x128 f32 scales, H=%lld I=%lld k=%lld, graph of 20 "
              "calls per figure\n",
              static_cast<long long>(kH), static_cast<long long>(kI), static_cast<long long>(kK));
  std::printf("[moe-bench] %4s %4s %6s %10s %9s %7s %8s %11s\n", "E", "T", "active", "us/call", "GB/s", "%HBM", "xT=1",
              "max rel err");
  for (int64_t e : {8, 288}) {
    const HostFp8 st = fp8_stack(e);
    Tensor gu, dn;
    if (e == 8) fp8_dequantized(st, e, &gu, &dn);
    double t1 = 0;
    for (int64_t t : {1, 2, 4, 8, 16, 64}) {
      std::set<int32_t> active;
      const Tensor ids = dev_copy(routing(t, e, static_cast<uint32_t>(4000 + 7 * t + e), active));
      const Tensor w = dev_copy(randn_host({t, kK}, 51, 0.3f)), x = dev_copy(randn_host({t, kH}, 52, 1.0f));
      Tensor out = dev_alloc({t, kH}, DType::kF32);
      const double s =
          graph_seconds(20, [&] { tf::cuda::moe_experts_fp8(g_ctx, out, x, ids, w, st.dev, kLimit); });
      double err = 0;
      bool good = s > 0;
      if (e == 8) {
        Tensor ref = dev_alloc({t, kH}, DType::kF32);
        g_ctx.exact_rows = 64;  // the f32 path
        call(ref, x, ids, w, gu, dn);
        g_ctx.exact_rows = 8;
        tf::cuda::moe_experts_fp8(g_ctx, out, x, ids, w, st.dev, kLimit);
        err = rel_err(host_of(ref).to_vector(), host_of(out).to_vector());
        good = good && err <= 1e-5;
      }
      g_ok = g_ok && good;
      if (t == 1) t1 = s;
      const double bytes = static_cast<double>(active.size()) * 3.0 * kI * kH * (1.0 + 4.0 / (128.0 * 128.0));
      std::printf("[moe-bench] %4lld %4lld %6zu %10.1f %9.0f %6.1f%% %7.2fx %11.2g %s%s\n", static_cast<long long>(e),
                  static_cast<long long>(t), active.size(), s * 1e6, bytes / s / 1e9, 100.0 * bytes / s / 1e9 / hbm_gbs,
                  s / t1, err, s > 0 ? "" : " CAPTURE-FAILED", good ? "" : " FAIL");
      std::printf("{\"bench\": \"moe_fp8_decode\", \"E\": %lld, \"T\": %lld, \"active\": %zu, \"us\": %.2f, "
                  "\"weight_gbs\": %.1f, \"pct_hbm\": %.1f, \"max_rel_err\": %.3g}\n",
                  static_cast<long long>(e), static_cast<long long>(t), active.size(), s * 1e6, bytes / s / 1e9,
                  100.0 * bytes / s / 1e9 / hbm_gbs, err);
    }
    if (e == 288) fp8_plans(st, hbm_gbs);
    g_ctx.alloc->release_cached();
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool fp8_only = argc > 1 && std::strcmp(argv[1], "--fp8") == 0;
  auto probe = tf::cuda::probe_device(0);
  if (!probe) {
    std::fprintf(stderr, "cuda_moe_experts_bench: %s\n", probe.status().to_string().c_str());
    return 1;
  }
  std::printf("[moe-bench] device %s, measured HBM copy %.0f GB/s, cuBLAS bf16 %.0f TFLOP/s\n", probe->name.c_str(),
              probe->hbm_gbps, probe->bf16_tflops);
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaStreamCreate(&g_ctx.stream));
  g_ctx.alloc = tf::cuda::DeviceAllocator::create(0);
  g_ctx.exact_rows = 8;
  BENCH_CUDA(cudaMalloc(&g_ctx.error_word, sizeof(unsigned)));
  BENCH_CUDA(cudaMemset(g_ctx.error_word, 0, sizeof(unsigned)));
  {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    g_block.resize(static_cast<size_t>(kBlock));
    for (uint16_t& v : g_block) v = tf::float_to_bf16(nd(rng));
    std::uniform_int_distribution<int> byte(0, 255);
    g_fp8.resize(static_cast<size_t>(kBlock));
    for (uint8_t& v : g_fp8) {
      int b = byte(rng);
      while ((b & 0x7f) == 0x7f) b = byte(rng);  // no NaN codes
      v = static_cast<uint8_t>(b);
    }
  }
  try {
    if (!fp8_only) {
      decode_section(probe->hbm_gbps);
      plans_section(probe->hbm_gbps);
      if (!quick) prefill_section(probe->hbm_gbps, probe->bf16_tflops);
    }
    fp8_section(probe->hbm_gbps);
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_moe_experts_bench: %s\n", e.what());
    return 1;
  }
  unsigned word = 0;
  BENCH_CUDA(cudaMemcpy(&word, g_ctx.error_word, sizeof word, cudaMemcpyDeviceToHost));
  std::printf("[moe-bench] done: %s (device error word %u)\n", g_ok && word == 0 ? "all checks ok" : "FAILED", word);
  return g_ok && word == 0 ? 0 : 1;
}
