// Ops::matmul_many's default (kernels/api/ops.cc) on the CPU backend: each output has
// the bits of matmul on its matrix alone, for dense f32 (the CPU's) and q4 / fp8 matrices
// mixed in one call (and a matrix of another K, which sees x as [m*K/K2, K2]); bad
// arguments are refused as matmul refuses them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/dense_quant.h"
#include "test_tensors.h"

namespace tf {
namespace {

Matrix make(int64_t n, int64_t k, MatrixFormat f, DType dt, uint32_t seed) {
  const Tensor w = randn({n, k}, seed, 0.05f);
  if (f == MatrixFormat::kDense) return Matrix(dt == DType::kBF16 ? w.to_dtype(DType::kBF16) : w);  // (CPU: f32)
  Expected<Matrix> q = quantize_matrix(w, f, "w");
  EXPECT_TRUE(q.has_value()) << q.status().to_string();
  return q.has_value() ? *q : Matrix();
}

TEST(CpuMatmulMany, EqualsSeparateMatmuls) {
  auto ops = make_cpu_ops();
  const int64_t k = 192;
  std::vector<Matrix> ws;
  uint32_t seed = 1;
  for (int64_t n : {64, 7}) {
    ws.push_back(make(n, k, MatrixFormat::kQ4, DType::kU8, seed++));
    ws.push_back(make(n, k, MatrixFormat::kFp8Block, DType::kF8E4M3, seed++));
    ws.push_back(make(n, k, MatrixFormat::kDense, DType::kF32, seed++));
    ws.push_back(make(n, k, MatrixFormat::kDense, DType::kF32, seed++));
  }
  ws.push_back(make(24, k / 3, MatrixFormat::kDense, DType::kF32, seed++));  // x as [3m, 64]
  int compared = 0;
  for (int64_t m : {1, 3, 8, 40}) {
    const Tensor x = randn({m, k}, 100 + static_cast<uint32_t>(m));
    std::vector<Tensor> together, alone;
    for (const Matrix& w : ws) {
      const int64_t rows = m * k / w.size(1);
      together.push_back(Tensor::zeros({rows, w.size(0)}, DType::kF32));
      alone.push_back(Tensor::zeros({rows, w.size(0)}, DType::kF32));
    }
    std::vector<Tensor*> outs;
    std::vector<const Matrix*> wp;
    for (size_t i = 0; i < ws.size(); ++i) {
      outs.push_back(&together[i]);
      wp.push_back(&ws[i]);
      ops->matmul(alone[i], x, ws[i]);
    }
    ops->matmul_many(outs, x, wp);
    for (size_t i = 0; i < ws.size(); ++i, ++compared)
      EXPECT_TRUE(same_bits(together[i], alone[i])) << "m=" << m << " matrix " << i << " " << ws[i].describe();
  }
  EXPECT_EQ(compared, 4 * 9);
}

TEST(CpuMatmulMany, RefusesBadArguments) {
  auto ops = make_cpu_ops();
  const Matrix w = make(16, 64, MatrixFormat::kDense, DType::kF32, 1);
  const Tensor x = randn({2, 64}, 2);
  Tensor o = Tensor::zeros({2, 16}, DType::kF32), wrong = Tensor::zeros({2, 15}, DType::kF32);
  EXPECT_THROW(ops->matmul_many({&o}, x, {&w, &w}), StatusError);
  EXPECT_THROW(ops->matmul_many({&o, nullptr}, x, {&w, &w}), StatusError);
  EXPECT_THROW(ops->matmul_many({&o, &wrong}, x, {&w, &w}), StatusError);
  const Matrix w48 = make(16, 48, MatrixFormat::kQ4, DType::kU8, 3);  // 128 % 48 != 0
  EXPECT_THROW(ops->matmul_many({&o, &o}, x, {&w, &w48}), StatusError);
  ops->matmul_many({}, x, {});
}

}  // namespace
}  // namespace tf
