// exl3_cuda_bench: the CUDA EXL3 kernels at GLM-5.3-Flash expert shapes beside the
// measured HBM copy bandwidth (device_probe: D2D copy, read + write counted).
//
//   1. GEMV (exl3_matmul, rows m = 1 and 8): gate/up 4096x2048, down 2048x4096 and a
//      larger 4096x8192, K = 2, 3, 4, 6, 8 (mcg) and K = 4 for 3inst/mul1; K = 4 mcg also
//      in the variants of exl3_kernels.h (auto = the default, fused, fused with PDL, legacy,
//      load-only, decode-only: what bounds the fused kernel). Time per call
//      from a CUDA graph of many calls (its three launches included), weights rotated
//      over copies of >= 512 MB so L2 (60 MB) cannot serve them. GB/s counts trellis bytes,
//      as exllamav3's figures (tests/../shared/data/exl3/exllamav3_gemv_h200.json) do.
//   2. moe_experts_exl3 at 1, 2, 4, 8, 16, 64 tokens: 128 experts of 4096 <-> 2048 at K=4 mcg,
//      top-8, rotating over 4 layers' experts (6.4 GB); GB/s counts the active experts' bytes;
//      up to 8 tokens both bodies (auto = flat, grouped) and the flat body's issue-8 lever
//      variants (flat-prev = without the default's levers, flat-stage16, flat-cols2, flat-ilp2, ...),
//      at 1 token also the flat body's load-only,
//      decode-only and fixed-only variants and the bound they give.
// Lines: "exl3-gemv ..." (one per case), "[exl3-bench] moe ...", "[exl3-bench] moe-bound ...",
// "[exl3-bench] moe-fixed ...",
// "measured_copy_gbps".
//   exl3_cuda_bench [--quick | --sbs]   (--sbs: K = 4 mcg GEMV at m = 1 only, for
//   scripts/device/exl3_side_by_side.py)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/exl3_kernels.h"
#include "model/exl3_synthetic.h"
#include "cuda_graph_timing.h"

