// cuda_smallops_bench: the small decode ops of a GLM-5.3-Flash layer at 1 and 8
// rows (issue #8's batch-1 target), each timed inside a CUDA graph of many calls
// (kernel time as in a graphed decode step, launch cost excluded), "before" (the
// kernels the lean ones replaced: small_gemm with one K slice, the ops under
// legacy_small_ops()) beside "after" (the defaults), in one run.
//
// Matmuls stream distinct weight copies (>= 256 MB in all, more than L2) so every
// call reads its weights from HBM as in decode: us per call, weight GB/s and % of
// the measured HBM copy bandwidth. The other ops read activations that the
// previous kernel just wrote (L2-resident), so their figure is latency.
// The mHC pre-step is timed as the model ran it (five ops, or six with the expand
// before it) beside the fused op (two launches): session 7's kernels, today's with f32
// and with bf16 fn; and the Sinkhorn chain alone in cycles.
// Self-checking: "after" is compared with "before" (matmul within 1e-5 relative,
// the fused mHC pre-step within 2e-5 (its folded expand bit for bit), the rest bit
// for bit, router ids equal); a mismatch prints "[smallops] FAIL" and the exit code
// is 1.
//   cuda_smallops_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_mhc_pre.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/legacy_small_ops.h"
#include "kernels/cuda/small_gemm.h"
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

// Seconds per call of `calls` enqueues captured into one graph on `stream` and
// replayed (about 30 ms of replays, at most 20).
double graph_time(cudaStream_t stream, int calls, const std::function<void(int)>& enqueue) {
  return tf::bench::graph_time_per_call(stream, calls, enqueue, {30.0, 20, 0});
}

void report(const char* op, const std::string& shape, int64_t rows, double before, double after, double bytes,
            double hbm, const std::string& extra) {
  std::printf("[smallops] %-22s %-26s rows=%-2lld before %7.2f us  after %7.2f us  x%.2f", op, shape.c_str(),
              static_cast<long long>(rows), before * 1e6, after * 1e6, before / after);
  if (bytes > 0)
    std::printf("  %6.0f GB/s %5.1f%% HBM (before %5.1f%%)", bytes / after / 1e9, 100.0 * bytes / after / hbm,
                100.0 * bytes / before / hbm);
  std::printf("%s\n", extra.c_str());
  std::printf(
      "{\"bench\": \"smallops\", \"op\": \"%s\", \"shape\": \"%s\", \"rows\": %lld, \"us_before\": %.3f, "
      "\"us_after\": %.3f, \"pct_hbm\": %.2f}\n",
      op, shape.c_str(), static_cast<long long>(rows), before * 1e6, after * 1e6,
      bytes > 0 ? 100.0 * bytes / after / hbm : 0.0);
}

void check(bool ok, const char* op, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::printf("[smallops] FAIL %s: %s\n", op, what.c_str());
}

// Largest |a - b| over the largest |a| (floor 1e-30).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return a.size() != b.size() ? INFINITY : worst / scale;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct MatCase {
  const char* name;
  int64_t n, k;
  DType dt;
};

void bench_matmul(tf::Ops& ops, cudaStream_t stream, double hbm, const MatCase& mc) {
  const double wbytes = static_cast<double>(tf::dtype_size(mc.dt)) * mc.n * mc.k;
  const int copies = static_cast<int>(std::clamp(std::ceil(256e6 / wbytes), 1.0, 256.0));
  std::vector<Tensor> ws;
  const Tensor host_w = host_randn({mc.n, mc.k}, 7, 0.02f).to_dtype(mc.dt);
  for (int i = 0; i < copies; ++i) ws.push_back(ops.to_device(host_w));
  const int splits = tf::cuda::small_gemm_k_splits(mc.n, mc.k, 1);
  for (int64_t m : {1, 8}) {
    const Tensor x = ops.to_device(host_randn({m, mc.k}, 11 + static_cast<uint32_t>(m)));
    Tensor out_b = ops.empty({m, mc.n}), out_a = ops.empty({m, mc.n});
    tf::cuda::SmallGemmArgs a;
    a.ldo = mc.n;
    a.x = x.data<float>();
    a.ldx = mc.k;
    a.w_dtype = mc.dt;
    a.m = m;
    a.n = mc.n;
    a.k = mc.k;
    auto run = [&](Tensor& out, int ks, int i) {
      a.out = out.data<float>();
      a.w = ws[i % copies].raw();
      tf::cuda::small_gemm(stream, a, 0, ks);
    };
    const double before = graph_time(stream, copies, [&](int i) { run(out_b, 1, i); });
    const double after = graph_time(stream, copies, [&](int i) { run(out_a, 0, i); });
    BENCH_CUDA(cudaDeviceSynchronize());
    const double d = rel_diff(ops.to_host(out_b).to_vector(), ops.to_host(out_a).to_vector());
    check(d <= 1e-5, mc.name, "k-split result differs by " + std::to_string(d));
    const std::string shape = std::to_string(mc.n) + "x" + std::to_string(mc.k) + " " + tf::dtype_name(mc.dt);
    report(mc.name, shape, m, before, after, wbytes, hbm, "  k_splits " + std::to_string(splits));
  }
}

