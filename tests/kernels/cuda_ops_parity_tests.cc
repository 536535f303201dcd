// Backend parity: every op of the CUDA backend against the CPU reference over
// awkward shapes (rows 1, 3, 17, 64, 129; odd widths; f32 and bf16 weights; f32,
// bf16 and fp8 latent caches). Each comparison states its tolerance and prints
// the largest error seen as "[parity] <op> ..." so the GPU log records it.
//
// Tolerances: ops whose CUDA kernel keeps the reference's summation order are
// compared at 1e-6 (relative to the largest reference magnitude; expf and FMA
// contraction differ by an ulp or so); ops whose CUDA kernel reduces in a tree
// (matmul, softmax, attention) and the recurrences (errors compound over tokens)
// at 1e-5; cuBLAS with bf16 weights (activations rounded to bf16, above 64 rows)
// at 1e-2 (moe_experts likewise: 1e-5, 1e-2 for bf16 above 64 tokens, where experts use
// matmul). Indices and integer outputs must be equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu_cuda_test.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/device_memory.h"
#include "mla_decode_precision.h"
#include "test_tensors.h"

namespace tf {
namespace {

const int64_t kRows[] = {1, 3, 17, 64, 129};

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Values rounded to bf16 (kept as f32): what the CPU reference sees of bf16 weights.
Tensor bf16_rounded(const Tensor& t) { return t.to_dtype(DType::kBF16).to_f32(); }

// Largest |a - b| relative to the largest |a| (floor 1; sentinels such as -FLT_MAX
// do not count towards the scale, so a wrong sentinel shows as a huge error).
double rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1;
  for (float x : a)
    if (std::fabs(x) < 1e30f) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::isnan(a[i]) && std::isnan(b[i]) ? worst : INFINITY;
    if (a[i] == b[i]) continue;  // also equal infinities
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

class CudaParity : public CpuCudaTest {
 protected:
  // Compares a CPU result with a device result; records the error.
  void expect_close(const std::string& what, const Tensor& ref, const Tensor& dev, double tol) {
    ASSERT_EQ(ref.shape(), dev.shape()) << what;
    const Tensor got = down(dev);
    const double e = rel_err(ref, got);
    std::printf("[parity] %-44s max rel err %.3g (tol %.0e)\n", what.c_str(), e, tol);
    EXPECT_LE(e, tol) << what;
  }
  void expect_equal_ints(const std::string& what, const Tensor& ref, const Tensor& dev) {
    const Tensor got = down(dev);
    ASSERT_EQ(ref.numel(), got.numel()) << what;
    int64_t bad = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) bad += ref.data<int32_t>()[i] != got.data<int32_t>()[i];
    std::printf("[parity] %-44s %lld of %lld ints differ\n", what.c_str(), static_cast<long long>(bad),
                static_cast<long long>(ref.numel()));
    EXPECT_EQ(bad, 0) << what;
  }
};

// ---- linear ------------------------------------------------------------------

TEST_F(CudaParity, MatmulF32AndBf16Weights) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{67, 131}, {256, 512}, {5, 1}, {1024, 4096}}) {
    const Tensor w = randn({n, k}, 11, 0.1f), wb = bf16_rounded(w);
    const Tensor dw = up(w), dwb = up(w.to_dtype(DType::kBF16));
    for (int64_t m : kRows) {
      const Tensor x = randn({m, k}, 12 + static_cast<uint32_t>(m));
      const Tensor dx = up(x);
      for (bool acc : {false, true}) {
        const Tensor init = randn({m, n}, 13);
        Tensor ref = init.contiguous(), refb = init.contiguous();
        cpu_->matmul(ref, x, w, acc);
        cpu_->matmul(refb, x, wb, acc);
        Tensor out = up(init), outb = up(init);
        gpu_->matmul(out, dx, dw, acc);
        gpu_->matmul(outb, dx, dwb, acc);
        const std::string tag = " M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                                (acc ? " acc" : "");
        expect_close("matmul f32" + tag, ref, out, 1e-5);
        expect_close("matmul bf16" + tag, refb, outb, m > 64 ? 1e-2 : 1e-5);
      }
    }
  }
}

