// cuda_prefill_bench: where the time of a long prefill goes on the CUDA backend.
// Times the prefill-side ops at GLM-5.3-Flash shapes (TP = 1) for T = 2048 and 8192
// rows and prints each beside its own roofline: the op's model FLOPs (the same count
// as src/bench/roofline.cc where it has one) over the measured cuBLAS BF16 peak.
//
//  - kda_chunked, one KDA layer (64 heads, Dk = Dv = 128): the tensor-core WY kernel,
//    checked against the token-by-token kernel (kda_recurrent) on the same inputs
//    (max error relative to the largest output: "check ok" / "CHECK FAILED"); the
//    token-by-token time and the other forms' (a DGX Spark's among them) beside it.
//  - moe_experts, one MoE layer (top-8, hidden 4096, intermediate 2048, bf16): all
//    tokens on the same 8 experts (the BENCH_EXPERTS=8 synthetic checkpoint), and
//    random routing over 288 experts.
//  - mla_sparse_attention for T rows (64 heads, latent 512, top-k 2048, causal), bf16
//    and fp8 latents: the op (tensor-core kernel) beside the decode-path kernel,
//    both results compared (to 2048 rows); indexer_scores (tensor cores) and top-k for T
//    rows (32 heads x 128, pools of 4), checked against the f32 kernel: scores to 1e-5,
//    the top-k pools equal except ties within that tolerance.
//  - the big projection GEMMs (matmul, bf16 weights, cuBLAS above 64 rows).
// Each line also comes as JSON ({"bench": "prefill", ...}). Times are wall clock per
// call after warm-up, synchronised (eager launches, as the model runs).
//   cuda_prefill_bench [--rows 2048,8192] [--quick] [--ops kda,moe,mla,indexer,gemm,long] [--mla-heads 64]
// (--mla-heads: MLA's heads per rank, 32 / 16 at TP 2 / 4; with TF_SMEM_PER_BLOCK=101376, a DGX Spark's form.)
// (`long`: the last 1024-row chunk of a 128K prompt: indexer over 32768 pools, MLA.)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <iterator>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_kda_chunked.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/cuda_mla_prefill.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

using tf::DType;
using tf::Tensor;

// The part being run, printed if the process dies (its stdout goes to a log file).
const char* volatile g_stage = "start";