namespace {

using tf::DType;
using tf::Exl3Weight;
using tf::Tensor;

tf::cuda::CudaContext g_ctx;

Tensor dev_copy(const Tensor& host) {
  auto s = g_ctx.alloc->allocate(static_cast<size_t>(host.nbytes()));
  if (!s) {
    std::fprintf(stderr, "exl3_cuda_bench: %s\n", s.status().to_string().c_str());
    std::exit(1);
  }
  Tensor d = Tensor::on_storage(*s, 0, host.shape(), host.dtype());
  BENCH_CUDA(cudaMemcpy(d.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice));
  return d;
}

Exl3Weight dev_weight(const Exl3Weight& w) {
  Exl3Weight d = w;
  d.trellis = dev_copy(w.trellis);
  d.suh = dev_copy(w.suh);
  d.svh = dev_copy(w.svh);
  return d;
}

// Seconds per call of `calls` enqueues captured into one CUDA graph and replayed 5 times.
double graph_time_per_call(int calls, const std::function<void(int)>& enqueue) {
  for (int i = 0; i < std::min(calls, 4); ++i) enqueue(i);  // warm the allocator's cache outside capture
  return tf::bench::graph_time_per_call(g_ctx.stream, calls, enqueue, {0.0, 0, 5});
}

Tensor dev_randn(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = nd(rng);
  return dev_copy(Tensor::from_floats({rows, cols}, v));
}

Tensor dev_empty(int64_t rows, int64_t cols) {
  auto s = g_ctx.alloc->allocate(static_cast<size_t>(rows * cols * 4));
  if (!s) std::exit(1);
  return Tensor::on_storage(*s, 0, {rows, cols}, DType::kF32);
}

void bench_gemv(double copy_gbps, bool quick, bool sbs) {
  struct Shape {
    int64_t k, n;
    const char* what;
  };
  const Shape shapes[] = {{4096, 2048, "gate/up"}, {2048, 4096, "down"}, {4096, 8192, "wide"}};
  struct Fmt {
    int bits;
    tf::Exl3Codebook cb;
  };
  std::vector<Fmt> fmts = {{4, tf::Exl3Codebook::kMcg}};
  if (!quick && !sbs) {
    for (int b : {2, 3, 6, 8}) fmts.push_back({b, tf::Exl3Codebook::kMcg});
    fmts.push_back({4, tf::Exl3Codebook::k3Inst});
    fmts.push_back({4, tf::Exl3Codebook::kMul1});
  }
  std::printf("%-8s %-11s %2s %-5s %2s %-12s %10s %10s %8s\n", "exl3", "shape", "K", "cb", "m", "variant", "us/call",
              "GB/s", "%copy");
  struct Variant {
    const char* name;
    int id;
    bool pdl, only_m1;
  };
  // K = 4 mcg (the experts' format) in every variant: the default choice, the fused kernel
  // without and with programmatic dependent launch, the three-launch path, and the fused
  // kernel's trellis streaming alone / decode + MMAs alone (which of the two bounds it).
  const Variant k4_variants[] = {{"auto", tf::cuda::kExl3GemvAuto, false, false},
                                 {"fused", tf::cuda::kExl3GemvFused, false, false},
                                 {"fused-pdl", tf::cuda::kExl3GemvFused, true, true},
                                 {"legacy", tf::cuda::kExl3GemvLegacy, false, false},
                                 {"load-only", tf::cuda::kExl3GemvLoadOnly, false, true},
                                 {"decode-only", tf::cuda::kExl3GemvDecodeOnly, false, true}};
  const Variant other_variants[] = {{"auto", tf::cuda::kExl3GemvAuto, false, false}};
  for (const Fmt& f : fmts)
    for (const Shape& s : shapes) {
      tf::Exl3SyntheticOptions o;
      o.bits = f.bits;
      o.codebook = f.cb;
      const Exl3Weight host = tf::make_synthetic_exl3_linear(s.k, s.n, o, 1);
      const int64_t bytes = host.trellis_bytes();
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / bytes));
      std::vector<Exl3Weight> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(dev_weight(host));
      const bool k4mcg = f.bits == 4 && f.cb == tf::Exl3Codebook::kMcg;
      std::vector<Variant> variants;
      if (k4mcg) variants.assign(std::begin(k4_variants), std::end(k4_variants));
      else variants.assign(std::begin(other_variants), std::end(other_variants));
      for (const Variant& v : variants)
        for (int64_t m : {1, 8}) {
          if ((v.only_m1 || sbs) && m != 1) continue;
          tf::cuda::exl3_set_gemv_variant(v.id);
          tf::cuda::exl3_set_pdl(v.pdl ? 1 : 0);
          const Tensor x = dev_randn(m, s.k, 3);
          Tensor out = dev_empty(m, s.n);
          const double t =
              graph_time_per_call(copies, [&](int i) { tf::cuda::exl3_matmul(g_ctx, out, x, ws[i % copies]); });
          const double gbs = bytes / t / 1e9;
          std::printf("exl3-gemv %5lldx%-5lld %2d %-5s %2lld %-12s %10.2f %10.1f %7.1f%%  (%s)\n",
                      static_cast<long long>(s.k), static_cast<long long>(s.n), f.bits, tf::exl3_codebook_name(f.cb),
                      static_cast<long long>(m), v.name, t * 1e6, gbs, 100.0 * gbs / copy_gbps, s.what);
        }
      tf::cuda::exl3_set_gemv_variant(tf::cuda::kExl3GemvAuto);
      tf::cuda::exl3_set_pdl(-1);
      ws.clear();
      g_ctx.alloc->release_cached();
    }
}