TEST_F(CudaParity, MatmulRowsDoNotDependOnTheBatch) {
  const int64_t n = 97, k = 304;
  const Tensor w = up(randn({n, k}, 21, 0.1f).to_dtype(DType::kBF16));
  const Tensor x = randn({64, k}, 22);
  Tensor all = gpu_->empty({64, n});
  gpu_->matmul(all, up(x), w);
  const Tensor h_all = down(all);
  for (int64_t r : {0, 5, 17, 63}) {
    Tensor one = gpu_->empty({1, n});
    gpu_->matmul(one, up(x.slice(0, r, r + 1).contiguous()), w);
    const Tensor h = down(one);
    for (int64_t c = 0; c < n; ++c)
      ASSERT_EQ(float_bits(h.data<float>()[c]), float_bits(h_all.data<float>()[r * n + c])) << r << "," << c;
  }
  // The same row from a buffer that is not 16-byte aligned takes the element-wise
  // path of the kernel: the same arithmetic, the same bits.
  Tensor buf = gpu_->empty({k + 1});
  Tensor view = Tensor::view_of(static_cast<float*>(buf.raw()) + 1, {1, k}, DType::kF32, buf.device());
  gpu_->copy(view, x.slice(0, 5, 6).contiguous());
  Tensor one = gpu_->empty({1, n});
  gpu_->matmul(one, view, w);
  const Tensor h = down(one);
  for (int64_t c = 0; c < n; ++c)
    ASSERT_EQ(float_bits(h.data<float>()[c]), float_bits(h_all.data<float>()[5 * n + c])) << "unaligned " << c;
}

TEST_F(CudaParity, HeadMatmul) {
  const int64_t h = 3, n = 33, k = 65;
  const Tensor w = randn({h, n, k}, 31, 0.2f);
  for (int64_t t : kRows) {
    const Tensor x = randn({t, h, k}, 32);
    for (bool bf16 : {false, true}) {
      const Tensor wr = bf16 ? bf16_rounded(w) : w;
      Tensor ref = Tensor::empty({t, h, n}, DType::kF32);
      cpu_->head_matmul(ref, x, wr);
      Tensor out = gpu_->empty({t, h, n});
      gpu_->head_matmul(out, up(x), up(bf16 ? w.to_dtype(DType::kBF16) : w));
      expect_close(std::string("head_matmul ") + (bf16 ? "bf16" : "f32") + " T=" + std::to_string(t), ref, out,
                   bf16 && t > 64 ? 1e-2 : 1e-5);
    }
  }
}

TEST_F(CudaParity, EmbeddingGatherScatter) {
  const int64_t vocab = 50, d = 77;
  const Tensor table = randn({vocab, d}, 41);
  const Tensor ids = ints({0, 49, 3, 3, 17, 1, 48});
  for (bool bf16 : {false, true}) {
    Tensor ref = Tensor::empty({7, d}, DType::kF32);
    cpu_->embedding(ref, bf16 ? bf16_rounded(table) : table, ids);
    Tensor out = gpu_->empty({7, d});
    gpu_->embedding(out, up(bf16 ? table.to_dtype(DType::kBF16) : table), up(ids));
    expect_close(std::string("embedding ") + (bf16 ? "bf16" : "f32"), ref, out, 0.0);
  }
  const Tensor x = randn({9, d}, 42);
  const Tensor idx = ints({8, 0, 3, 3, 5});
  Tensor g_ref = Tensor::empty({5, d}, DType::kF32);
  cpu_->gather_rows(g_ref, x, idx);
  Tensor g = gpu_->empty({5, d});
  gpu_->gather_rows(g, up(x), up(idx));
  expect_close("gather_rows", g_ref, g, 0.0);
  const Tensor base = randn({9, d}, 43), src = randn({5, d}, 44), sc = randn({5}, 45);
  Tensor s_ref = base.contiguous();
  cpu_->scatter_add_rows(s_ref, src, idx, sc);
  Tensor s = up(base);
  gpu_->scatter_add_rows(s, up(src), up(idx), up(sc));
  expect_close("scatter_add_rows (repeated rows)", s_ref, s, 1e-6);
}

TEST_F(CudaParity, BadTokenIdIsReportedNotACrash) {
  const Tensor table = up(randn({10, 8}, 46));
  Tensor out = gpu_->empty({2, 8});
  gpu_->embedding(out, table, up(ints({3, 10})));
  try {
    (void)down(out);
    FAIL() << "expected an error for token id 10";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(e.status().message().find("embedding"), std::string::npos) << e.what();
  }
  // The error is reported once; the backend keeps working.
  Tensor ok = gpu_->empty({1, 8});
  gpu_->embedding(ok, table, up(ints({2})));
  EXPECT_NO_THROW((void)down(ok));
}

TEST_F(CudaParity, ArgumentErrorsNameTheOp) {
  Tensor out = gpu_->empty({3, 4});
  const Tensor host_x = randn({3, 5}, 47);
  try {
    gpu_->matmul(out, host_x, up(randn({4, 5}, 48)));
    FAIL() << "expected an error for a host tensor";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("matmul x"), std::string::npos) << e.what();
  }
}

// ---- norms and elementwise ------------------------------------------------------