Tensor host_randn(const tf::Shape& shape, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, sd);
  std::vector<float> v(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

Tensor host_ints(const tf::Shape& shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

// A device bf16 tensor: a random 4M-element block tiled over it (fast for GBs; the
// repeats do not matter for timing).
Tensor device_bf16(tf::Ops& ops, const tf::Shape& shape, uint32_t seed, float sd) {
  Tensor t = ops.empty(shape, DType::kBF16);
  const int64_t total = t.numel(), block = std::min<int64_t>(total, int64_t{1} << 22);
  const Tensor src = ops.to_device(host_randn({block}, seed, sd).to_dtype(DType::kBF16));
  for (int64_t at = 0; at < total; at += block)
    cudaMemcpy(static_cast<char*>(t.raw()) + at * 2, src.raw(), static_cast<size_t>(std::min(block, total - at)) * 2,
               cudaMemcpyDeviceToDevice);
  return t;
}

// Seconds per call: 2 warm-up calls, then calls until ~0.2 s (at least 3, at most 50).
double time_call(const std::function<void()>& fn) {
  fn();
  fn();
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  fn();
  cudaDeviceSynchronize();
  const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int iters = static_cast<int>(std::clamp(0.2 / std::max(one, 1e-6), 3.0, 50.0));
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  cudaDeviceSynchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// A device f32 tensor of N(mean, sd) values: a random 4M-element block tiled over it
// (host generation of GBs would take the run's time; KDA's check still sees ~500
// distinct tokens per head, enough to compare two kernels).
Tensor device_f32(tf::Ops& ops, const tf::Shape& shape, uint32_t seed, float sd = 1.0f, float mean = 0.0f) {
  Tensor t = ops.empty(shape);
  const int64_t total = t.numel(), block = std::min<int64_t>(total, int64_t{1} << 22);
  const Tensor src = ops.to_device(host_randn({block}, seed, sd, mean));
  for (int64_t at = 0; at < total; at += block)
    cudaMemcpy(static_cast<char*>(t.raw()) + at * 4, src.raw(), static_cast<size_t>(std::min(block, total - at)) * 4,
               cudaMemcpyDeviceToDevice);
  return t;
}

double peak_tflops = 0;  // measured cuBLAS bf16 GEMM rate
bool mla_ok = true;      // the tensor-core MLA kernel agreed with the decode-path one

double measure_bf16_peak(tf::Ops& ops) {
  const int s = 8192;
  Tensor a = device_bf16(ops, {s, s}, 1, 1.0f), b = device_bf16(ops, {s, s}, 2, 1.0f);
  Tensor c = ops.empty({s, s}, DType::kBF16);
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const float one = 1.0f, zero = 0.0f;
  const double t = time_call([&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, a.raw(), CUDA_R_16BF, s, b.raw(), CUDA_R_16BF, s, &zero,
                 c.raw(), CUDA_R_16BF, s, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  return 2.0 * s * s * s / t / 1e12;
}

// One result line: time, model FLOPs, TFLOP/s, share of the measured peak.
void report(const std::string& what, int64_t t_rows, double secs, double flops, const std::string& extra = "") {
  const double tflops = flops / secs / 1e12, roof_us = flops / (peak_tflops * 1e12) * 1e6;
  std::printf("  %-52s T=%-5lld %10.1f us  %8.1f TFLOP/s  roofline %8.1f us  %5.1f%% of peak%s%s\n", what.c_str(),
              static_cast<long long>(t_rows), secs * 1e6, tflops, roof_us, 100.0 * tflops / peak_tflops,
              extra.empty() ? "" : "  ", extra.c_str());
  std::printf("{\"bench\": \"prefill\", \"op\": \"%s\", \"t\": %lld, \"us\": %.1f, \"gflop\": %.3f, \"tflops\": %.2f, "
              "\"roofline_us\": %.1f, \"pct_peak\": %.2f}\n",
              what.c_str(), static_cast<long long>(t_rows), secs * 1e6, flops / 1e9, tflops, roof_us,
              100.0 * tflops / peak_tflops);
}

double rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst / scale;
}

// One KDA layer: the chunked kernel vs the token-by-token one.
bool bench_kda(tf::Ops& ops, int64_t t, bool time_recurrent) {
  const int64_t h = 64, d = 128;
  const Tensor q = device_f32(ops, {t, h, d}, 11), k = device_f32(ops, {t, h, d}, 12);
  const Tensor v = device_f32(ops, {t, h, d}, 13);
  // Gates in (-1, 0) (-sigmoid of a normal), beta in (0, 1).
  Tensor g = device_f32(ops, {t, h, d}, 14, 0.3f, -0.2f), beta = device_f32(ops, {t, h}, 15);
  ops.sigmoid(g, g);
  ops.scale(g, g, -1.0f);
  ops.sigmoid(beta, beta);
  const Tensor s0 = ops.to_device(host_randn({h, d, d}, 16, 0.1f));
  Tensor out = ops.empty({t, h, d}), ref = ops.empty({t, h, d});
  Tensor st = ops.empty({h, d, d}), st_ref = ops.empty({h, d, d});
  ops.copy(st, s0);
  ops.copy(st_ref, s0);
  ops.kda_chunked(out, q, k, v, g, beta, st, 64);
  ops.kda_recurrent(ref, q, k, v, g, beta, st_ref);
  const double e_out = rel_err(ops.to_host(ref), ops.to_host(out));
  const double e_st = rel_err(ops.to_host(st_ref), ops.to_host(st));
  const bool ok = e_out <= 1e-4 && e_st <= 1e-4;
  const double flops = 6.0 * h * d * d * static_cast<double>(t);  // roofline.cc's count per KDA layer
  char extra[160];
  std::snprintf(extra, sizeof extra, "(vs recurrent: out %.2g, state %.2g: %s; scratch %.0f MB)", e_out, e_st,
                ok ? "check ok" : "CHECK FAILED", tf::cuda::kda_chunked_scratch_bytes(t, h) / 1e6);
  report("kda_chunked H=64 Dk=Dv=128 (one layer)", t, time_call([&] { ops.kda_chunked(out, q, k, v, g, beta, st, 64); }),
         flops, extra);
  {
    // Side by side on the same inputs: the one-kernel state pass (TF_KDA_STATE_SPLIT=0),
    // then also the scalar intra-chunk kernel (TF_KDA_INTRA_MMA=0), session 26's code.
    const bool saved_intra = tf::cuda::kda_intra_mma().load(), saved_split = tf::cuda::kda_state_split().load();
    tf::cuda::kda_state_split() = false;
    report("kda_chunked, one-kernel state pass", t,
           time_call([&] { ops.kda_chunked(out, q, k, v, g, beta, st, 64); }), flops);
    // A DGX Spark's forms (99 KB per block): + the 80 KB tensor-core intra form.
    tf::cuda::kda_intra_small() = true;
    report("kda_chunked, + 80 KB intra form (a Spark's)", t,
           time_call([&] { ops.kda_chunked(out, q, k, v, g, beta, st, 64); }), flops);
    tf::cuda::kda_intra_small() = false;
    tf::cuda::kda_intra_mma() = false;
    report("kda_chunked, + scalar intra kernel", t,
           time_call([&] { ops.kda_chunked(out, q, k, v, g, beta, st, 64); }), flops);
    tf::cuda::kda_intra_mma() = saved_intra;
    tf::cuda::kda_state_split() = saved_split;
  }
  if (time_recurrent)
    report("kda_recurrent H=64 Dk=Dv=128 (old prefill path)", t,
           time_call([&] { ops.kda_recurrent(ref, q, k, v, g, beta, st_ref); }), flops);
  return ok;
}

// One MoE layer: top-8 of `experts` (all tokens on experts 0..7 when experts == 8).
void bench_moe(tf::Ops& ops, int64_t t, int64_t experts) {
  const int64_t hid = 4096, inter = 2048, top = 8;
  const Tensor gate_up = device_bf16(ops, {experts, 2 * inter, hid}, 21, 0.02f);
  const Tensor down = device_bf16(ops, {experts, hid, inter}, 22, 0.02f);
  std::mt19937 rng(23);
  std::vector<int32_t> ids(static_cast<size_t>(t * top));
  std::vector<int32_t> perm(static_cast<size_t>(experts));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t e = 0; e < experts; ++e) perm[e] = static_cast<int32_t>(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::sort(perm.begin(), perm.begin() + top);
    std::copy(perm.begin(), perm.begin() + top, ids.begin() + r * top);
  }
  const Tensor dids = ops.to_device(host_ints({t, top}, ids));
  const Tensor w = ops.to_device(host_randn({t, top}, 24, 0.1f, 0.3f));
  const Tensor x = device_f32(ops, {t, hid}, 25);
  Tensor out = ops.empty({t, hid});
  const double flops = 2.0 * 3.0 * hid * inter * top * static_cast<double>(t);
  report("moe_experts top-8 of " + std::to_string(experts) + " (one layer)", t,
         time_call([&] { ops.moe_experts(out, x, dids, w, gate_up, down, 10.0f); }), flops);
}

// MLA sparse attention for the last t rows of a causal prompt of `prompt` tokens: the
// row at position i attends to min(i + 1, 2048) distinct tokens of 0..i (all of them
// while there are at most 2048, else a random choice, as the indexer's top-k gives).
int64_t g_mla_heads = 64;  // --mla-heads

void bench_mla(tf::Ops& ops, int64_t t, int64_t prompt, DType cache_dtype) {
  const int64_t heads = g_mla_heads, r = 512, w = 2048, page = 64, pages = (prompt + page - 1) / page;
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
  const Tensor dtable = ops.to_device(host_ints({pages}, table));
  Tensor cache = ops.zeros({pages * page * r}, cache_dtype);
  Tensor scales = ops.zeros({pages * page});
  const bool fp8 = cache_dtype == DType::kF8E4M3;
  tf::LatentPagesView view{cache.raw(), fp8 ? scales.data<float>() : nullptr, cache_dtype, page, r, page * r,
                           dtable.data<int32_t>(), prompt};
  ops.latent_store(view, cache.raw(), fp8 ? scales.data<float>() : nullptr,
                   device_f32(ops, {prompt, r}, 31), 0);
  g_stage = "mla: indices";
  std::vector<int32_t> idx(static_cast<size_t>(t * w), -1), perm(static_cast<size_t>(prompt));
  std::mt19937 rng(32);
  double pairs = 0;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t pos = prompt - t + i, n = std::min(pos + 1, w);
    for (int64_t j = 0; j <= pos; ++j) perm[j] = static_cast<int32_t>(j);
    for (int64_t j = 0; j < n; ++j) {  // partial Fisher-Yates: n distinct tokens of 0..pos
      if (pos + 1 > w) std::swap(perm[j], perm[j + static_cast<int64_t>(rng() % static_cast<uint32_t>(pos + 1 - j))]);
      idx[i * w + j] = perm[j];
    }
    pairs += static_cast<double>(n);
  }
  const Tensor didx = ops.to_device(host_ints({t, w}, idx));
  const Tensor q = device_f32(ops, {t, heads, r}, 33, 0.1f);
  Tensor out = ops.empty({t, heads, r}), old = ops.empty({t, heads, r});
  const double flops = 4.0 * heads * r * pairs;  // roofline.cc: 4 H R per selected latent
  // The decode-path kernel (cuda::mla_sparse_attention), called directly (the op takes the
  // tensor-core prefill kernel here): an independent check of the same function.
  tf::cuda::CudaContext bare;
  bare.device = 0;
  bare.alloc = tf::cuda::DeviceAllocator::create(0);  // kernels may take scratch from it
  // (Only up to 2048 rows: the decode-path kernel is slow at 8192.)
  const bool compare = t <= 2048;
  char extra[96] = "";
  g_stage = "mla: compare with the decode-path kernel";
  if (compare) {
    ops.mla_sparse_attention(out, q, view, didx, 0.0625f);
    cudaDeviceSynchronize();  // `bare` runs on the legacy stream, the op on its own
    tf::cuda::mla_sparse_attention(bare, old, q, view, didx, 0.0625f);
    cudaDeviceSynchronize();
    const double err = rel_err(ops.to_host(old), ops.to_host(out));
    // q and P as bf16 pairs: ~f32; rounded to bf16 once (the default): the reference's precision.
    const double tol = tf::cuda::mla_prefill_split().load() ? 1e-5 : 1e-2;
    mla_ok = mla_ok && err <= tol;
    std::snprintf(extra, sizeof extra, "(vs decode-path kernel: %.2g: %s)", err,
                  err <= tol ? "check ok" : "CHECK FAILED");
  }
  g_stage = "mla: timing";
  const std::string dt = fp8 ? "fp8" : "bf16";
  report("mla_sparse_attention H=" + std::to_string(heads) + " R=512 top-2048 " + dt + " (op)" + (t == prompt ? "" : " last chunk"), t,
         time_call([&] { ops.mla_sparse_attention(out, q, view, didx, 0.0625f); }), flops, extra);
  // The same kernel with its token lists sorted (TF_MLA_PREFILL_SORT=1) instead of read from
  // a bitmap: side by side, and its bits against the default's.
  {
    std::atomic<bool>& sort = tf::cuda::mla_prefill_sort_tokens();
    const bool saved = sort.load();
    sort = !saved;
    ops.mla_sparse_attention(old, q, view, didx, 0.0625f);
    const bool same = rel_err(ops.to_host(out), ops.to_host(old)) == 0.0;
    mla_ok = mla_ok && same;
    report("mla_sparse_attention " + dt + (saved ? " token lists from a bitmap" : " token lists sorted"), t,
           time_call([&] { ops.mla_sparse_attention(old, q, view, didx, 0.0625f); }), flops,
           same ? "(same bits)" : "(BITS DIFFER)");
    sort = saved;
  }
  // The softmax step's heads one after another (its first form), side by side: the same bits.
  {
    std::atomic<bool>& in_turn = tf::cuda::mla_prefill_heads_in_turn();
    in_turn = true;
    ops.mla_sparse_attention(old, q, view, didx, 0.0625f);
    const bool same = rel_err(ops.to_host(out), ops.to_host(old)) == 0.0;
    mla_ok = mla_ok && same;
    report("mla_sparse_attention " + dt + " softmax heads in turn", t,
           time_call([&] { ops.mla_sparse_attention(old, q, view, didx, 0.0625f); }), flops,
           same ? "(same bits)" : "(BITS DIFFER)");
    in_turn = false;
  }
  // The other precision of the kernel (q and P as bf16 hi/lo pairs, TF_MLA_PREFILL_SPLIT=1, or
  // rounded to bf16 once): side by side, and how far its result is from the default's.
  {
    std::atomic<bool>& split = tf::cuda::mla_prefill_split();
    const bool saved = split.load();
    split = !saved;
    ops.mla_sparse_attention(old, q, view, didx, 0.0625f);
    char diff[64];
    std::snprintf(diff, sizeof diff, "(vs the default: %.2g)", rel_err(ops.to_host(out), ops.to_host(old)));
    report(
        "mla_sparse_attention " + dt + (saved ? " q, P rounded to bf16 once" : " q, P as bf16 hi/lo pairs"),
        t, time_call([&] { ops.mla_sparse_attention(old, q, view, didx, 0.0625f); }), flops, diff);
    split = saved;
  }
  if (compare)
    report("mla_sparse_attention " + dt + " decode-path kernel", t,
           time_call([&] { tf::cuda::mla_sparse_attention(bare, old, q, view, didx, 0.0625f); }), flops);
}

// The DSA indexer for t rows whose prompt ends at `prompt` tokens (t == prompt: a
// one-shot prefill; t < prompt: the last chunk of a long prompt): scores over the
// complete pools of 4 (op: tensor cores), then top-512 pools. Checked against the f32
// kernel (cuda::indexer_scores, timed too where it takes < ~1 s): the scores' max
// error relative to the largest, and the top-k selection, which may differ only where
// scores tie within 1e-5 of the scale ("check ok" / "CHECK FAILED").
bool bench_indexer(tf::Ops& ops, int64_t t, int64_t prompt) {
  const int64_t hi = 32, di = 128, kp = 4, pools = prompt / kp, sel = std::min<int64_t>(512, pools);
  const Tensor q = device_f32(ops, {t, hi, di}, 41);
  const Tensor keys = ops.to_device(host_randn({pools, di}, 42));
  const Tensor wts = ops.to_device(host_randn({t, hi}, 43, 0.1f));
  std::vector<int32_t> cand(static_cast<size_t>(t));
  double pairs = 0;
  for (int64_t i = 0; i < t; ++i) {
    cand[i] = static_cast<int32_t>((prompt - t + i + 1) / kp);
    pairs += cand[i];
  }
  const Tensor dcand = ops.to_device(host_ints({t}, cand));
  Tensor scores = ops.empty({t, pools}), vals = ops.empty({t, sel}), ids = ops.empty({t, sel}, DType::kI32);
  Tensor old = ops.empty({t, pools}), old_vals = ops.empty({t, sel}), old_ids = ops.empty({t, sel}, DType::kI32);
  // The f32 kernel, called directly (the op takes the tensor-core one here).
  tf::cuda::CudaContext bare;
  bare.device = 0;
  bare.alloc = tf::cuda::DeviceAllocator::create(0);  // kernels may take scratch from it
  g_stage = "indexer: op + topk";
  ops.indexer_scores(scores, q, keys, wts, dcand, 0.088f);
  ops.topk(vals, ids, scores, static_cast<int>(sel));
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  g_stage = "indexer: f32 kernel";
  tf::cuda::indexer_scores(bare, old, q, keys, wts, dcand, 0.088f);
  cudaDeviceSynchronize();
  const double old_once = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ops.topk(old_vals, old_ids, old, static_cast<int>(sel));
  const std::vector<float> a = ops.to_host(old).to_vector(), b = ops.to_host(scores).to_vector();
  const std::vector<float> kth = ops.to_host(old_vals).to_vector();
  const Tensor ia = ops.to_host(old_ids), ib = ops.to_host(ids);
  g_stage = "indexer: compare";
  double worst = 0, scale = 1e-30;
  int64_t marks = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] == -FLT_MAX) != (b[i] == -FLT_MAX)) ++marks;
    if (a[i] == -FLT_MAX || b[i] == -FLT_MAX) continue;
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  int64_t rows_diff = 0, not_ties = 0;
  for (int64_t r = 0; r < t; ++r) {
    std::vector<int32_t> x(ia.data<int32_t>() + r * sel, ia.data<int32_t>() + (r + 1) * sel);
    std::vector<int32_t> y(ib.data<int32_t>() + r * sel, ib.data<int32_t>() + (r + 1) * sel);
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    if (x == y) continue;
    ++rows_diff;
    std::vector<int32_t> diff;
    std::set_symmetric_difference(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(diff));
    for (int32_t pool : diff)
      if (pool < 0 || pool >= pools ||
          std::fabs(a[static_cast<size_t>(r * pools + pool)] - kth[static_cast<size_t>(r * sel + sel - 1)]) >
              1e-5 * scale)
        ++not_ties;
  }
  const bool ok = worst / scale <= 1e-5 && marks == 0 && not_ties == 0;
  char extra[200];
  std::snprintf(extra, sizeof extra,
                "(vs f32 kernel: %.2g; top-%lld differs in %lld of %lld rows, %lld not ties: %s)", worst / scale,
                static_cast<long long>(sel), static_cast<long long>(rows_diff), static_cast<long long>(t),
                static_cast<long long>(not_ties), ok ? "check ok" : "CHECK FAILED");
  const std::string shape = "P=" + std::to_string(pools) + (t == prompt ? "" : " last chunk");
  report("indexer_scores 32x128 pools of 4 (op) " + shape, t,
         time_call([&] { ops.indexer_scores(scores, q, keys, wts, dcand, 0.088f); }), 2.0 * hi * di * pairs, extra);
  if (old_once < 0.1)
    report("indexer_scores f32 kernel (old) " + shape, t,
           time_call([&] { tf::cuda::indexer_scores(bare, old, q, keys, wts, dcand, 0.088f); }), 2.0 * hi * di * pairs);
  else
    report("indexer_scores f32 kernel (old, one call) " + shape, t, old_once, 2.0 * hi * di * pairs);
  report("topk of the pool scores (k=" + std::to_string(sel) + ") " + shape, t,
         time_call([&] { ops.topk(vals, ids, scores, static_cast<int>(sel)); }), 0.0);
  return ok;
}