// Times fn under the legacy switch (before) and without (after); `outs` are
// compared bit for bit after one eager call each.
void bench_op(tf::Ops& ops, cudaStream_t stream, const char* name, const std::string& shape, int64_t rows,
              const std::function<void()>& fn, const std::vector<Tensor*>& outs, double bytes, double hbm,
              bool bit_exact = true) {
  const int calls = 200;
  auto snapshot = [&]() {
    std::vector<std::vector<float>> v;
    for (Tensor* t : outs)
      v.push_back(t->dtype() == DType::kF32 ? ops.to_host(*t).to_vector() : std::vector<float>());
    return v;
  };
  tf::cuda::legacy_small_ops() = true;
  fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  const auto ref = snapshot();
  std::vector<Tensor> ref_raw;
  for (Tensor* t : outs) ref_raw.push_back(ops.to_host(*t));
  const double before = graph_time(stream, calls, [&](int) { fn(); });
  tf::cuda::legacy_small_ops() = false;
  fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  const auto got = snapshot();
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor h = ops.to_host(*outs[i]);
    if (outs[i]->dtype() != DType::kF32) {
      const size_t nbytes = static_cast<size_t>(h.numel()) * tf::dtype_size(h.dtype());
      check(std::memcmp(h.raw(), ref_raw[i].raw(), nbytes) == 0, name,
            "output " + std::to_string(i) + " differs");
    } else if (bit_exact) {
      check(same_bits(ref[i], got[i]), name, "output " + std::to_string(i) + " bits differ");
    } else {
      const double d = rel_diff(ref[i], got[i]);
      check(d <= 1e-6, name, "output " + std::to_string(i) + " differs by " + std::to_string(d));
    }
  }
  const double after = graph_time(stream, calls, [&](int) { fn(); });
  report(name, shape, rows, before, after, bytes, hbm, "");
}