TEST_F(CudaParity, Norms) {
  for (int64_t d : {1, 7, 1000, 4096}) {
    const Tensor w = randn({d}, 51, 0.5f, 1.0f), b = randn({d}, 52), gsrc = randn({d}, 53);
    for (int64_t m : kRows) {
      const Tensor x = randn({m, d}, 54, 3.0f, 0.5f), gate = randn({m, d}, 55);
      const std::string tag = " M=" + std::to_string(m) + " D=" + std::to_string(d);
      Tensor ref = Tensor::empty({m, d}, DType::kF32);
      Tensor out = gpu_->empty({m, d});
      cpu_->rms_norm(ref, x, w, 1e-6f);
      gpu_->rms_norm(out, up(x), up(w), 1e-6f);
      expect_close("rms_norm" + tag, ref, out, 1e-6);
      cpu_->rms_norm(ref, x, Tensor(), 1e-6f);
      gpu_->rms_norm(out, up(x), Tensor(), 1e-6f);
      expect_close("rms_norm unweighted" + tag, ref, out, 1e-6);
      cpu_->layer_norm(ref, x, w, b, 1e-6f);
      gpu_->layer_norm(out, up(x), up(w), up(b), 1e-6f);
      expect_close("layer_norm" + tag, ref, out, 1e-6);
      cpu_->gated_rms_norm(ref, x, gate, w, 1e-5f);
      gpu_->gated_rms_norm(out, up(x), up(gate), up(w), 1e-5f);
      expect_close("gated_rms_norm" + tag, ref, out, 1e-6);
    }
  }
}

TEST_F(CudaParity, Elementwise) {
  for (int64_t m : kRows) {
    const int64_t d = 131;
    const Tensor gu = randn({m, 2 * d}, 61, 6.0f), a = randn({m, d}, 62), b = randn({m, d}, 63);
    const std::string tag = " M=" + std::to_string(m);
    Tensor ref = Tensor::empty({m, d}, DType::kF32);
    Tensor out = gpu_->empty({m, d});
    cpu_->swiglu(ref, gu, 7.0f);
    gpu_->swiglu(out, up(gu), 7.0f);
    expect_close("swiglu limit 7" + tag, ref, out, 1e-6);
    cpu_->add(ref, a, b);
    gpu_->add(out, up(a), up(b));
    expect_close("add" + tag, ref, out, 0.0);
    cpu_->scale(ref, a, -0.37f);
    gpu_->scale(out, up(a), -0.37f);
    expect_close("scale" + tag, ref, out, 0.0);
    cpu_->sigmoid(ref, a);
    gpu_->sigmoid(out, up(a));
    expect_close("sigmoid" + tag, ref, out, 1e-6);
    const Tensor wide = randn({m, 1001}, 64, 4.0f);
    Tensor sref = Tensor::empty({m, 1001}, DType::kF32);
    Tensor sout = gpu_->empty({m, 1001});
    cpu_->softmax(sref, wide);
    gpu_->softmax(sout, up(wide));
    expect_close("softmax N=1001" + tag, sref, sout, 1e-5);
  }
  // In place, as the model calls sigmoid(beta, beta).
  const Tensor a = randn({3, 5}, 65);
  Tensor ref = a.contiguous();
  cpu_->sigmoid(ref, ref);
  Tensor out = up(a);
  gpu_->sigmoid(out, out);
  expect_close("sigmoid in place", ref, out, 1e-6);
}

TEST_F(CudaParity, TopkBothTieRules) {
  for (int64_t n : {1, 37, 300, 5000, 70000}) {
    for (int64_t m : {1, 3, 17}) {
      // Few distinct values: many ties, also at the k-th place.
      Tensor x = randn({m, n}, 71 + static_cast<uint32_t>(n));
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i] * 2.0f) / 2.0f;
      for (int k : {1, 8, 2048, static_cast<int>(n)}) {
        if (k > n) continue;
        for (TopkTies ties : {TopkTies::kLowerIndex, TopkTies::kTorchCpu}) {
          Tensor rv = Tensor::empty({m, k}, DType::kF32), ri = Tensor::empty({m, k}, DType::kI32);
          cpu_->topk(rv, ri, x, k, ties);
          Tensor gv = gpu_->empty({m, k}), gi = gpu_->empty({m, k}, DType::kI32);
          gpu_->topk(gv, gi, up(x), k, ties);
          const std::string tag = std::string(ties == TopkTies::kLowerIndex ? " lower-index" : " torch-cpu") +
                                  " M=" + std::to_string(m) + " N=" + std::to_string(n) + " k=" + std::to_string(k);
          expect_close("topk values" + tag, rv, gv, 0.0);
          expect_equal_ints("topk indices" + tag, ri, gi);
        }
      }
    }
  }
}

// ---- mHC -------------------------------------------------------------------------

