// The small-batch GEMM (kernels/cuda/small_gemm.cu, matmul/head_matmul up to 64
// rows) against the CPU reference, and its contract: a row's output bits do not
// depend on the other rows of the call, their number, the launch plan (columns per
// warp) or whether the vector or the element-wise load path ran.
//
// Cases: every row count 1..64 (each rows-per-warp bucket, odd counts), K not a
// multiple of 4 or 8 (element-wise path), N not a multiple of a block's columns,
// unaligned and row-strided x, accumulate, bf16 and f32 weights, heads. Tolerance
// vs the CPU 1e-5 of the largest reference magnitude (tree vs sequential sums).
// Part of cuda_ops_parity_tests (label gpu): runs on the GPU machine.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/small_gemm.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

// Largest |ref - got| over the largest |ref| (floor 1).
// Number of elements whose bits differ (rows of `width` floats, `rows` of them,
// at a[row * lda], b[row * ldb]).
int64_t bit_diffs(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t width) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) bad += float_bits(a[r * lda + c]) != float_bits(b[r * ldb + c]);
  return bad;
}

std::string sizes(int64_t m, int64_t n, int64_t k) {
  return "M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k);
}

class SmallGemm : public CpuCudaTest {
 protected:
  // Weights on the device in `dtype` and what the CPU reference sees of them.
  void weights(const Tensor& w, DType dtype, Tensor& dev, Tensor& ref) {
    dev = up(dtype == DType::kBF16 ? w.to_dtype(DType::kBF16) : w);
    ref = dtype == DType::kBF16 ? w.to_dtype(DType::kBF16).to_f32() : w;
  }
  // small_gemm() on the legacy default stream (it orders against the backend's
  // blocking stream), then a device sync.
  void run(const cuda::SmallGemmArgs& a, int cols_per_warp) {
    cuda::small_gemm(nullptr, a, cols_per_warp);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

const DType kWeightTypes[] = {DType::kBF16, DType::kF32};

// Every row count of the small path, three K that take the vector path (264, 300:
// K % 8 == 4) or the element-wise one (131), odd N; accumulate on every third M.
TEST_F(SmallGemm, EveryRowCountMatchesTheCpu) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{67, 131}, {37, 264}, {45, 300}, {1, 3}}) {
    const Tensor w = randn({n, k}, 101, 0.1f);
    for (DType dt : kWeightTypes) {
      Tensor dw, rw;
      weights(w, dt, dw, rw);
      double worst = 0;
      for (int64_t m = 1; m <= cuda::kSmallGemmMaxRows; ++m) {
        const bool acc = m % 3 == 0;
        const Tensor x = randn({m, k}, 200 + static_cast<uint32_t>(m));
        const Tensor init = randn({m, n}, 300 + static_cast<uint32_t>(m));
        Tensor ref = init.contiguous();
        cpu_->matmul(ref, x, rw, acc);
        Tensor out = up(init);
        gpu_->matmul(out, up(x), dw, acc);
        const double e = rel_err_nan_matched(ref, down(out));
        worst = std::max(worst, e);
        EXPECT_LE(e, 1e-5) << dtype_name(dt) << " " << sizes(m, n, k) << (acc ? " acc" : "");
      }
      std::printf("[parity] small_gemm %-5s N=%-3lld K=%-3lld M=1..64  max rel err %.3g (tol 1e-05)\n",
                  dtype_name(dt), static_cast<long long>(n), static_cast<long long>(k), worst);
    }
  }
}