struct Gemm {
  const char* name;
  int64_t n, k, per_layer;  // per_layer: how many such matmuls one layer of that kind runs
};

void bench_gemms(tf::Ops& ops, int64_t t) {
  const Gemm gemms[] = {
      {"KDA q/k/v proj 4096->8192", 8192, 4096, 3},   {"KDA o_proj 8192->4096", 4096, 8192, 1},
      {"MLA q_a 4096->1536", 1536, 4096, 1},         {"MLA q_b 1536->16384", 16384, 1536, 1},
      {"MLA o_proj 16384->4096", 4096, 16384, 1},    {"dense gate_up 4096->24576", 24576, 4096, 1},
      {"dense down 12288->4096", 4096, 12288, 1},    {"shared expert gate_up 4096->4096", 4096, 4096, 1},
      {"shared expert down 2048->4096", 4096, 2048, 1},
  };
  const Tensor xs = device_f32(ops, {t, 16384}, 51);
  for (const Gemm& gm : gemms) {
    const Tensor w = device_bf16(ops, {gm.n, gm.k}, 52, 0.02f);
    Tensor x = ops.empty({t, gm.k});
    ops.copy(x, xs.slice(1, 0, gm.k));
    Tensor out = ops.empty({t, gm.n});
    report(std::string("matmul bf16 ") + gm.name, t, time_call([&] { ops.matmul(out, x, w); }),
           2.0 * static_cast<double>(t) * gm.n * gm.k);
  }
}