TEST_F(CudaParity, HyperConnections) {
  const int64_t mm = 4, width = (2 + mm) * mm, d = 259;
  const Tensor base = randn({width}, 81, 0.5f), sc = Tensor::from_floats({3}, {0.7f, 1.3f, 2.0f});
  for (int64_t t : kRows) {
    const Tensor mix = randn({t, width}, 82, 2.0f);
    Tensor pre = Tensor::empty({t, mm}, DType::kF32), post = Tensor::empty({t, mm}, DType::kF32),
           comb = Tensor::empty({t, mm, mm}, DType::kF32);
    cpu_->mhc_coefficients(pre, post, comb, mix, base, sc, 1e-6f, 20);
    Tensor gpre = gpu_->empty({t, mm}), gpost = gpu_->empty({t, mm}), gcomb = gpu_->empty({t, mm, mm});
    gpu_->mhc_coefficients(gpre, gpost, gcomb, up(mix), up(base), up(sc), 1e-6f, 20);
    const std::string tag = " T=" + std::to_string(t);
    expect_close("mhc pre" + tag, pre, gpre, 1e-6);
    expect_close("mhc post" + tag, post, gpost, 1e-6);
    expect_close("mhc comb (20 Sinkhorn iters)" + tag, comb, gcomb, 1e-5);
    const Tensor streams = randn({t, mm, d}, 83), y = randn({t, d}, 84);
    Tensor col = Tensor::empty({t, d}, DType::kF32);
    cpu_->mhc_collapse(col, streams, pre);
    Tensor gcol = gpu_->empty({t, d});
    gpu_->mhc_collapse(gcol, up(streams), up(pre));
    expect_close("mhc_collapse" + tag, col, gcol, 1e-6);
    Tensor ex = Tensor::empty({t, mm, d}, DType::kF32);
    cpu_->mhc_expand(ex, y, post, comb, streams);
    Tensor gex = gpu_->empty({t, mm, d});
    gpu_->mhc_expand(gex, up(y), up(post), up(comb), up(streams));
    expect_close("mhc_expand" + tag, ex, gex, 1e-6);
  }
}

// ---- KDA ---------------------------------------------------------------------------

TEST_F(CudaParity, CausalConvCarriesItsState) {
  const int64_t c = 67, kw = 4;
  const Tensor w = randn({c, kw}, 91, 0.5f);
  Tensor st = randn({kw - 1, c}, 92);
  Tensor gst = up(st);
  const Tensor dw = up(w);
  // Calls of 1 (fewer rows than the state), 3, 17 and 129 rows in a row.
  uint32_t seed = 93;
  for (int64_t t : {1, 3, 17, 129, 1}) {
    const Tensor x = randn({t, c}, seed++);
    Tensor ref = Tensor::empty({t, c}, DType::kF32);
    cpu_->causal_conv1d_silu(ref, x, st, w);
    Tensor out = gpu_->empty({t, c});
    gpu_->causal_conv1d_silu(out, up(x), gst, dw);
    const std::string tag = " T=" + std::to_string(t);
    expect_close("causal_conv1d_silu" + tag, ref, out, 1e-6);
    expect_close("causal_conv1d_silu state" + tag, st, gst, 0.0);
  }
}

TEST_F(CudaParity, KdaGate) {
  const int64_t h = 3, dk = 20;
  const Tensor dt = randn({h * dk}, 101), alog = randn({h}, 102, 0.5f);
  for (int64_t t : kRows) {
    const Tensor f = randn({t, h * dk}, 103, 3.0f);
    for (bool lb : {false, true}) {
      Tensor ref = Tensor::empty({t, h * dk}, DType::kF32);
      cpu_->kda_gate(ref, f, dt, alog, lb, -5.0f);
      Tensor out = gpu_->empty({t, h * dk});
      gpu_->kda_gate(out, up(f), up(dt), up(alog), lb, -5.0f);
      expect_close(std::string("kda_gate") + (lb ? " lower bound" : " softplus") + " T=" + std::to_string(t), ref,
                   out, 1e-6);
    }
  }
}