// A row computed alone and inside calls of 2..64 rows with other random rows
// (at a varying position) has the same bits; also with accumulate.
TEST_F(SmallGemm, RowBitsDoNotDependOnTheBatch) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{97, 304}, {67, 131}}) {
    const Tensor w = randn({n, k}, 111, 0.1f);
    const Tensor row = randn({1, k}, 112);
    const Tensor row_init = randn({1, n}, 113);
    for (DType dt : kWeightTypes) {
      Tensor dw, rw;
      weights(w, dt, dw, rw);
      for (bool acc : {false, true}) {
        Tensor alone = up(row_init);
        gpu_->matmul(alone, up(row), dw, acc);
        const Tensor h_alone = down(alone);
        std::mt19937 rng(114);
        int64_t bad = 0;
        for (int64_t m = 2; m <= cuda::kSmallGemmMaxRows; ++m) {
          const int64_t at = static_cast<int64_t>(rng() % static_cast<uint32_t>(m));
          Tensor x = randn({m, k}, 500 + static_cast<uint32_t>(m));
          std::copy(row.data<float>(), row.data<float>() + k, x.data<float>() + at * k);
          Tensor init = randn({m, n}, 600 + static_cast<uint32_t>(m));
          std::copy(row_init.data<float>(), row_init.data<float>() + n, init.data<float>() + at * n);
          Tensor out = up(init);
          gpu_->matmul(out, up(x), dw, acc);
          const Tensor h = down(out);
          const int64_t d = bit_diffs(h_alone.data<float>(), n, h.data<float>() + at * n, n, 1, n);
          EXPECT_EQ(d, 0) << dtype_name(dt) << " " << sizes(m, n, k) << " row " << at << (acc ? " acc" : "");
          bad += d;
        }
        std::printf("[parity] small_gemm %-5s N=%lld K=%lld%s: row alone vs in M=2..64: %lld bits differ\n",
                    dtype_name(dt), static_cast<long long>(n), static_cast<long long>(k), acc ? " acc" : "",
                    static_cast<long long>(bad));
      }
    }
  }
}

// Every columns-per-warp choice (1, 2, 4, 8) gives the bits of the default plan,
// for each rows-per-warp bucket; N=203 leaves partial column groups.
TEST_F(SmallGemm, EveryPlanGivesTheSameBits) {
  const int64_t n = 203;
  for (int64_t k : {264, 131}) {
    const Tensor w = randn({n, k}, 121, 0.1f);
    for (DType dt : kWeightTypes) {
      Tensor dw, rw;
      weights(w, dt, dw, rw);
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 63, 64}) {
        const Tensor x = randn({m, k}, 122 + static_cast<uint32_t>(m));
        const Tensor dx = up(x);
        Tensor ref = Tensor::empty({m, n}, DType::kF32);
        cpu_->matmul(ref, x, rw, false);
        cuda::SmallGemmArgs a;
        a.x = dx.data<float>();
        a.ldx = k;
        a.w = dw.raw();
        a.w_dtype = dt;
        a.m = m;
        a.n = n;
        a.k = k;
        a.ldo = n;
        Tensor base = gpu_->empty({m, n});
        a.out = base.data<float>();
        run(a, 0);
        const Tensor h_base = down(base);
        EXPECT_LE(rel_err_nan_matched(ref, h_base), 1e-5) << dtype_name(dt) << " " << sizes(m, n, k);
        for (int nc : {1, 2, 4, 8}) {
          Tensor out = gpu_->empty({m, n});
          a.out = out.data<float>();
          run(a, nc);
          const Tensor h = down(out);
          EXPECT_EQ(bit_diffs(h_base.data<float>(), n, h.data<float>(), n, m, n), 0)
              << dtype_name(dt) << " " << sizes(m, n, k) << " cols_per_warp " << nc;
        }
      }
    }
  }
}

// Direct calls with heads (x [M, H, K], w [H, N, K], out [M, H, N]), accumulate,
// every plan, and M past 64 (small_gemm runs the rows in slices of 64).
TEST_F(SmallGemm, HeadsAccumulateAndLongCallsEveryPlan) {
  const int64_t h = 3, n = 21, k = 68;
  const Tensor w = randn({h, n, k}, 161, 0.2f);
  for (DType dt : kWeightTypes) {
    Tensor dw, rw;
    weights(w, dt, dw, rw);
    for (int64_t m : {1, 2, 6, 11, 64, 100}) {
      const Tensor x = randn({m, h, k}, 162 + static_cast<uint32_t>(m));
      const Tensor init = randn({m, h, n}, 163);
      Tensor prod = Tensor::empty({m, h, n}, DType::kF32);
      cpu_->head_matmul(prod, x, rw);
      std::vector<float> ref = init.to_vector();  // init + x·w^T, as accumulate computes it
      const std::vector<float> pv = prod.to_vector();
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += pv[i];
      const Tensor dx = up(x);
      Tensor first;
      for (int nc : {0, 1, 2, 4, 8}) {
        Tensor out = up(init);
        cuda::SmallGemmArgs a;
        a.out = out.data<float>();
        a.ldo = h * n;
        a.o_hs = n;
        a.x = dx.data<float>();
        a.ldx = h * k;
        a.x_hs = k;
        a.w = dw.raw();
        a.w_dtype = dt;
        a.w_hs = n * k;
        a.m = m;
        a.n = n;
        a.k = k;
        a.heads = h;
        a.accumulate = true;
        run(a, nc);
        const Tensor got = down(out);
        EXPECT_LE(rel_err_nan_matched(Tensor::from_floats({m, h, n}, ref), got), 1e-5)
            << dtype_name(dt) << " heads " << sizes(m, n, k) << " cols_per_warp " << nc;
        if (nc == 0) {
          first = got;
        } else {
          EXPECT_EQ(bit_diffs(first.data<float>(), h * n, got.data<float>(), h * n, m, h * n), 0)
              << dtype_name(dt) << " heads " << sizes(m, n, k) << " cols_per_warp " << nc;
        }
      }
    }
  }
}