// The mHC pre-step of one site (issue #8): the sequence the model ran (rms_norm, fn
// matmul, mhc_coefficients, mhc_collapse, rms_norm: 5 launches, today's kernels) beside
// the fused Ops::mhc_pre, and the same with the mhc_expand before it (6 launches)
// beside Ops::mhc_expand_pre, graph-replayed. The fused op three ways: session 7's
// kernels (mhc_pre_v1: group Sinkhorn, f32 fn, no PDL on the pass), today's with an
// f32 fn, today's with the bf16 fn the checkpoint has (fn's values are bf16-exact
// in all, so all three give the same bits: checked). Each call reads its own copy of
// fn (> L2 in all: from HBM, as in decode, 90 sites per token); the streams and y were
// just written in decode (L2), so one copy serves. Checked: the fused results within
// 2e-5 relative of the sequence, the folded expand's streams bit-equal.
void bench_mhc_pre(tf::Ops& ops, cudaStream_t stream, double hbm, int64_t rows) {
  const int64_t m = 4, d = 4096, mix = (2 + m) * m;
  const double fn_bytes = 4.0 * mix * m * d;
  const int copies = static_cast<int>(std::ceil(128e6 / fn_bytes));
  std::vector<Tensor> fns, fns16;
  for (int i = 0; i < copies; ++i) {
    const Tensor h16 = host_randn({mix, m * d}, 40 + i, 1.0f / 64).to_dtype(DType::kBF16);
    fns16.push_back(ops.to_device(h16));
    fns.push_back(ops.to_device(h16.to_dtype(DType::kF32)));
  }
  const uint32_t rs = static_cast<uint32_t>(rows);
  const Tensor residual = ops.to_device(host_randn({rows, m, d}, 41 + rs, 1.5f));
  const Tensor y = ops.to_device(host_randn({rows, d}, 45 + rs));
  const Tensor prev_post = ops.to_device(host_randn({rows, m}, 46 + rs, 0.3f));
  const Tensor prev_comb = ops.to_device(host_randn({rows, m, m}, 47 + rs, 0.2f));
  const Tensor base = ops.to_device(host_randn({mix}, 42, 0.5f));
  const Tensor scale = ops.to_device(host_randn({3}, 43, 0.5f));
  const Tensor w = ops.to_device(host_randn({d}, 44, 0.2f));
  // Slots: 0 today's ops as glm5_model.cc ran them (the lean kernels), 1 session 7's
  // fused kernels, 2 today's fused with f32 fn, 3 with bf16 fn.
  constexpr int kSlots = 4;
  Tensor streams[kSlots], post[kSlots], comb[kSlots], out[kSlots];
  for (int v = 0; v < kSlots; ++v) {
    streams[v] = ops.empty({rows, m, d});
    post[v] = ops.empty({rows, m});
    comb[v] = ops.empty({rows, m, m});
    out[v] = ops.empty({rows, d});
  }
  // `expand`: the sublayer output first goes into the streams (else the residual
  // streams are the input).
  int iters = 20;
  auto run = [&](int v, bool expand, int i) {
    const Tensor& fn = v == 3 ? fns16[i % copies] : fns[i % copies];
    if (v > 0 && expand) {
      ops.mhc_expand_pre(streams[v], post[v], comb[v], out[v], y, prev_post, prev_comb, residual, fn, base,
                         scale, w, 1e-5f, 1e-6f, iters);
      return;
    }
    if (expand) ops.mhc_expand(streams[v], y, prev_post, prev_comb, residual);
    const Tensor& x = expand ? streams[v] : residual;
    if (v > 0) {
      ops.mhc_pre(post[v], comb[v], out[v], x, fn, base, scale, w, 1e-5f, 1e-6f, iters);
      return;
    }
    Tensor normed = ops.empty({rows, m * d}), logits = ops.empty({rows, mix}), pre = ops.empty({rows, m});
    Tensor collapsed = ops.empty({rows, d});
    ops.rms_norm(normed, x.reshape({rows, m * d}), Tensor(), 1e-5f);
    ops.matmul(logits, normed, fn);
    ops.mhc_coefficients(pre, post[0], comb[0], logits, base, scale, 1e-6f, 20);
    ops.mhc_collapse(collapsed, x, pre);
    ops.rms_norm(out[0], collapsed, w, 1e-5f);
  };
  // Time slot v (session 7's kernels for slot 1).
  auto time_slot = [&](int v, bool expand) {
    tf::cuda::mhc_pre_v1() = v == 1;
    // An eager call first fills the allocator's cache with the call's temporaries (no
    // cudaMalloc may happen inside the capture).
    run(v, expand, 0);
    const double t = graph_time(stream, copies, [&](int i) { run(v, expand, i); });
    BENCH_CUDA(cudaDeviceSynchronize());
    tf::cuda::mhc_pre_v1() = false;
    return t;
  };
  auto host = [&](const Tensor& t) { return ops.to_host(t).to_vector(); };
  for (bool expand : {false, true}) {
    const char* name = expand ? "mhc_expand_pre" : "mhc_pre";
    double t[kSlots];
    for (int v = 0; v < kSlots; ++v) t[v] = time_slot(v, expand);
    for (int v = 1; v < kSlots; ++v) {
      const std::string slot = v == 1 ? " (session 7)" : v == 2 ? " (f32 fn)" : " (bf16 fn)";
      for (int k = 0; k < 3; ++k) {
        const Tensor& a = k == 0 ? post[0] : k == 1 ? comb[0] : out[0];
        const Tensor& b = k == 0 ? post[v] : k == 1 ? comb[v] : out[v];
        const double diff = rel_diff(host(a), host(b));
        check(diff <= 2e-5, name,
              std::string(k == 0 ? "post" : k == 1 ? "comb" : "out") + slot + " differs from the sequence by " +
                  std::to_string(diff));
      }
      if (expand)
        check(same_bits(host(streams[0]), host(streams[v])), name,
              "the folded expand's streams" + slot + " differ from mhc_expand's");
      if (v >= 2)  // today's kernels, either fn: session 7's bits
        check(same_bits(host(post[1]), host(post[v])) && same_bits(host(comb[1]), host(comb[v])) &&
                  same_bits(host(out[1]), host(out[v])),
              name, "the outputs" + slot + " differ from session 7's kernels' bits");
    }
    // fn once, the streams once (plus y and the residual's read when expanding, and the
    // new streams' write).
    const double act = 4.0 * rows * (expand ? 2 * m * d + d : m * d);
    report(expand ? "mhc_expand_pre(6->2)" : "mhc_pre(5 ops->2)", "hc 4 x 4096, fn 24x16384 bf16", rows, t[0],
           t[3], fn_bytes / 2 + act, hbm,
           "  (x90 sites/token: " + std::to_string((t[0] - t[3]) * 90 * 1e6) + " us saved)");
    report(expand ? "mhc_expand_pre s7->now" : "mhc_pre s7->now", "session 7 (f32 fn) -> bf16 fn", rows, t[1],
           t[3], fn_bytes / 2 + act, hbm,
           "  (x90 sites/token: " + std::to_string((t[1] - t[3]) * 90 * 1e6) + " us saved)");
    report(expand ? "mhc_expand_pre s7->f32" : "mhc_pre s7->f32", "session 7 -> today, both f32 fn", rows, t[1],
           t[2], fn_bytes + act, hbm, "");
    // Where today's time goes: without programmatic dependent launch (the finish kernel
    // then starts only after the pass, the pass only after the previous kernel; the same
    // bits), and with no Sinkhorn iterations (the coefficient block's serial chain).
    const std::vector<float> pdl_on = host(out[3]);
    tf::cuda::mhc_pre_pdl() = false;
    const double no_pdl = time_slot(3, expand);
    check(same_bits(pdl_on, host(out[3])), name, "PDL changes the bits");
    tf::cuda::mhc_pre_pdl() = true;
    report(expand ? "mhc_expand_pre PDL" : "mhc_pre PDL", "off -> on (bf16 fn)", rows, no_pdl, t[3], 0, hbm, "");
    // Rows per pass block at 2 to 8 rows: the setting (8 unless TF_MHC_PASS_ROWS) against the
    // fewest of 2, 4, 8 that hold the rows (mhc_pre_pass_rows() = 0); the same bits.
    if (rows >= 2 && rows <= 8) {
      const int setting = tf::cuda::mhc_pre_pass_rows();
      tf::cuda::mhc_pre_pass_rows() = 0;
      const double fewest = time_slot(3, expand);
      check(same_bits(pdl_on, host(out[3])), name, "the pass's rows per block change the bits");
      tf::cuda::mhc_pre_pass_rows() = setting;
      report(expand ? "mhc_expand_pre pass rows" : "mhc_pre pass rows", "setting -> fewest (bf16 fn)", rows,
             t[3], fewest, 0, hbm, "");
    }
    iters = 0;
    const double no_sinkhorn = time_slot(3, expand);
    // 19 iterations take the chain's runtime loop (20: fully unrolled): which code shape
    // is faster inside the kernel, where the instruction cache may be cold.
    iters = 19;
    const double looped = time_slot(3, expand);
    iters = 20;
    report(expand ? "mhc_expand_pre iters" : "mhc_pre iters", "sinkhorn 20 -> 0 (timing only)", rows, t[3],
           no_sinkhorn, 0, hbm, "");
    report(expand ? "mhc_expand_pre loop" : "mhc_pre loop", "20 unrolled -> 19 looped (timing)", rows, t[3],
           looped, 0, hbm, "");
    std::fflush(stdout);
  }
}