TEST_F(CudaParity, KdaRecurrentAndChunked) {
  for (auto [h, dk, dv] : {std::tuple<int64_t, int64_t, int64_t>{2, 128, 128}, {3, 20, 45}}) {
    for (int64_t t : kRows) {
      const Tensor q = randn({t, h, dk}, 111), k = randn({t, h, dk}, 112), v = randn({t, h, dv}, 113);
      // Gates as kda_gate makes them (lower bound -5: g in (-5, 0)).
      Tensor g = randn({t, h, dk}, 114, 0.3f, -0.2f);
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::max(-5.0f, std::min(0.0f, g.data<float>()[i]));
      Tensor beta = randn({t, h}, 115);
      for (int64_t i = 0; i < beta.numel(); ++i) beta.data<float>()[i] = 1.0f / (1.0f + std::exp(-beta.data<float>()[i]));
      const Tensor s0 = randn({h, dk, dv}, 116, 0.1f);
      for (bool chunked : {false, true}) {
        Tensor st = s0.contiguous();
        Tensor ref = Tensor::empty({t, h, dv}, DType::kF32);
        Tensor gst = up(s0), out = gpu_->empty({t, h, dv});
        if (chunked) {
          cpu_->kda_chunked(ref, q, k, v, g, beta, st, 64);
          gpu_->kda_chunked(out, up(q), up(k), up(v), up(g), up(beta), gst, 64);
        } else {
          cpu_->kda_recurrent(ref, q, k, v, g, beta, st);
          gpu_->kda_recurrent(out, up(q), up(k), up(v), up(g), up(beta), gst);
        }
        const std::string tag = std::string(chunked ? "kda_chunked" : "kda_recurrent") + " H=" + std::to_string(h) +
                                " Dk=" + std::to_string(dk) + " Dv=" + std::to_string(dv) + " T=" + std::to_string(t);
        // The chunked op on tensor cores (3xTF32, cuda_kda_chunked.cu): 1e-4 as its own tests.
        const double tol = chunked ? 1e-4 : 1e-5;
        expect_close(tag, ref, out, tol);
        expect_close(tag + " state", st, gst, tol);
      }
    }
  }
}

// ---- MLA + DSA -------------------------------------------------------------------------

TEST_F(CudaParity, LatentStoreAndSparseAttention) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t r : {72, 512}) {
      const int64_t page_size = 7, num_pages = 20, tokens = 100, heads = 5;
      const int64_t es = static_cast<int64_t>(dtype_size(dt));
      // A scrambled page table over the physical pages.
      std::vector<int32_t> table(num_pages);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(121));
      Tensor hpages = Tensor::zeros({num_pages * page_size * r * es}, DType::kU8);
      Tensor hscales = Tensor::zeros({num_pages * page_size}, DType::kF32);
      Tensor dpages = gpu_->zeros({num_pages * page_size * r * es}, DType::kU8);
      Tensor dscales = gpu_->zeros({num_pages * page_size}, DType::kF32);
      const Tensor htable = ints(table), dtable = up(htable);
      LatentPagesView hv{hpages.raw(), hscales.data<float>(), dt, page_size, r, page_size * r, htable.data<int32_t>(),
                         0};
      LatentPagesView dv{dpages.raw(), dscales.data<float>(), dt, page_size, r, page_size * r,
                         dtable.data<int32_t>(), 0};
      // Stores of 1, 3, 17 and 79 tokens fill slots [0, 100).
      int64_t first = 0;
      for (int64_t n : {1, 3, 17, 79}) {
        const Tensor lat = randn({n, r}, 122 + static_cast<uint32_t>(first), 2.0f);
        cpu_->latent_store(hv, hpages.raw(), hscales.data<float>(), lat, first);
        gpu_->latent_store(dv, dpages.raw(), dscales.data<float>(), up(lat), first);
        first += n;
      }
      const std::string tag = std::string(" ") + dtype_name(dt) + " R=" + std::to_string(r);
      const Tensor gp = down(dpages);
      EXPECT_EQ(0, std::memcmp(gp.raw(), hpages.raw(), hpages.nbytes())) << "latent_store pages" << tag;
      expect_close("latent_store scales" + tag, hscales, dscales, 0.0);
      hv.num_tokens = dv.num_tokens = tokens;
      for (int64_t t : kRows) {
        for (int64_t w : {37, 2048}) {
          // Indices: random tokens with duplicates, -1s and out-of-range ones; row 1 has none.
          std::mt19937 rng(static_cast<uint32_t>(130 + t + w));
          std::uniform_int_distribution<int32_t> pick(-3, static_cast<int32_t>(tokens) + 5);
          std::vector<int32_t> idx(static_cast<size_t>(t * w));
          for (auto& i : idx) i = pick(rng);
          if (t > 1)
            for (int64_t j = 0; j < w; ++j) idx[w + j] = -1;
          Tensor hidx = ints(idx).reshape({t, w});
          const Tensor q = randn({t, heads, r}, 131, 0.3f);
          const float scale = 1.0f / std::sqrt(static_cast<float>(r));
          Tensor ref = Tensor::empty({t, heads, r}, DType::kF32);
          cpu_->mla_sparse_attention(ref, q, hv, hidx, scale);
          each_mla_decode_precision(dt, r, [&](const char* how, double tol) {
            Tensor out = gpu_->empty({t, heads, r});
            gpu_->mla_sparse_attention(out, up(q), dv, up(hidx), scale);
            expect_close(
                "mla_sparse_attention" + tag + how + " T=" + std::to_string(t) + " W=" + std::to_string(w),
                ref, out, tol);
          });
        }
      }
    }
  }
}

