// Ops::matmul_many on CUDA (kernels/cuda/cuda_matmul_many.cc): several projections of
// one x in one launch per format must give every output the bits of a separate
// matmul call on its matrix (issue #8: fewer launches per decode token, same tokens).
//
// - q4, fp8, bf16 and f32 groups at m = 1, 3, 8, 40 (the 40-row case both at decode
//   rows, exact_rows 64, and above exact_rows 8 where it falls back to the loop);
//   widths like a KDA layer's (wide q/k/v, narrow f_a/b_proj/g_a) scaled down.
// - Mixed formats in one call, a matrix of another K (x seen as [m*K/K2, K2]), more
//   than 8 matrices of one format, K not a multiple of 4 (small_gemm's loop path).
// - Outputs packed into one buffer.
// - Captured in a CUDA graph: replay gives the eager bits.
// - small_gemm_many directly at every rows-per-warp bucket with matrices whose
//   plans differ (short K, narrow and wide N).
// - Bad arguments are refused (sizes, null entries, a K that does not divide x).
// "[matmul-many]" lines count the calls compared.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/small_gemm.h"
#include "model/dense_quant.h"
#include "test_tensors.h"

namespace tf {
namespace {

std::unique_ptr<Ops> cuda_ops(int64_t exact_rows) {
  auto g = make_cuda_ops(0, exact_rows);
  if (!g) throw StatusError(g.status());
  return std::move(*g);
}

class CudaMatmulMany : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    ASSERT_GT(count, 0) << "these tests need a CUDA GPU";
    gpu_ = cuda_ops(64);
  }
  // A random [n, k] matrix in `f` (dense: `dt`) on the device of `ops`.
  Matrix make(Ops& ops, int64_t n, int64_t k, MatrixFormat f, DType dt, uint32_t seed) {
    const Tensor w = randn({n, k}, seed, 0.05f);
    if (f == MatrixFormat::kDense) return Matrix(ops.to_device(dt == DType::kBF16 ? w.to_dtype(DType::kBF16) : w));
    Expected<Matrix> q = quantize_matrix(w, f, "w");
    if (!q) throw StatusError(q.status());
    return q->with_storage(ops.to_device(q->codes()), ops.to_device(q->scales()));
  }
  // matmul_many over ws against x (host [rows, cols]) vs matmul one by one: counts the
  // outputs whose bits differ (0 expected); outputs start as NaN so unwritten ones show.
  int64_t compare(Ops& ops, const Tensor& x_host, const std::vector<Matrix>& ws, const std::string& what) {
    const Tensor x = ops.to_device(x_host);
    std::vector<Tensor> together, alone;
    std::vector<Tensor*> outs;
    std::vector<const Matrix*> wp;
    for (const Matrix& w : ws) {
      const int64_t m = x_host.numel() / w.size(1);
      std::vector<float> nan(static_cast<size_t>(m * w.size(0)), std::nanf(""));
      together.push_back(ops.to_device(Tensor::from_floats({m, w.size(0)}, nan)));
      alone.push_back(ops.to_device(Tensor::from_floats({m, w.size(0)}, nan)));
    }
    for (size_t i = 0; i < ws.size(); ++i) {
      outs.push_back(&together[i]);
      wp.push_back(&ws[i]);
      ops.matmul(alone[i], x, ws[i]);
    }
    ops.matmul_many(outs, x, wp);
    int64_t bad = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Tensor a = ops.to_host(together[i]), b = ops.to_host(alone[i]);
      const bool same = same_bits(a, b);
      bad += !same;
      EXPECT_TRUE(same) << what << ": matrix " << i << " " << ws[i].describe() << " differs from matmul";
      for (float v : a.to_vector())
        if (std::isnan(v)) {
          ADD_FAILURE() << what << ": matrix " << i << " left NaN outputs";
          break;
        }
    }
    ++calls_;
    return bad;
  }
  std::unique_ptr<Ops> gpu_;
  int calls_ = 0;
};

// KDA-like widths over one K: wide (q/k/v), narrow (f_a/g_a), very narrow (b_proj), odd.
const std::vector<int64_t> kWidths = {1024, 1024, 1024, 128, 16, 128, 72};

