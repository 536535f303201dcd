// Quantized dense matrices on the CPU: the q4 / fp8 quantizers (model/dense_quant.h)
// and Ops::matmul against a quantized Matrix (kernels/cpu/cpu_quant_linear.cc).
//
// - The CPU quant_matmul equals the dense matmul against the dequantized matrix bit
//   for bit (awkward shapes: K not a multiple of 64 / 128, N not of 16 / 128, 1..9 rows,
//   accumulate), so the kernel adds no error of its own beyond the format's.
// - q4: the searched scale is never worse than the plain amax/7 scale on any group
//   and beats it overall; error bounds on Gaussian weights (measured: relative RMS
//   0.095 for searched scales vs 0.108 for amax/7; the bound is 0.10).
// - fp8: every block's largest weight maps to +-448; relative error per element
//   within e4m3's half-ulp (2^-4) plus the subnormal floor; re-quantizing the
//   dequantized matrix gives back the same codes (what serving the official FP8
//   release through DENSE=fp8 relies on).
// - Malformed inputs and matrices are refused with messages naming them.
#include <gtest/gtest.h>

#include <cmath>
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

Matrix quantize_or_die(const Tensor& w, MatrixFormat f) {
  Expected<Matrix> m = quantize_matrix(w, f, "test");
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  return m.has_value() ? *m : Matrix();
}

TEST(CpuQuantMatmul, EqualsDenseMatmulOfDequantizedMatrix) {
  auto ops = make_cpu_ops();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},   {17, 63}, {16, 64},  {33, 65},
                                                           {129, 130}, {5, 300}, {200, 257}};
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (auto [n, k] : shapes) {
      const Tensor w = randn({n, k}, static_cast<uint32_t>(n * 1000 + k), 0.05f);
      const Matrix q = quantize_or_die(w, f);
      ASSERT_TRUE(check_matrix(q, "q").is_ok()) << check_matrix(q, "q").to_string();
      EXPECT_EQ(q.size(0), n);
      EXPECT_EQ(q.size(1), k);
      const Tensor deq = dequantize_matrix(q);
      for (int64_t rows : {1, 3, 9}) {
        const Tensor x = randn({rows, k}, static_cast<uint32_t>(rows + 7));
        Tensor got = Tensor::zeros({rows, n}, DType::kF32), ref = Tensor::zeros({rows, n}, DType::kF32);
        ops->matmul(got, x, q);
        ops->matmul(ref, x, deq);
        EXPECT_TRUE(same_bits(got, ref)) << matrix_format_name(f) << " N=" << n << " K=" << k << " rows=" << rows;
        ops->matmul(got, x, q, /*accumulate=*/true);
        ops->matmul(ref, x, deq, /*accumulate=*/true);
        EXPECT_TRUE(same_bits(got, ref)) << "accumulate " << matrix_format_name(f) << " N=" << n << " K=" << k;
      }
    }
  }
}

TEST(CpuQuantMatmul, RowsDoNotDependOnBatchMates) {
  auto ops = make_cpu_ops();
  const Tensor w = randn({96, 192}, 3, 0.02f);
  const Matrix q = quantize_or_die(w, MatrixFormat::kQ4);
  const Tensor x = randn({7, 192}, 4);
  Tensor all = Tensor::empty({7, 96}, DType::kF32);
  ops->matmul(all, x, q);
  for (int64_t r = 0; r < 7; ++r) {
    Tensor one = Tensor::empty({1, 96}, DType::kF32);
    ops->matmul(one, x.slice(0, r, r + 1).contiguous(), q);
    EXPECT_TRUE(same_bits(one, all.slice(0, r, r + 1).contiguous())) << "row " << r;
  }
}

// Squared error of one q4 group with scale s (the quantizer's rounding rule).
double group_sse(const float* v, int64_t n, float s) {
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float q = s == 0 ? 0 : std::clamp(std::nearbyint(v[i] / s), -8.0f, 7.0f);
    e += (v[i] - q * s) * static_cast<double>(v[i] - q * s);
  }
  return e;
}

TEST(DenseQuant, Q4SearchedScalesBeatAmaxScales) {
  const int64_t n = 64, k = 1000;  // last group 40 wide
  const Tensor w = randn({n, k}, 11, 0.03f);
  const Matrix q = quantize_or_die(w, MatrixFormat::kQ4);
  const Tensor deq = dequantize_matrix(q);
  const float* src = w.data<float>();
  const float* dq = deq.data<float>();
  double sse = 0, sse_amax = 0, energy = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c0 = 0; c0 < k; c0 += kQ4Group) {
      const int64_t len = std::min(kQ4Group, k - c0);
      const float* v = src + r * k + c0;
      float amax = 0;
      for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(v[i]));
      const double plain = group_sse(v, len, f16_to_float(float_to_f16(amax / 7)));
      double got = 0;
      for (int64_t i = 0; i < len; ++i) got += (v[i] - dq[r * k + c0 + i]) * static_cast<double>(v[i] - dq[r * k + c0 + i]);
      EXPECT_LE(got, plain * (1 + 1e-6) + 1e-12) << "row " << r << " group " << c0 / kQ4Group;
      sse += got;
      sse_amax += plain;
      for (int64_t i = 0; i < len; ++i) energy += static_cast<double>(v[i]) * v[i];
    }
  }
  const double rel = std::sqrt(sse / energy), rel_amax = std::sqrt(sse_amax / energy);
  std::printf("q4 relative RMS error: searched %.4f, amax/7 %.4f\n", rel, rel_amax);
  EXPECT_LT(rel, rel_amax * 0.97);
  EXPECT_LT(rel, 0.10);
}