// x rows `ldx` apart (ldx > K) and from a base that is not 16-byte aligned (the
// element-wise path) give the bits of packed, aligned x (the vector path).
TEST_F(SmallGemm, StridedAndUnalignedXGiveTheSameBits) {
  const int64_t n = 75, k = 264;
  const Tensor w = randn({n, k}, 131, 0.1f);
  for (DType dt : kWeightTypes) {
    Tensor dw, rw;
    weights(w, dt, dw, rw);
    for (int64_t m : {1, 2, 4, 6, 8, 13, 29, 64}) {
      const Tensor x = randn({m, k}, 132 + static_cast<uint32_t>(m));
      Tensor packed = gpu_->empty({m, n});
      gpu_->matmul(packed, up(x), dw);
      const Tensor h_packed = down(packed);
      for (auto [offset, ldx] : {std::pair<int64_t, int64_t>{0, k + 4}, {1, k}, {3, k + 5}}) {
        // Host image of the padded buffer: row r at offset + r * ldx.
        std::vector<float> img(static_cast<size_t>(offset + m * ldx), -7.0f);
        for (int64_t r = 0; r < m; ++r)
          std::copy(x.data<float>() + r * k, x.data<float>() + (r + 1) * k, img.begin() + offset + r * ldx);
        const Tensor dimg = up(Tensor::from_floats({static_cast<int64_t>(img.size())}, img));
        Tensor out = gpu_->empty({m, n});
        cuda::SmallGemmArgs a;
        a.out = out.data<float>();
        a.ldo = n;
        a.x = dimg.data<float>() + offset;
        a.ldx = ldx;
        a.w = dw.raw();
        a.w_dtype = dt;
        a.m = m;
        a.n = n;
        a.k = k;
        run(a, 0);
        const Tensor h = down(out);
        EXPECT_EQ(bit_diffs(h_packed.data<float>(), n, h.data<float>(), n, m, n), 0)
            << dtype_name(dt) << " " << sizes(m, n, k) << " offset " << offset << " ldx " << ldx;
      }
      // Through the public op: a packed view that starts 4 bytes into a buffer.
      Tensor buf = gpu_->empty({m * k + 1});
      Tensor view = Tensor::view_of(buf.data<float>() + 1, {m, k}, DType::kF32, buf.device());
      gpu_->copy(view, x);
      Tensor out = gpu_->empty({m, n});
      gpu_->matmul(out, view, dw);
      const Tensor h = down(out);
      EXPECT_EQ(bit_diffs(h_packed.data<float>(), n, h.data<float>(), n, m, n), 0)
          << dtype_name(dt) << " " << sizes(m, n, k) << " unaligned matmul view";
    }
  }
}