TEST_F(CudaMatmulMany, EachFormatEqualsSeparateCalls) {
  auto small = cuda_ops(8);  // 40 rows are above its exact_rows: the loop
  const int64_t k = 512;
  uint32_t seed = 1;
  for (auto [f, dt] : {std::pair{MatrixFormat::kQ4, DType::kU8}, {MatrixFormat::kFp8Block, DType::kF8E4M3},
                       {MatrixFormat::kDense, DType::kBF16}, {MatrixFormat::kDense, DType::kF32}}) {
    std::vector<Matrix> ws, ws_small;
    for (int64_t n : kWidths) {
      ws.push_back(make(*gpu_, n, k, f, dt, seed));
      ws_small.push_back(make(*small, n, k, f, dt, seed++));
    }
    for (int64_t m : {1, 3, 8, 40}) {
      const Tensor x = randn({m, k}, 100 + static_cast<uint32_t>(m));
      const std::string what = std::string(matrix_format_name(f)) + "/" + dtype_name(dt) + " m=" + std::to_string(m);
      compare(*gpu_, x, ws, what);
      if (m == 40) compare(*small, x, ws_small, what + " above exact_rows");
    }
  }
  std::printf("[matmul-many] per-format groups: %d calls compared bit for bit\n", calls_);
}

TEST_F(CudaMatmulMany, MixedFormatsOtherKAndLongGroups) {
  const int64_t k = 256;
  std::vector<Matrix> mixed;
  uint32_t seed = 50;
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block, MatrixFormat::kDense})
    for (int64_t n : {192, 24, 130}) mixed.push_back(make(*gpu_, n, k, f, DType::kBF16, seed++));
  mixed.push_back(make(*gpu_, 40, k, MatrixFormat::kDense, DType::kF32, seed++));
  mixed.push_back(make(*gpu_, 64, k / 2, MatrixFormat::kDense, DType::kBF16, seed++));  // x as [2m, K/2]
  mixed.push_back(make(*gpu_, 64, k / 2, MatrixFormat::kQ4, DType::kU8, seed++));
  mixed.push_back(make(*gpu_, 64, k / 2, MatrixFormat::kQ4, DType::kU8, seed++));
  for (int64_t m : {1, 3, 8, 40}) compare(*gpu_, randn({m, k}, 7 + static_cast<uint32_t>(m)), mixed, "mixed");
  // 11 bf16 and 10 q4 matrices: groups of 8 and the rest.
  std::vector<Matrix> many;
  for (int i = 0; i < 11; ++i) many.push_back(make(*gpu_, 32 + 8 * i, k, MatrixFormat::kDense, DType::kBF16, seed++));
  for (int i = 0; i < 10; ++i) many.push_back(make(*gpu_, 64 + 16 * i, k, MatrixFormat::kQ4, DType::kU8, seed++));
  for (int64_t m : {1, 8}) compare(*gpu_, randn({m, k}, 70 + static_cast<uint32_t>(m)), many, "long groups");
  // K = 130 (not a multiple of 4): small_gemm's element-wise path, one matmul per matrix.
  std::vector<Matrix> odd;
  for (int64_t n : {33, 8, 65}) odd.push_back(make(*gpu_, n, 130, MatrixFormat::kDense, DType::kBF16, seed++));
  for (int64_t m : {1, 5}) compare(*gpu_, randn({m, 130}, 90 + static_cast<uint32_t>(m)), odd, "K=130");
  std::printf("[matmul-many] mixed / other K / long groups / odd K: %d calls compared bit for bit\n", calls_);
}

TEST_F(CudaMatmulMany, PackedOutputsAndGraphs) {
  const int64_t k = 512, m = 2;
  std::vector<Matrix> ws;
  for (int64_t n : {256, 64, 128})
    ws.push_back(make(*gpu_, n, k, MatrixFormat::kQ4, DType::kU8, static_cast<uint32_t>(n)));
  for (int64_t n : {128, 32}) ws.push_back(make(*gpu_, n, k, MatrixFormat::kDense, DType::kBF16, static_cast<uint32_t>(n + 1)));
  const Tensor x = gpu_->to_device(randn({m, k}, 5));
  std::vector<Tensor> ref;
  for (const Matrix& w : ws) {
    ref.push_back(gpu_->empty({m, w.size(0)}));
    gpu_->matmul(ref.back(), x, w);
  }
  std::vector<const Matrix*> wp;
  for (const Matrix& w : ws) wp.push_back(&w);
  // Outputs as consecutive packed pieces of one buffer.
  int64_t total = 0;
  for (const Matrix& w : ws) total += m * w.size(0);
  Tensor buf = gpu_->zeros({total});
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (const Matrix& w : ws) {
    pieces.push_back(buf.slice(0, at, at + m * w.size(0)).reshape({m, w.size(0)}));
    at += m * w.size(0);
  }
  std::vector<Tensor*> outs;
  for (Tensor& p : pieces) outs.push_back(&p);
  gpu_->matmul_many(outs, x, wp);
  for (size_t i = 0; i < ws.size(); ++i)
    EXPECT_TRUE(same_bits(gpu_->to_host(pieces[i]), gpu_->to_host(ref[i]))) << "packed piece " << i;

  // Captured: the replay writes the eager bits (the q4 group's workspace comes from the arena).
  Tensor zero = gpu_->zeros({total});
  gpu_->copy(buf, zero);
  auto graph = gpu_->capture([&]() { gpu_->matmul_many(outs, x, wp); });
  ASSERT_TRUE(graph.has_value()) << graph.status().to_string();
  ASSERT_TRUE(gpu_->replay(**graph).is_ok());
  for (size_t i = 0; i < ws.size(); ++i)
    EXPECT_TRUE(same_bits(gpu_->to_host(pieces[i]), gpu_->to_host(ref[i]))) << "replayed piece " << i;
}