TEST_F(CudaParity, IndexerPoolKeysAndScores) {
  const int64_t kp = 16, d = 128, h = 32;
  for (int64_t p : {1, 5, 130}) {
    const Tensor keys = randn({p, kp, d}, 141), gate = randn({p, kp, d}, 142, 2.0f), ape = randn({kp, d}, 143);
    Tensor ref = Tensor::empty({p, d}, DType::kF32);
    cpu_->indexer_pool_keys(ref, keys, gate, ape);
    Tensor out = gpu_->empty({p, d});
    gpu_->indexer_pool_keys(out, up(keys), up(gate), up(ape));
    expect_close("indexer_pool_keys P=" + std::to_string(p), ref, out, 1e-6);
    for (int64_t t : kRows) {
      const Tensor q = randn({t, h, d}, 144), w = randn({t, h}, 145);
      std::vector<int32_t> cand(static_cast<size_t>(t));
      for (int64_t i = 0; i < t; ++i) cand[i] = static_cast<int32_t>((i * 7) % (p + 2));  // 0 .. p+1
      Tensor sref = Tensor::empty({t, p}, DType::kF32);
      cpu_->indexer_scores(sref, q, ref, w, ints(cand), 0.088f);
      Tensor sout = gpu_->empty({t, p});
      gpu_->indexer_scores(sout, up(q), up(ref), up(w), up(ints(cand)), 0.088f);
      expect_close("indexer_scores P=" + std::to_string(p) + " T=" + std::to_string(t), sref, sout, 1e-5);
    }
  }
}

// ---- router ------------------------------------------------------------------------------

TEST_F(CudaParity, MoeRoute) {
  struct Case {
    int64_t e;
    int n_group, topk_group, k;
    bool norm;
  };
  for (const Case& c : {Case{288, 1, 1, 8, true}, Case{64, 8, 4, 8, true}, Case{37, 1, 1, 5, false},
                        Case{16, 4, 2, 6, true}}) {
    const Tensor bias = randn({c.e}, 151, 0.1f);
    for (int64_t t : kRows) {
      Tensor logits = randn({t, c.e}, 152);
      if (t == 3)  // ties: equal logits everywhere
        for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = 0.5f;
      Tensor rw = Tensor::empty({t, c.k}, DType::kF32), ri = Tensor::empty({t, c.k}, DType::kI32);
      cpu_->moe_route(rw, ri, logits, t == 3 ? Tensor::zeros({c.e}, DType::kF32) : bias, c.n_group, c.topk_group,
                      c.k, c.norm, 2.5f);
      Tensor gw = gpu_->empty({t, c.k}), gi = gpu_->empty({t, c.k}, DType::kI32);
      gpu_->moe_route(gw, gi, up(logits), up(t == 3 ? Tensor::zeros({c.e}, DType::kF32) : bias), c.n_group,
                      c.topk_group, c.k, c.norm, 2.5f);
      const std::string tag = " E=" + std::to_string(c.e) + " groups " + std::to_string(c.n_group) + "/" +
                              std::to_string(c.topk_group) + " k=" + std::to_string(c.k) + " T=" + std::to_string(t);
      expect_equal_ints("moe_route ids" + tag, ri, gi);
      expect_close("moe_route weights" + tag, rw, gw, 1e-6);
    }
  }
}

// ---- MoE experts ---------------------------------------------------------------------------

struct MoeCase {
  int64_t t, k, e, h, i;
};

// T <= 64 runs the device-grouped kernels, T > 64 the host-grouped per-expert matmuls
// (cuBLAS above 64 rows on an expert: bf16 then rounds activations, hence 1e-2).
TEST_F(CudaParity, MoeExperts) {
  const float limit = 2.0f;  // small enough that both clamps act
  for (const MoeCase& c : {MoeCase{1, 1, 1, 8, 4}, MoeCase{1, 8, 9, 128, 64}, MoeCase{3, 2, 5, 67, 9},
                           MoeCase{17, 8, 40, 136, 24}, MoeCase{64, 8, 16, 64, 40}, MoeCase{64, 3, 300, 96, 17},
                           MoeCase{65, 4, 7, 64, 16}, MoeCase{129, 8, 12, 40, 8}}) {
    const Tensor gu = randn({c.e, 2 * c.i, c.h}, 171, 0.2f), dn = randn({c.e, c.h, c.i}, 172, 0.2f);
    const Tensor x = randn({c.t, c.h}, 173), w = randn({c.t, c.k}, 174, 0.5f);
    const Tensor ids = moe_route_ids(c.t, c.k, c.e, 175, c.e > c.k ? static_cast<int32_t>(c.e / 2) : -1);
    for (bool bf16 : {false, true}) {
      const Tensor gw = bf16 ? gu.to_dtype(DType::kBF16) : gu, dw = bf16 ? dn.to_dtype(DType::kBF16) : dn;
      Tensor ref = Tensor::empty({c.t, c.h}, DType::kF32);
      cpu_->moe_experts(ref, x, ids, w, gw, dw, limit);
      Tensor out = gpu_->empty({c.t, c.h});
      gpu_->moe_experts(out, up(x), up(ids), up(w), up(gw), up(dw), limit);
      const std::string tag = std::string(bf16 ? " bf16" : " f32") + " T=" + std::to_string(c.t) +
                              " k=" + std::to_string(c.k) + " E=" + std::to_string(c.e) +
                              " H=" + std::to_string(c.h) + " I=" + std::to_string(c.i);
      expect_close("moe_experts" + tag, ref, out, bf16 && c.t > 64 ? 1e-2 : 1e-5);
    }
  }
}