// The mHC pre-step of one site at prefill rows (a 1,024-token chunk is 1,024 rows): the
// decode pass (TF_MHC_ROWS_PASS=0) before, the rows pass (cuda_mhc_pre_rows.cuh) after,
// bf16 fn as the checkpoint has it, mhc_pre and mhc_expand_pre, graph-replayed; mhc_expand
// alone beside them as a memory-bound reference. Bytes: the streams once (expanding: the
// residual and y read, the new streams written) plus the finish kernel's read of the
// streams and write of the output. Checked: the two passes within 2e-5 relative.
void bench_mhc_pre_rows(tf::Ops& ops, cudaStream_t stream, double hbm, int64_t rows) {
  const int64_t m = 4, d = 4096, mix = (2 + m) * m;
  const uint32_t rs = static_cast<uint32_t>(rows);
  const Tensor fn = ops.to_device(host_randn({mix, m * d}, 60, 1.0f / 64).to_dtype(DType::kBF16));
  const Tensor residual = ops.to_device(host_randn({rows, m, d}, 61 + rs, 1.5f));
  const Tensor y = ops.to_device(host_randn({rows, d}, 62 + rs));
  const Tensor prev_post = ops.to_device(host_randn({rows, m}, 63 + rs, 0.3f));
  const Tensor prev_comb = ops.to_device(host_randn({rows, m, m}, 64 + rs, 0.2f));
  const Tensor base = ops.to_device(host_randn({mix}, 42, 0.5f));
  const Tensor scale = ops.to_device(host_randn({3}, 43, 0.5f));
  const Tensor w = ops.to_device(host_randn({d}, 44, 0.2f));
  Tensor streams[2], post[2], comb[2], out[2];
  for (int v = 0; v < 2; ++v) {
    streams[v] = ops.empty({rows, m, d});
    post[v] = ops.empty({rows, m});
    comb[v] = ops.empty({rows, m, m});
    out[v] = ops.empty({rows, d});
  }
  auto host = [&](const Tensor& t) { return ops.to_host(t).to_vector(); };
  for (bool expand : {false, true}) {
    double t[2];
    for (int v = 0; v < 2; ++v) {
      tf::cuda::mhc_pre_rows_pass() = v == 1;
      auto run = [&]() {
        if (expand)
          ops.mhc_expand_pre(streams[v], post[v], comb[v], out[v], y, prev_post, prev_comb, residual, fn, base,
                             scale, w, 1e-5f, 1e-6f, 20);
        else
          ops.mhc_pre(post[v], comb[v], out[v], residual, fn, base, scale, w, 1e-5f, 1e-6f, 20);
      };
      run();  // fills the allocator's cache before the capture
      t[v] = graph_time(stream, 4, [&](int) { run(); });
      BENCH_CUDA(cudaDeviceSynchronize());
    }
    tf::cuda::mhc_pre_rows_pass() = true;
    const char* name = expand ? "mhc_expand_pre rows" : "mhc_pre rows";
    for (int k = 0; k < 2; ++k) {
      const double diff = rel_diff(host(k == 0 ? comb[0] : out[0]), host(k == 0 ? comb[1] : out[1]));
      check(diff <= 2e-5, name,
            std::string(k == 0 ? "comb" : "out") + " of the rows pass differs by " + std::to_string(diff));
    }
    const double bytes = 4.0 * rows * (expand ? 2 * m * d + d : 0) + 4.0 * rows * (m * d + d) + 2.0 * mix * m * d;
    report(name, "decode pass -> rows pass", rows, t[0], t[1], bytes, hbm, "");
  }
  Tensor expanded = ops.empty({rows, m, d});
  const double te =
      graph_time(stream, 4, [&](int) { ops.mhc_expand(expanded, y, prev_post, prev_comb, residual); });
  report("mhc_expand (reference)", "hc 4 x 4096", rows, te, te, 4.0 * rows * (2 * m * d + d), hbm, "");
  std::fflush(stdout);
}