TEST_F(CudaMatmulMany, SmallGemmManyKeepsEachPlan) {
  // Plans differ per matrix: wide N (one K slice, 8 columns a warp), narrow N with
  // long K (8 slices), tiny N; every rows-per-warp bucket and two 64-row passes.
  const int64_t k = 2048;
  const std::vector<int64_t> widths = {2048, 96, 24, 1, 300};
  int64_t bad = 0;
  for (DType dt : {DType::kBF16, DType::kF32}) {
    std::vector<Tensor> ws;
    for (int64_t n : widths) {
      const Tensor w = randn({n, k}, static_cast<uint32_t>(n + 3), 0.05f);
      ws.push_back(gpu_->to_device(dt == DType::kBF16 ? w.to_dtype(DType::kBF16) : w));
    }
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 64, 70}) {
      const Tensor x = gpu_->to_device(randn({m, k}, 31 + static_cast<uint32_t>(m)));
      std::vector<Tensor> together, alone;
      std::vector<cuda::SmallGemmMatrix> mats;
      for (size_t i = 0; i < ws.size(); ++i) {
        const int64_t n = widths[i];
        together.push_back(gpu_->zeros({m, n}));
        alone.push_back(gpu_->zeros({m, n}));
        cuda::SmallGemmArgs a;
        a.out = alone.back().data<float>();
        a.ldo = n;
        a.x = x.data<float>();
        a.ldx = k;
        a.w = ws[i].raw();
        a.w_dtype = dt;
        a.m = m;
        a.n = n;
        a.k = k;
        cuda::small_gemm(cuda_ops_stream(*gpu_), a);
        mats.push_back({together.back().data<float>(), n, ws[i].raw(), dt, n});
      }
      cuda::small_gemm_many(cuda_ops_stream(*gpu_), x.data<float>(), k, m, k, mats.data(),
                            static_cast<int>(mats.size()), false);
      for (size_t i = 0; i < ws.size(); ++i) {
        const bool same = same_bits(gpu_->to_host(together[i]), gpu_->to_host(alone[i]));
        bad += !same;
        EXPECT_TRUE(same) << dtype_name(dt) << " m=" << m << " n=" << widths[i];
      }
    }
  }
  std::printf("[matmul-many] small_gemm_many vs small_gemm: %lld mismatching outputs\n", static_cast<long long>(bad));
}

TEST_F(CudaMatmulMany, RefusesBadArguments) {
  const Matrix w = make(*gpu_, 16, 64, MatrixFormat::kDense, DType::kBF16, 1);
  const Tensor x = gpu_->to_device(randn({2, 64}, 2));
  Tensor o = gpu_->empty({2, 16}), wrong = gpu_->empty({2, 15});
  EXPECT_THROW(gpu_->matmul_many({&o}, x, {&w, &w}), StatusError);
  EXPECT_THROW(gpu_->matmul_many({&o, nullptr}, x, {&w, &w}), StatusError);
  EXPECT_THROW(gpu_->matmul_many({&o, &wrong}, x, {&w, &w}), StatusError);
  const Matrix w48 = make(*gpu_, 16, 48, MatrixFormat::kQ4, DType::kU8, 3);  // 128 % 48 != 0
  EXPECT_THROW(gpu_->matmul_many({&o, &o}, x, {&w, &w48}), StatusError);
  gpu_->matmul_many({}, x, {});  // nothing to do
}

}  // namespace
}  // namespace tf