TEST_F(CudaParity, MoeExpertsRowsDoNotDependOnTheBatch) {
  const int64_t t = 64, k = 8, e = 24, h = 256, i = 72;
  const Tensor x = randn({t, h}, 181), w = randn({t, k}, 182, 0.5f);
  const Tensor ids = moe_route_ids(t, k, e, 183, 5);
  for (bool bf16 : {false, true}) {
    Tensor gu = randn({e, 2 * i, h}, 184, 0.1f), dn = randn({e, h, i}, 185, 0.1f);
    if (bf16) {
      gu = gu.to_dtype(DType::kBF16);
      dn = dn.to_dtype(DType::kBF16);
    }
    const Tensor dgu = up(gu), ddn = up(dn);
    Tensor all = gpu_->empty({t, h});
    gpu_->moe_experts(all, up(x), up(ids), up(w), dgu, ddn, 10.0f);
    const Tensor h_all = down(all);
    // Alone, and inside a smaller batch of other tokens (rows r-2 .. r).
    for (int64_t r : {0, 2, 31, 63}) {
      for (int64_t b0 : {r, std::max<int64_t>(0, r - 2)}) {
        const int64_t n = r - b0 + 1;
        Tensor part = gpu_->empty({n, h});
        gpu_->moe_experts(part, up(x.slice(0, b0, r + 1).contiguous()), up(ids.slice(0, b0, r + 1).contiguous()),
                          up(w.slice(0, b0, r + 1).contiguous()), dgu, ddn, 10.0f);
        const Tensor hp = down(part);
        int64_t bad = 0;
        for (int64_t c = 0; c < h; ++c)
          bad += float_bits(hp.data<float>()[(n - 1) * h + c]) != float_bits(h_all.data<float>()[r * h + c]);
        EXPECT_EQ(bad, 0) << (bf16 ? "bf16" : "f32") << " row " << r << " in a batch of " << n;
      }
    }
  }
  std::printf("[parity] %-44s bit-identical alone / in batches\n", "moe_experts T=64 rows");
}

TEST_F(CudaParity, MoeExpertsDuplicateAndBadIds) {
  // A row naming one expert twice counts it twice (as on the CPU).
  const int64_t h = 32, i = 8, e = 4;
  const Tensor gu = randn({e, 2 * i, h}, 191, 0.3f), dn = randn({e, h, i}, 192, 0.3f);
  const Tensor x = randn({2, h}, 193), w = randn({2, 3}, 194);
  Tensor ids = Tensor::empty({2, 3}, DType::kI32);
  const int32_t v[6] = {1, 1, 3, 0, 2, 2};
  std::copy(v, v + 6, ids.data<int32_t>());
  Tensor ref = Tensor::empty({2, h}, DType::kF32);
  cpu_->moe_experts(ref, x, ids, w, gu, dn, 10.0f);
  Tensor out = gpu_->empty({2, h});
  gpu_->moe_experts(out, up(x), up(ids), up(w), up(gu), up(dn), 10.0f);
  expect_close("moe_experts duplicate ids", ref, out, 1e-5);
  // k = 0 routes nothing: zeros; T = 0 is a no-op.
  Tensor zk = up(Tensor::from_floats({2, h}, std::vector<float>(2 * h, 7.0f)));
  gpu_->moe_experts(zk, up(x), gpu_->empty({2, 0}, DType::kI32), gpu_->empty({2, 0}), up(gu), up(dn), 10.0f);
  EXPECT_EQ(down(zk).to_vector(), std::vector<float>(2 * h, 0.0f));
  Tensor z0 = gpu_->empty({0, h});
  gpu_->moe_experts(z0, gpu_->empty({0, h}), gpu_->empty({0, 3}, DType::kI32), gpu_->empty({0, 3}), up(gu), up(dn),
                    10.0f);
  // An id outside [0, E) cannot throw inside the kernel: the next sync reports it.
  ids.data<int32_t>()[4] = 4;
  gpu_->moe_experts(out, up(x), up(ids), up(w), up(gu), up(dn), 10.0f);
  try {
    (void)down(out);
    FAIL() << "expected an out-of-range error";
  } catch (const StatusError& err) {
    EXPECT_EQ(err.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(err.status().message().find("moe_experts"), std::string::npos) << err.status().message();
  }
  EXPECT_THROW(gpu_->moe_experts(out, up(x), up(ids), up(w), up(gu), up(randn({e, h, i + 1}, 195)), 10.0f),
               StatusError);
}

// ---- transfers and memory ----------------------------------------------------------------

TEST_F(CudaParity, CopyOfRowStridedViews) {
  // A column block of a wider matrix, both directions, as the model's concatenations need.
  const Tensor a = randn({5, 6}, 161);
  Tensor cat = gpu_->zeros({5, 10});
  Tensor block = cat.slice(1, 2, 8);
  gpu_->copy(block, a);
  const Tensor h = down(cat);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 10; ++c) {
      const float want = c >= 2 && c < 8 ? a.data<float>()[r * 6 + c - 2] : 0.0f;
      ASSERT_EQ(h.data<float>()[r * 10 + c], want) << r << "," << c;
    }
  Tensor back = Tensor::empty({5, 6}, DType::kF32);
  gpu_->copy(back, cat.slice(1, 2, 8));
  EXPECT_EQ(0, std::memcmp(back.raw(), a.raw(), a.nbytes()));
  // Shape mismatch is an error, not a crash.
  Tensor wrong = Tensor::empty({5, 5}, DType::kF32);
  EXPECT_THROW(gpu_->copy(wrong, a), StatusError);
}