void bench_moe(double copy_gbps, bool quick) {
  const int64_t experts = 128, hidden = 4096, inter = 2048, topk = 8;
  const int layers = quick ? 2 : 4;
  tf::Exl3SyntheticOptions o;
  o.bits = 4;
  o.codebook = tf::Exl3Codebook::kMcg;
  const Exl3Weight gh = tf::make_synthetic_exl3_linear(hidden, inter, o, 1);
  const Exl3Weight dh = tf::make_synthetic_exl3_linear(inter, hidden, o, 2);
  const int64_t expert_bytes = 2 * gh.trellis_bytes() + dh.trellis_bytes();
  std::vector<tf::Exl3ExpertTable> tables(static_cast<size_t>(layers));
  for (auto& t : tables) {
    t.hidden = hidden;
    t.intermediate = inter;
    for (int64_t e = 0; e < experts; ++e) {
      t.gate.push_back(dev_weight(gh));
      t.up.push_back(dev_weight(gh));
      t.down.push_back(dev_weight(dh));
    }
    const tf::Status s = tf::cuda::exl3_upload_experts(g_ctx, t);
    if (!s.is_ok()) {
      std::fprintf(stderr, "exl3_cuda_bench: %s\n", s.to_string().c_str());
      std::exit(1);
    }
  }
  struct MoeVariant {
    const char* name;
    int id;
  };
  // auto = what the model runs (flat up to 8 tokens, grouped beyond); grouped = the
  // six-launch body at every token count; flat load-only / decode-only (1 token): the
  // flat body's trellis streaming alone and its decode + MMAs alone, i.e. its memory
  // and its ALU bound.
  // flat-old-loop: the flat body on the previous streaming loop (before/after in one run);
  // flat-cols1/2/4: each warp streams 1/2/4 column tiles back to back (auto: 4);
  // flat-fixed-only (1 token): everything but the trellis stream (launches, routing,
  // rotations, epilogues).
  // Issue-8 levers (sessions 8, exl3_stream.cuh; auto = the flat body with the default levers,
  // 8-tile ring stages since run1s8): flat-prev = the session-7 flat body (4-tile stages),
  // flat-stage16 = 16-tile stages, flat-cols2 = the default with 2 columns per warp (2x the
  // blocks), flat-no-reg-cap = the default without its 64-register cap; probes at 1 token.
  // Session 10 (exl3_kernels.h; auto = 16-tile stages + word hashes, no register cap since
  // run6s10): flat-stage16 = the session-8/9 default, flat-wordhash = auto with the 64-register
  // cap, flat-ilp2-wh = a warp's columns 2 at a time + word hashes (capped; -uncapped without the
  // cap), flat-wh-pf = auto + the finish scales prefetched into L1 before the down /
  // combine kernels' wait. (flat-old-loop, flat-cols1, flat-cols2, flat-fma-dup-stage8, the
  // FMA-pipe pack and 4 interleaved columns (slower), flat-no-reg-cap (= auto now) and the
  // fixed-only probe with the prefetch (9.6 vs 9.0 us) were measured in run2s7 / run1s8 /
  // run2s8 / run4s10 / run6s10.)
  const MoeVariant all_variants[] = {{"auto", tf::cuda::kExl3MoeAuto},
                                     {"grouped", tf::cuda::kExl3MoeGrouped},
                                     {"flat-prev", tf::cuda::kExl3MoeFlatPrev},
                                     {"flat-stage16", tf::cuda::kExl3MoeFlatStage16},
                                     {"flat-wordhash", tf::cuda::kExl3MoeFlatWordHash},
                                     {"flat-wh-pf", tf::cuda::kExl3MoeFlatWordHashPrefetch},
                                     {"flat-ilp2-wh", tf::cuda::kExl3MoeFlatIlp2WordHash},
                                     {"flat-ilp2-wh-uncapped", tf::cuda::kExl3MoeFlatIlp2WordHashUncapped},
                                     {"flat-load-only", tf::cuda::kExl3MoeFlatLoadOnly},
                                     {"flat-decode-only", tf::cuda::kExl3MoeFlatDecodeOnly},
                                     {"flat-fixed-only", tf::cuda::kExl3MoeFlatFixedOnly},
                                     {"flat-s16-decode-only", tf::cuda::kExl3MoeFlatStage16DecodeOnly},
                                     {"flat-i2wh-decode-only", tf::cuda::kExl3MoeFlatIlp2WordHashDecodeOnly}};
  std::vector<int64_t> token_counts = {1, 2, 4, 8, 16, 64};
  if (quick) token_counts = {1, 8};
  for (int64_t tokens : token_counts) {
    std::mt19937 rng(static_cast<uint32_t>(tokens));
    std::vector<int32_t> ids(static_cast<size_t>(tokens * topk));
    std::vector<float> w(ids.size(), 0.125f);
    std::set<int32_t> active;
    std::vector<int32_t> all(static_cast<size_t>(experts));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < experts; ++e) all[e] = static_cast<int32_t>(e);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + topk);
      for (int64_t j = 0; j < topk; ++j) {
        ids[t * topk + j] = all[j];
        active.insert(all[j]);
      }
    }
    Tensor ids_h = Tensor::empty({tokens, topk}, DType::kI32);
    std::memcpy(ids_h.raw(), ids.data(), ids.size() * 4);
    const Tensor ids_d = dev_copy(ids_h);
    const Tensor w_d = dev_copy(Tensor::from_floats({tokens, topk}, w));
    const Tensor x = dev_randn(tokens, hidden, 5);
    Tensor out = dev_empty(tokens, hidden);
    const double bytes = static_cast<double>(active.size()) * expert_bytes;
    const double roofline_us = bytes / (copy_gbps * 1e9) * 1e6;
    double load_us = 0, decode_us = 0, fixed_us = 0, s16_decode_us = 0, i2wh_decode_us = 0;
    for (const MoeVariant& v : all_variants) {
      if (tokens > 8 && v.id != tf::cuda::kExl3MoeAuto) continue;
      const bool probe = v.id == tf::cuda::kExl3MoeFlatLoadOnly || v.id == tf::cuda::kExl3MoeFlatDecodeOnly ||
                         v.id == tf::cuda::kExl3MoeFlatFixedOnly || v.id == tf::cuda::kExl3MoeFlatStage16DecodeOnly ||
                         v.id == tf::cuda::kExl3MoeFlatIlp2WordHashDecodeOnly;
      if (tokens > 1 && probe) continue;
      tf::cuda::exl3_set_moe_variant(v.id);
      const double t = graph_time_per_call(4 * layers, [&](int i) {
        tf::cuda::exl3_moe_experts(g_ctx, out, x, ids_d, w_d, tables[i % layers], 7.0f);
      });
      const double gbs = bytes / t / 1e9;
      std::printf("[exl3-bench] moe tokens=%lld variant=%-16s experts=%zu us=%.1f GB/s=%.1f hbm=%.1f%% roofline_us=%.1f\n",
                  static_cast<long long>(tokens), v.name, active.size(), t * 1e6, gbs, 100.0 * gbs / copy_gbps,
                  roofline_us);
      if (v.id == tf::cuda::kExl3MoeFlatLoadOnly) load_us = t * 1e6;
      if (v.id == tf::cuda::kExl3MoeFlatDecodeOnly) decode_us = t * 1e6;
      if (v.id == tf::cuda::kExl3MoeFlatFixedOnly) fixed_us = t * 1e6;
      if (v.id == tf::cuda::kExl3MoeFlatStage16DecodeOnly) s16_decode_us = t * 1e6;
      if (v.id == tf::cuda::kExl3MoeFlatIlp2WordHashDecodeOnly) i2wh_decode_us = t * 1e6;
    }
    tf::cuda::exl3_set_moe_variant(tf::cuda::kExl3MoeAuto);
    if (tokens == 1) {
      // The layer cannot beat its slower part: trellis streaming alone (memory + launch
      // and fixed costs) or decode + MMAs alone (ALU issue, no loads).
      const double bound = std::max(load_us, decode_us);
      std::printf("[exl3-bench] moe-bound tokens=1: load-only %.1f us (%.1f%% of HBM), decode-only %.1f us "
                  "(ALU: %.2e weights/s) -> bound %.1f us = %.1f%% of HBM (%s-bound)\n",
                  load_us, 100.0 * roofline_us / load_us, decode_us,
                  static_cast<double>(active.size()) * 3 * hidden * inter / (decode_us * 1e-6), bound,
                  100.0 * roofline_us / bound, decode_us > load_us ? "ALU" : "memory");
      // The stream's share: each probe less the fixed costs it includes.
      std::printf("[exl3-bench] moe-fixed tokens=1: fixed-only %.1f us; load-only - fixed %.1f us (%.1f%% of HBM), "
                  "decode-only - fixed %.1f us\n",
                  fixed_us, load_us - fixed_us, 100.0 * roofline_us / std::max(1e-3, load_us - fixed_us),
                  decode_us - fixed_us);
      // The same for the levers: decode + MMAs alone with 16-tile stages (the session-8 default)
      // and with 2 interleaved columns + word hashes, each less the fixed part.
      std::printf("[exl3-bench] moe-levers tokens=1: decode-only - fixed: default %.1f us, stage16 %.1f us, "
                  "ilp2+wh %.1f us\n",
                  decode_us - fixed_us, s16_decode_us - fixed_us, i2wh_decode_us - fixed_us);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --sbs: K = 4 mcg GEMV at m = 1 only (scripts/device/exl3_side_by_side.py reads it).
  const bool sbs = argc > 1 && std::strcmp(argv[1], "--sbs") == 0;
  auto probe = tf::cuda::probe_device(0);
  if (!probe) {
    std::fprintf(stderr, "exl3_cuda_bench: %s\n", probe.status().to_string().c_str());
    return 1;
  }
  std::printf("device %s\nmeasured_copy_gbps %.1f\n", probe->name.c_str(), probe->hbm_gbps);
  BENCH_CUDA(cudaSetDevice(0));
  BENCH_CUDA(cudaStreamCreate(&g_ctx.stream));
  g_ctx.alloc = tf::cuda::DeviceAllocator::create(0);
  BENCH_CUDA(cudaMalloc(&g_ctx.error_word, sizeof(unsigned)));
  BENCH_CUDA(cudaMemset(g_ctx.error_word, 0, sizeof(unsigned)));
  try {
    bench_gemv(probe->hbm_gbps, quick, sbs);
    if (!sbs) bench_moe(probe->hbm_gbps, quick);
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "exl3_cuda_bench: %s\n", e.what());
    return 1;
  }
  unsigned word = 0;
  BENCH_CUDA(cudaMemcpy(&word, g_ctx.error_word, sizeof word, cudaMemcpyDeviceToHost));
  std::printf("exl3 bench done (device error word %u, fused GEMV launches refused %lld)\n", word,
              static_cast<long long>(tf::cuda::exl3_fused_gemv_refusals()));
  return word == 0 ? 0 : 1;
}
