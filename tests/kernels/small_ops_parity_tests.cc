// The lean decode-size kernels (issue #8) against the CPU reference and against
// the kernels they replaced (selected by legacy_small_ops()):
// - small_gemm with K slices (narrow N, long K: mHC fn 24 x 16384 f32, KDA f_a
//   128 x 4096 and b_proj 64 x 4096 bf16, an odd K on the element-wise path):
//   within the CPU tolerance, and a row's bits independent of the batch and of the
//   plan (the contract of small_gemm.h);
// - rms_norm / gated_rms_norm with the row held in registers (d up to 16384):
//   within the CPU tolerance and bit-equal to the looping kernel;
// - mhc_coefficients at M = 4 and the one-warp-per-token router: bit-equal to the
//   kernels they replaced (themselves bit-exact against the CPU in CudaParity);
// - mhc_expand over float4 (and mhc_collapse): the legacy bits and the CPU tolerance.
// Part of cuda_ops_parity_tests (label gpu): runs on the GPU machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu_cuda_test.h"
#include "kernels/cuda/legacy_small_ops.h"
#include "kernels/cuda/small_gemm.h"
#include "test_tensors.h"

namespace tf {
namespace {

// Bytes that differ between two host tensors of the same size (all of them if not).
int64_t byte_diffs(const Tensor& a, const Tensor& b) {
  const size_t na = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  const size_t nb = static_cast<size_t>(b.numel()) * dtype_size(b.dtype());
  if (na != nb) return static_cast<int64_t>(std::max(na, nb));
  const auto* pa = static_cast<const unsigned char*>(a.raw());
  const auto* pb = static_cast<const unsigned char*>(b.raw());
  int64_t bad = 0;
  for (size_t i = 0; i < na; ++i) bad += pa[i] != pb[i];
  return bad;
}

// Sets legacy_small_ops() for a scope.
struct Legacy {
  explicit Legacy(bool on) { cuda::legacy_small_ops() = on; }
  ~Legacy() { cuda::legacy_small_ops() = false; }
};

class SmallOps : public CpuCudaTest {};

struct SplitCase {
  int64_t n, k;
  DType dt;
};

// Narrow-N, long-K shapes take K slices; each row matches the CPU, its bits do not
// depend on the other rows or on the columns per warp, forced slice counts stay
// within the tolerance.
TEST_F(SmallOps, SplitKMatmulKeepsTheRowContract) {
  EXPECT_EQ(cuda::small_gemm_k_splits(24, 16384, 1), 8);
  EXPECT_EQ(cuda::small_gemm_k_splits(128, 4096, 1), 8);
  EXPECT_EQ(cuda::small_gemm_k_splits(8192, 128, 1), 1);
  EXPECT_EQ(cuda::small_gemm_k_splits(4096, 1536, 1), 1);
  EXPECT_EQ(cuda::small_gemm_k_splits(1536, 4096, 1), 2);
  EXPECT_EQ(cuda::small_gemm_k_splits(128, 4096, 16), 1);  // heads count as columns
  for (const SplitCase& c : {SplitCase{24, 16384, DType::kF32}, SplitCase{64, 4096, DType::kBF16},
                             SplitCase{37, 1301, DType::kBF16}, SplitCase{37, 1301, DType::kF32},
                             SplitCase{203, 2052, DType::kBF16}}) {
    const Tensor w = randn({c.n, c.k}, 701, 0.05f);
    const Tensor wd = c.dt == DType::kBF16 ? w.to_dtype(DType::kBF16) : w;
    const Tensor wref = c.dt == DType::kBF16 ? wd.to_f32() : w;
    const Tensor dw = up(wd);
    const std::string tag = std::string(dtype_name(c.dt)) + " N=" + std::to_string(c.n) +
                            " K=" + std::to_string(c.k) + " splits " +
                            std::to_string(cuda::small_gemm_k_splits(c.n, c.k, 1));
    const Tensor row = randn({1, c.k}, 702);
    Tensor alone = gpu_->empty({1, c.n});
    gpu_->matmul(alone, up(row), dw);
    const Tensor h_alone = down(alone);
    std::mt19937 rng(703);
    for (int64_t m : {1, 2, 3, 5, 8, 9, 16, 33, 64}) {
      const int64_t at = static_cast<int64_t>(rng() % static_cast<uint32_t>(m));
      Tensor x = randn({m, c.k}, 704 + static_cast<uint32_t>(m));
      std::copy(row.data<float>(), row.data<float>() + c.k, x.data<float>() + at * c.k);
      Tensor ref = Tensor::empty({m, c.n}, DType::kF32);
      cpu_->matmul(ref, x, wref, false);
      const Tensor dx = up(x);
      Tensor out = gpu_->empty({m, c.n});
      gpu_->matmul(out, dx, dw);
      const Tensor h = down(out);
      EXPECT_LE(rel_err_nan_matched(ref, h), 1e-5) << tag << " M=" << m;
      EXPECT_EQ(std::memcmp(h_alone.data<float>(), h.data<float>() + at * c.n, c.n * sizeof(float)), 0)
          << tag << " M=" << m << ": row " << at << " differs from the row computed alone";
      cuda::SmallGemmArgs a;
      a.x = dx.data<float>();
      a.ldx = c.k;
      a.w = dw.raw();
      a.w_dtype = c.dt;
      a.m = m;
      a.n = c.n;
      a.k = c.k;
      a.ldo = c.n;
      for (int nc : {1, 2, 4, 8}) {
        Tensor o2 = gpu_->empty({m, c.n});
        a.out = o2.data<float>();
        cuda::small_gemm(nullptr, a, nc);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(byte_diffs(h, down(o2)), 0) << tag << " M=" << m << " cols_per_warp " << nc;
      }
      if (m == 1 || m == 9) {
        for (int ks : {1, 2, 4, 8}) {
          Tensor o3 = gpu_->empty({m, c.n});
          a.out = o3.data<float>();
          cuda::small_gemm(nullptr, a, 0, ks);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_LE(rel_err_nan_matched(ref, down(o3)), 1e-5) << tag << " M=" << m << " forced k_splits " << ks;
        }
      }
    }
  }
}

TEST_F(SmallOps, ForcedSplitCountIsChecked) {
  cuda::SmallGemmArgs a;
  a.m = a.n = a.k = 1;
  try {
    cuda::small_gemm(nullptr, a, 0, 3);
    FAIL() << "k_splits 3 was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("k_splits"), std::string::npos) << e.what();
  }
}

// Rows of 16384 / 8192 / 4096 / 1536 / 512 (1-4 float4 per thread), weighted or not,
// gated: within the CPU tolerance and the bits of the looping kernel.
TEST_F(SmallOps, RegisterRmsNormMatchesCpuAndLegacyBits) {
  for (int64_t d : {16384, 8192, 4096, 1536, 512, 132}) {
    const Tensor w = randn({d}, 711, 0.5f, 1.0f);
    for (int64_t m : {1, 8, 9}) {
      const Tensor x = randn({m, d}, 712, 3.0f, 0.5f), gate = randn({m, d}, 713);
      const std::string tag = " M=" + std::to_string(m) + " D=" + std::to_string(d);
      for (int variant = 0; variant < 3; ++variant) {
        Tensor ref = Tensor::empty({m, d}, DType::kF32);
        Tensor out = gpu_->empty({m, d}), old = gpu_->empty({m, d});
        const Tensor dx = up(x), dw = up(w), dg = up(gate);
        auto run = [&](Ops& ops, Tensor& o, const Tensor& xx, const Tensor& ww, const Tensor& gg) {
          if (variant == 0) ops.rms_norm(o, xx, ww, 1e-6f);
          if (variant == 1) ops.rms_norm(o, xx, Tensor(), 1e-6f);
          if (variant == 2) ops.gated_rms_norm(o, xx, gg, ww, 1e-5f);
        };
        run(*cpu_, ref, x, w, gate);
        run(*gpu_, out, dx, dw, dg);
        {
          Legacy legacy(true);
          run(*gpu_, old, dx, dw, dg);
        }
        const Tensor h = down(out);
        EXPECT_LE(rel_err_nan_matched(ref, h), 1e-6) << "variant " << variant << tag;
        EXPECT_EQ(byte_diffs(down(old), h), 0) << "variant " << variant << tag;
      }
    }
  }
}

// mhc_coefficients (M = 4 kernel) and moe_route (warp kernel): the bits of the
// kernels they replaced, ties included.
TEST_F(SmallOps, MhcAndRouterKeepTheLegacyBits) {
  const int64_t mm = 4, width = (2 + mm) * mm;
  const Tensor base = randn({width}, 721, 0.5f), sc = Tensor::from_floats({3}, {0.7f, 1.3f, 2.0f});
  for (int64_t t : {1, 7, 8, 9, 130}) {
    const Tensor mix = up(randn({t, width}, 722, 2.0f));
    Tensor p[2] = {gpu_->empty({t, mm}), gpu_->empty({t, mm})};
    Tensor q[2] = {gpu_->empty({t, mm}), gpu_->empty({t, mm})};
    Tensor c[2] = {gpu_->empty({t, mm, mm}), gpu_->empty({t, mm, mm})};
    for (int v = 0; v < 2; ++v) {
      Legacy legacy(v == 1);
      gpu_->mhc_coefficients(p[v], q[v], c[v], mix, up(base), up(sc), 1e-6f, 20);
    }
    EXPECT_EQ(byte_diffs(down(p[0]), down(p[1])), 0) << "mhc pre T=" << t;
    EXPECT_EQ(byte_diffs(down(q[0]), down(q[1])), 0) << "mhc post T=" << t;
    EXPECT_EQ(byte_diffs(down(c[0]), down(c[1])), 0) << "mhc comb T=" << t;
    for (int64_t d : {4096, 260}) {  // float4 expand (d % 4 == 0), element-wise otherwise
      const Tensor streams = up(randn({t, mm, d}, 723)), y = up(randn({t, d}, 724));
      Tensor col[2] = {gpu_->empty({t, d}), gpu_->empty({t, d})};
      Tensor ex[2] = {gpu_->empty({t, mm, d}), gpu_->empty({t, mm, d})};
      for (int v = 0; v < 2; ++v) {
        Legacy legacy(v == 1);
        gpu_->mhc_collapse(col[v], streams, p[0]);
        gpu_->mhc_expand(ex[v], y, q[0], c[0], streams);
      }
      const std::string tag = " T=" + std::to_string(t) + " D=" + std::to_string(d);
      EXPECT_EQ(byte_diffs(down(col[0]), down(col[1])), 0) << "mhc_collapse" << tag;
      EXPECT_EQ(byte_diffs(down(ex[0]), down(ex[1])), 0) << "mhc_expand" << tag;
      Tensor ref_col = Tensor::empty({t, d}, DType::kF32), ref_ex = Tensor::empty({t, mm, d}, DType::kF32);
      cpu_->mhc_collapse(ref_col, down(streams), down(p[0]));
      cpu_->mhc_expand(ref_ex, down(y), down(q[0]), down(c[0]), down(streams));
      EXPECT_LE(rel_err_nan_matched(ref_col, down(col[0])), 1e-6) << "mhc_collapse vs CPU" << tag;
      EXPECT_LE(rel_err_nan_matched(ref_ex, down(ex[0])), 1e-6) << "mhc_expand vs CPU" << tag;
    }
  }
  struct Case {
    int64_t e;
    int k;
    bool norm;
  };
  for (const Case& rc :
       {Case{288, 8, true}, Case{512, 32, true}, Case{33, 5, false}, Case{8, 8, true}, Case{100, 1, true}}) {
    const Tensor bias = up(randn({rc.e}, 731, 0.1f));
    for (int64_t t : {1, 5, 8, 67}) {
      Tensor logits = randn({t, rc.e}, 732 + static_cast<uint32_t>(t));
      if (t == 5)  // ties
        for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = 0.25f;
      const Tensor dl = up(logits);
      Tensor w[2] = {gpu_->empty({t, rc.k}), gpu_->empty({t, rc.k})};
      Tensor ids[2] = {gpu_->empty({t, rc.k}, DType::kI32), gpu_->empty({t, rc.k}, DType::kI32)};
      for (int v = 0; v < 2; ++v) {
        Legacy legacy(v == 1);
        gpu_->moe_route(w[v], ids[v], dl, bias, 1, 1, rc.k, rc.norm, 2.5f);
      }
      const std::string tag =
          " E=" + std::to_string(rc.e) + " k=" + std::to_string(rc.k) + " T=" + std::to_string(t);
      EXPECT_EQ(byte_diffs(down(ids[0]), down(ids[1])), 0) << "moe_route ids" << tag;
      EXPECT_EQ(byte_diffs(down(w[0]), down(w[1])), 0) << "moe_route weights" << tag;
    }
  }
}

}  // namespace
}  // namespace tf