// head_matmul (heads in the grid's y, x rows H*K apart) for each bucket, with
// K = 64 (vector path) and 65 (element-wise); each row alone gives the same bits.
TEST_F(SmallGemm, HeadMatmulEveryBucket) {
  const int64_t h = 4, n = 19;
  for (int64_t k : {64, 65}) {
    const Tensor w = randn({h, n, k}, 141, 0.2f);
    for (DType dt : kWeightTypes) {
      Tensor dw, rw;
      weights(w, dt, dw, rw);
      for (int64_t t : {1, 2, 3, 4, 5, 8, 9, 16, 24, 33, 64}) {
        const Tensor x = randn({t, h, k}, 142 + static_cast<uint32_t>(t));
        Tensor ref = Tensor::empty({t, h, n}, DType::kF32);
        cpu_->head_matmul(ref, x, rw);
        Tensor out = gpu_->empty({t, h, n});
        gpu_->head_matmul(out, up(x), dw);
        const Tensor got = down(out);
        EXPECT_LE(rel_err_nan_matched(ref, got), 1e-5)
            << "head_matmul " << dtype_name(dt) << " T=" << t << " K=" << k;
        const int64_t r = t / 2;
        Tensor one = gpu_->empty({1, h, n});
        gpu_->head_matmul(one, up(x.slice(0, r, r + 1).contiguous()), dw);
        const Tensor h_one = down(one);
        EXPECT_EQ(bit_diffs(h_one.data<float>(), h * n, got.data<float>() + r * h * n, h * n, 1, h * n), 0)
            << "head_matmul row " << r << " of T=" << t << " " << dtype_name(dt) << " K=" << k;
      }
    }
  }
}

// Model-sized K (4096) and N just past a multiple of the column blocks, where the
// default plan uses several columns per warp.
TEST_F(SmallGemm, ModelSizedShapes) {
  const int64_t n = 2053, k = 4096;
  const Tensor w = randn({n, k}, 151, 0.02f);
  for (DType dt : kWeightTypes) {
    Tensor dw, rw;
    weights(w, dt, dw, rw);
    for (int64_t m : {1, 3, 8, 27, 64}) {
      const Tensor x = randn({m, k}, 152 + static_cast<uint32_t>(m));
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      cpu_->matmul(ref, x, rw, false);
      Tensor out = gpu_->empty({m, n});
      gpu_->matmul(out, up(x), dw);
      const double e = rel_err_nan_matched(ref, down(out));
      std::printf("[parity] small_gemm %-5s %-22s max rel err %.3g (tol 1e-05)\n", dtype_name(dt),
                  sizes(m, n, k).c_str(), e);
      EXPECT_LE(e, 1e-5) << dtype_name(dt) << " " << sizes(m, n, k);
    }
  }
}

TEST_F(SmallGemm, BadArgumentsAreErrors) {
  cuda::SmallGemmArgs a;
  a.m = a.n = a.k = 1;
  a.w_dtype = DType::kF16;
  try {
    cuda::small_gemm(nullptr, a);
    FAIL() << "f16 weights were accepted";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("f32 or bf16"), std::string::npos) << e.what();
  }
  a.w_dtype = DType::kBF16;
  try {
    cuda::small_gemm(nullptr, a, 3);
    FAIL() << "cols_per_warp 3 was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("cols_per_warp"), std::string::npos) << e.what();
  }
}

TEST(SmallGemmPlan, BucketsAndColumnChoice) {
  // Rows per warp follow the m buckets; above 8 rows, 8 per warp.
  EXPECT_EQ(cuda::small_gemm_plan(1, 8192, 1, 132).rows_per_warp, 1);
  EXPECT_EQ(cuda::small_gemm_plan(2, 8192, 1, 132).rows_per_warp, 2);
  EXPECT_EQ(cuda::small_gemm_plan(3, 8192, 1, 132).rows_per_warp, 4);
  EXPECT_EQ(cuda::small_gemm_plan(5, 8192, 1, 132).rows_per_warp, 8);
  EXPECT_EQ(cuda::small_gemm_plan(64, 8192, 1, 132).rows_per_warp, 8);
  // Big N keeps the preferred column count; small N trades it for warps in flight.
  EXPECT_EQ(cuda::small_gemm_plan(1, 154880, 1, 132).cols_per_warp, 2);
  EXPECT_EQ(cuda::small_gemm_plan(64, 154880, 1, 132).cols_per_warp, 8);
  EXPECT_LT(cuda::small_gemm_plan(8, 2048, 1, 132).cols_per_warp, 8);
  EXPECT_EQ(cuda::small_gemm_plan(1, 8, 1, 132).cols_per_warp, 1);
  EXPECT_EQ(cuda::small_gemm_plan(8, 8192, 1, 132, 1).cols_per_warp, 1);  // forced
}

}  // namespace
}  // namespace tf