TEST(DenseQuant, Q4PaddingAndZeroGroups) {
  Tensor w = Tensor::zeros({3, 70}, DType::kF32);
  w.data<float>()[70 + 69] = -1.5f;  // row 1, in the 6-wide tail group
  const Matrix q = quantize_or_die(w, MatrixFormat::kQ4);
  EXPECT_EQ(q.codes().shape(), (Shape{3, 64}));
  EXPECT_EQ(q.scales().shape(), (Shape{3, 2}));
  const Tensor deq = dequantize_matrix(q);
  for (int64_t i = 0; i < 3 * 70; ++i)
    EXPECT_NEAR(deq.data<float>()[i], w.data<float>()[i], i == 139 ? 0.2 : 0.0) << i;
  // Nibbles past K hold q = 0 (0x8).
  const uint8_t* tail = q.codes().data<uint8_t>() + 64 + 32;
  for (int j = 3; j < 32; ++j) EXPECT_EQ(tail[j], 0x88) << j;
}

TEST(DenseQuant, Fp8BlocksFollowTheOfficialRecipe) {
  const int64_t n = 200, k = 300;  // partial blocks both ways
  const Tensor w = randn({n, k}, 5, 0.02f);
  const Matrix q = quantize_or_die(w, MatrixFormat::kFp8Block);
  ASSERT_EQ(q.scales().shape(), (Shape{2, 3}));
  const Tensor deq = dequantize_matrix(q);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 3; ++bc) {
      float amax = 0, code_max = 0;
      for (int64_t r = br * 128; r < std::min(n, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(k, bc * 128 + 128); ++c) {
          amax = std::max(amax, std::fabs(w.data<float>()[r * k + c]));
          code_max = std::max(code_max, std::fabs(fp8_e4m3_to_float(q.codes().data<uint8_t>()[r * k + c])));
        }
      EXPECT_EQ(code_max, 448.0f);
      EXPECT_FLOAT_EQ(q.scales().data<float>()[br * 3 + bc], amax / 448.0f);
      const float s = q.scales().data<float>()[br * 3 + bc];
      for (int64_t r = br * 128; r < std::min(n, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(k, bc * 128 + 128); ++c) {
          const float v = w.data<float>()[r * k + c], d = deq.data<float>()[r * k + c];
          EXPECT_LE(std::fabs(v - d), std::fabs(v) / 16 + s * std::ldexp(1.0f, -10)) << r << "," << c;
        }
    }
  // Re-quantizing the dequantized matrix reproduces the codes.
  const Matrix again = quantize_or_die(deq, MatrixFormat::kFp8Block);
  int64_t differ = 0;
  for (int64_t i = 0; i < n * k; ++i) differ += q.codes().data<uint8_t>()[i] != again.codes().data<uint8_t>()[i];
  EXPECT_EQ(differ, 0);
}

TEST(DenseQuant, RefusesWhatItCannotQuantize) {
  Expected<Matrix> three_d = quantize_q4(Tensor::zeros({2, 2, 2}, DType::kF32), "layers.0.q_proj");
  ASSERT_FALSE(three_d.has_value());
  EXPECT_NE(three_d.status().message().find("layers.0.q_proj"), std::string::npos);
  Tensor bad = Tensor::zeros({2, 4}, DType::kF32);
  bad.data<float>()[5] = NAN;
  Expected<Matrix> nan = quantize_fp8_block(bad, "o_proj");
  ASSERT_FALSE(nan.has_value());
  EXPECT_NE(nan.status().message().find("o_proj: non-finite value at [1, 1]"), std::string::npos)
      << nan.status().message();
  EXPECT_FALSE(quantize_q4(Tensor::zeros({2, 4}, DType::kI32), "ids").has_value());
}

TEST(DenseQuant, CheckMatrixNamesTheFault) {
  const Matrix good = quantize_or_die(randn({4, 130}, 1), MatrixFormat::kQ4);
  const Matrix short_codes = Matrix::q4(good.codes().slice(1, 0, 32).contiguous(), good.scales(), 130);
  Status s = check_matrix(short_codes, "mlp.down");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("mlp.down: q4 codes"), std::string::npos) << s.message();
  const Matrix fp8 = quantize_or_die(randn({4, 130}, 1), MatrixFormat::kFp8Block);
  s = check_matrix(Matrix::fp8_block(fp8.codes(), fp8.scales().slice(1, 0, 1).contiguous()), "q_b");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("q_b: fp8 scales"), std::string::npos) << s.message();
  auto ops = make_cpu_ops();
  Tensor out = Tensor::empty({1, 4}, DType::kF32);
  try {
    ops->matmul(out, randn({1, 130}, 2), short_codes);
    ADD_FAILURE() << "a malformed matrix was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("q4 codes"), std::string::npos);
  }
}

}  // namespace
}  // namespace tf