// The coefficient chain alone on one warp (cuda::mhc_sinkhorn_probe): clock64 cycles
// per row of the group Sinkhorn (session 7) and mhc_coeff_row_fast, their bits, and
// the fast division against IEEE division on 2^26 pairs.
void bench_mhc_sinkhorn(tf::Ops& ops, cudaStream_t stream) {
  const Tensor logits = ops.to_device(host_randn({64, 24}, 48, 2.0f));
  const Tensor base = ops.to_device(host_randn({24}, 42, 0.5f));
  const Tensor scale = ops.to_device(host_randn({3}, 43, 0.5f));
  for (int iters : {20, 1}) {
    const tf::cuda::MhcSinkhornProbe p = tf::cuda::mhc_sinkhorn_probe(stream, logits, base, scale, 1e-6f, iters);
    std::printf(
        "[smallops] mhc_sinkhorn chain        iters=%-2d one warp: cycles per row old %6.0f  new %6.0f  x%.2f  bits "
        "%s, fast division: %lld mismatches in %lld pairs\n",
        iters, p.cycles_old, p.cycles_new, p.cycles_old / std::max(p.cycles_new, 1.0),
        p.bits_equal ? "equal" : "DIFFER", static_cast<long long>(p.div_mismatches),
        static_cast<long long>(p.div_checked));
    std::printf(
        "[smallops] mhc_sinkhorn variants     iters=%-2d cycles (exploratory): a / b %6.0f (bits %s), checked per "
        "division %6.0f (bits %s), unchecked %6.0f (bits %s)\n",
        iters, p.cycles_alt[0], p.alt_bits_equal[0] ? "equal" : "differ", p.cycles_alt[1],
        p.alt_bits_equal[1] ? "equal" : "differ", p.cycles_alt[2], p.alt_bits_equal[2] ? "equal" : "differ");
    check(p.bits_equal, "mhc_sinkhorn", "mhc_coeff_row_fast differs from the group code");
    check(p.div_mismatches == 0, "mhc_sinkhorn", "the fast division differs from a / b");
  }
  std::fflush(stdout);
}

}  // namespace