TEST(CudaAllocator, SteadyStateDoesNotCallCudaMalloc) {
  ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU";
  auto alloc = cuda::DeviceAllocator::create(0);
  auto step = [&] {
    std::vector<std::shared_ptr<Storage>> live;
    for (size_t bytes : {size_t{100}, size_t{4096}, size_t{3} << 20, size_t{777}, size_t{100}}) {
      auto s = alloc->allocate(bytes);
      ASSERT_TRUE(s) << s.status().to_string();
      ASSERT_GE((*s)->bytes(), bytes);
      live.push_back(*s);
    }
  };
  step();
  const size_t after_warmup = alloc->malloc_count();
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(alloc->malloc_count(), after_warmup);
  EXPECT_GT(alloc->cached_bytes(), 0u);
  alloc->release_cached();
  EXPECT_EQ(alloc->cached_bytes(), 0u);
}

// The counters behind Ops::memory_use: blocks alive, their peak since a reset, what the
// cache took from the driver (alive + cached), back to the alive blocks after release_cached.
TEST(CudaAllocator, CountsAliveBlocksAndTheirPeak) {
  ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU";
  auto alloc = cuda::DeviceAllocator::create(0);
  const size_t a_bytes = cuda::round_block_size(3 << 20), b_bytes = cuda::round_block_size(1000);
  auto a = alloc->allocate(3 << 20);
  ASSERT_TRUE(a);
  {
    auto b = alloc->allocate(1000);
    ASSERT_TRUE(b);
    EXPECT_EQ(alloc->in_use_bytes(), a_bytes + b_bytes);
  }
  EXPECT_EQ(alloc->in_use_bytes(), a_bytes);
  EXPECT_EQ(alloc->peak_in_use_bytes(), a_bytes + b_bytes);
  EXPECT_EQ(alloc->driver_bytes(), a_bytes + b_bytes);
  alloc->reset_peak();
  EXPECT_EQ(alloc->peak_in_use_bytes(), a_bytes);
  { auto c = alloc->allocate(900); }  // served from the cache: the driver's share stays
  EXPECT_EQ(alloc->peak_in_use_bytes(), a_bytes + b_bytes);
  EXPECT_EQ(alloc->driver_bytes(), a_bytes + b_bytes);
  alloc->release_cached();
  EXPECT_EQ(alloc->driver_bytes(), a_bytes);
  a->reset();
  EXPECT_EQ(alloc->in_use_bytes(), 0u);

  // Through the backend: a tensor made and dropped shows in the peak, not in what is alive.
  auto ops = make_cuda_ops(0);
  ASSERT_TRUE(ops);
  const MemoryUse before = (*ops)->memory_use();
  (*ops)->reset_memory_peak();
  { Tensor t = (*ops)->empty({1 << 20}, DType::kF32); }
  const MemoryUse after = (*ops)->memory_use();
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.peak_in_use_bytes, before.in_use_bytes + (4 << 20));
  EXPECT_GE(after.held_bytes, after.peak_in_use_bytes);
}

TEST(CudaOpsCreate, BadDeviceIsAnError) {
  auto ops = make_cuda_ops(1000);
  EXPECT_FALSE(ops);
}

}  // namespace
}  // namespace tf