// MLA's per-head absorptions (head_matmul, bf16 weights): q_nope -> latent, latent -> v.
void bench_head_matmuls(tf::Ops& ops, int64_t t) {
  const int64_t heads = 64, r = 512, d = 256;
  for (auto [n, k, name] : {std::tuple<int64_t, int64_t, const char*>{r, d, "head_matmul W_UK 64x(256->512)"},
                            {d, r, "head_matmul W_UV 64x(512->256)"}}) {
    const Tensor w = device_bf16(ops, {heads, n, k}, 61, 0.02f);
    const Tensor x = device_f32(ops, {t, heads, k}, 62);
    Tensor out = ops.empty({t, heads, n});
    report(name, t, time_call([&] { ops.head_matmul(out, x, w); }), 2.0 * static_cast<double>(t) * heads * n * k);
  }
}

}  // namespace

void on_fatal_signal(int sig) {
  const char* msg = "cuda_prefill_bench: fatal signal during: ";
  (void)!write(2, msg, std::strlen(msg));
  (void)!write(2, g_stage, std::strlen(g_stage));
  (void)!write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::signal(SIGSEGV, on_fatal_signal);
  std::signal(SIGABRT, on_fatal_signal);
  std::signal(SIGBUS, on_fatal_signal);
  std::vector<int64_t> rows = {2048, 8192};
  bool quick = false;
  std::string only;  // --ops kda,moe,mla,indexer,gemm,long (empty: all)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
      rows.clear();
      for (char* p = argv[++i]; *p;) {
        rows.push_back(std::strtoll(p, &p, 10));
        if (*p == ',') ++p;
        else if (*p) break;
      }
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--mla-heads") == 0 && i + 1 < argc) {
      g_mla_heads = std::strtoll(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
      only = std::string(",") + argv[++i] + ",";
    }
  }
  const auto want = [&](const char* part) { return only.empty() || only.find(std::string(",") + part + ",") != std::string::npos; };
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::fprintf(stderr, "cuda_prefill_bench: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  bool ok = true;
  try {
    g_stage = "bf16 peak";
    peak_tflops = measure_bf16_peak(ops);
    std::printf("measured_bf16_tflops: %.1f (cuBLAS bf16 GEMM 8192^3, fp32 accumulate; the roofline below)\n",
                peak_tflops);
    for (int64_t t : rows) {
      std::printf("== prefill ops, T = %lld rows\n", static_cast<long long>(t));
      g_stage = "kda";
      if (want("kda")) ok = bench_kda(ops, t, t <= 2048) && ok;
      if (quick) continue;
      g_stage = "moe";
      if (want("moe")) {
        bench_moe(ops, t, 8);
        bench_moe(ops, t, 288);
      }
      g_stage = "mla";
      if (want("mla")) {
        bench_mla(ops, t, t, DType::kBF16);
        bench_mla(ops, t, t, DType::kF8E4M3);
        ok = ok && mla_ok;
      }
      g_stage = "indexer";
      if (want("indexer")) ok = bench_indexer(ops, t, t) && ok;
      g_stage = "gemm";
      if (want("gemm")) {
        bench_gemms(ops, t);
        bench_head_matmuls(ops, t);
      }
    }
    // prefill-128k runs in chunks of 1024 rows (the engine's CUDA default): its most
    // expensive chunk is the last, against 32768 pools and 131072 cached latents.
    if (!quick && want("long")) {
      const int64_t chunk = 1024, prompt = 131072;
      std::printf("== prefill-128k, last chunk: T = %lld rows at positions %lld..%lld\n",
                  static_cast<long long>(chunk), static_cast<long long>(prompt - chunk),
                  static_cast<long long>(prompt - 1));
      g_stage = "long indexer";
      ok = bench_indexer(ops, chunk, prompt) && ok;
      g_stage = "long mla";
      bench_mla(ops, chunk, prompt, DType::kBF16);
      bench_mla(ops, chunk, prompt, DType::kF8E4M3);
      ok = ok && mla_ok;
    }
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_prefill_bench: %s\n", e.status().to_string().c_str());
    return 1;
  }
  std::printf("cuda_prefill_bench: %s\n", ok ? "all checks ok" : "CHECK FAILED");
  return ok ? 0 : 2;
}