// --mhc-rows: only the prefill-rows mHC pre-step (bench_mhc_pre_rows), e.g. under a profiler.
int main(int argc, char** argv) {
  const bool only_mhc_rows = argc > 1 && std::string(argv[1]) == "--mhc-rows";
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::fprintf(stderr, "cuda_smallops_bench: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(tf::cuda_ops_stream(ops));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("cuda_smallops_bench: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::fflush(stdout);
  const size_t copy_bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, copy_bytes));
  BENCH_CUDA(cudaMalloc(&b, copy_bytes));
  BENCH_CUDA(cudaMemcpy(b, a, copy_bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < 5; ++i) BENCH_CUDA(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice));
  BENCH_CUDA(cudaEventRecord(e1));
  BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  const double hbm = 2.0 * 5 * copy_bytes / (ms / 1e3);
  cudaFree(a);
  cudaFree(b);
  std::printf("[smallops] measured HBM bandwidth (D2D copy): %.0f GB/s\n", hbm / 1e9);

  try {
    if (only_mhc_rows) {
      for (int64_t rows : {256, 1024, 4096}) bench_mhc_pre_rows(ops, stream, hbm, rows);
      std::printf("[smallops] %s (%d check failures)\n", g_failures == 0 ? "ALL CHECKS PASSED" : "CHECKS FAILED",
                  g_failures);
      return g_failures == 0 ? 0 : 1;
    }
    // The decode-step matmuls of the synthetic GLM-5.3-Flash geometry (hidden 4096).
    const MatCase mats[] = {
        {"kda_f_a/g_a", 128, 4096, DType::kBF16},     {"kda_f_b/g_b", 8192, 128, DType::kBF16},
        {"kda_b_proj", 64, 4096, DType::kBF16},       {"moe_router_288", 288, 4096, DType::kF32},
        {"moe_router_8", 8, 4096, DType::kF32},       {"mhc_fn", 24, 16384, DType::kF32},
        {"idx_wk/compress", 128, 4096, DType::kBF16}, {"idx_weights_proj", 32, 4096, DType::kBF16},
        {"idx_wq_b", 4096, 1536, DType::kBF16},       {"mla_q_a(bf16)", 1536, 4096, DType::kBF16},
        {"mla_kv_a(bf16)", 512, 4096, DType::kBF16},
    };
    for (const MatCase& mc : mats) {
      bench_matmul(ops, stream, hbm, mc);
      std::fflush(stdout);
    }

    for (int64_t rows : {1, 8}) {
      const uint32_t s = static_cast<uint32_t>(rows);
      for (auto [d, with_w] :
           {std::pair<int64_t, bool>{4096, true}, {16384, false}, {1536, true}, {512, true}}) {
        const Tensor x = ops.to_device(host_randn({rows, d}, 20 + s));
        const Tensor w = with_w ? ops.to_device(host_randn({d}, 21)) : Tensor();
        Tensor y = ops.empty({rows, d});
        bench_op(
            ops, stream, "rms_norm", "d=" + std::to_string(d) + (with_w ? "" : " no weight"), rows,
            [&]() { ops.rms_norm(y, x, w, 1e-6f); }, {&y}, 0, hbm, false);
      }
      {
        const Tensor x = ops.to_device(host_randn({rows, 8192}, 22 + s));
        const Tensor g = ops.to_device(host_randn({rows, 8192}, 23 + s));
        const Tensor w = ops.to_device(host_randn({128}, 24));
        Tensor y = ops.empty({rows, 8192});
        bench_op(
            ops, stream, "gated_rms_norm", "64 heads x 128", rows,
            [&]() { ops.gated_rms_norm(y, x, g, w, 1e-6f); }, {&y}, 0, hbm, false);
      }
      {
        const int64_t m = 4, width = (2 + m) * m;
        const Tensor mix = ops.to_device(host_randn({rows, width}, 25 + s));
        const Tensor base = ops.to_device(host_randn({width}, 26, 0.1f));
        const Tensor scale = ops.to_device(host_randn({3}, 27, 0.5f));
        Tensor pre = ops.empty({rows, m}), post = ops.empty({rows, m}), comb = ops.empty({rows, m, m});
        bench_op(
            ops, stream, "mhc_coefficients", "hc 4, sinkhorn 20", rows,
            [&]() { ops.mhc_coefficients(pre, post, comb, mix, base, scale, 1e-6f, 20); },
            {&pre, &post, &comb}, 0, hbm);
        const Tensor streams = ops.to_device(host_randn({rows, m, 4096}, 28 + s));
        Tensor collapsed = ops.empty({rows, 4096});
        bench_op(
            ops, stream, "mhc_collapse", "hc 4 x 4096", rows,
            [&]() { ops.mhc_collapse(collapsed, streams, pre); }, {&collapsed}, 0, hbm);
        Tensor expanded = ops.empty({rows, m, 4096});
        bench_op(
            ops, stream, "mhc_expand", "hc 4 x 4096", rows,
            [&]() { ops.mhc_expand(expanded, collapsed, post, comb, streams); }, {&expanded}, 0, hbm);
      }
      if (rows == 1) bench_mhc_sinkhorn(ops, stream);
      if (rows == 8) bench_mhc_pre(ops, stream, hbm, 4);  // a decode-4 step's rows
      bench_mhc_pre(ops, stream, hbm, rows);
      for (int64_t e : {288, 8}) {
        const Tensor logits = ops.to_device(host_randn({rows, e}, 29 + s));
        const Tensor bias = ops.to_device(host_randn({e}, 30, 0.01f));
        Tensor wts = ops.empty({rows, 8}), ids = ops.empty({rows, 8}, DType::kI32);
        bench_op(
            ops, stream, "moe_route", "E=" + std::to_string(e) + " top-8", rows,
            [&]() { ops.moe_route(wts, ids, logits, bias, 1, 1, 8, true, 2.5f); }, {&wts, &ids}, 0, hbm);
      }
      {
        const Tensor x = ops.to_device(host_randn({rows, 4096}, 31 + s));
        const Tensor y = ops.to_device(host_randn({rows, 4096}, 32 + s));
        Tensor z = ops.empty({rows, 4096});
        bench_op(
            ops, stream, "add", "4096", rows, [&]() { ops.add(z, x, y); }, {&z}, 0, hbm);
        const Tensor gu = ops.to_device(host_randn({rows, 4096}, 33 + s));
        Tensor act = ops.empty({rows, 2048});
        bench_op(
            ops, stream, "swiglu", "2x2048", rows, [&]() { ops.swiglu(act, gu, 1e30f); }, {&act}, 0, hbm);
        const Tensor bl = ops.to_device(host_randn({rows, 64}, 34 + s));
        Tensor beta = ops.empty({rows, 64});
        bench_op(
            ops, stream, "sigmoid", "64", rows, [&]() { ops.sigmoid(beta, bl); }, {&beta}, 0, hbm);
      }
      std::fflush(stdout);
    }
    for (int64_t rows : {256, 1024, 4096}) bench_mhc_pre_rows(ops, stream, hbm, rows);
  } catch (const tf::StatusError& e) {
    std::fprintf(stderr, "cuda_smallops_bench: %s\n", e.status().to_string().c_str());
    return 1;
  }
  std::printf("[smallops] %s (%d check failures)\n", g_failures == 0 ? "ALL CHECKS PASSED" : "CHECKS FAILED",
              g_failures);
  return g_failures == 0 ? 0 : 1;
}
