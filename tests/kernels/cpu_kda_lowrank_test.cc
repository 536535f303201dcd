// Ops::kda_lowrank_gates' default on the CPU backend (the reference of the fused GPU
// op): its outputs are the bits of matmul, kda_gate, sigmoid and matmul run one by one
// (f32 weights: the CPU backend's; with and without the lower bound, beta in place), they agree
// with a scalar double-precision evaluation of the spec's formulas (3.4: g = λσ(e^A (r +
// dt_bias)) or -e^A softplus(r + dt_bias), gate = W_gb W_ga x, β = σ(b)), and a
// mis-shaped call is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

struct Inputs {
  Tensor fa, ga, logits, f_b, g_b, dt_bias, a_log;
};

Inputs make(int64_t t, int64_t h, int64_t dk, int64_t r, DType wdt, uint32_t seed) {
  const auto weight = [&](uint32_t s) { return randn({h * dk, r}, s, 0.3f).to_dtype(wdt).to_dtype(DType::kF32); };
  return {randn({t, r}, seed), randn({t, r}, seed + 1), randn({t, h}, seed + 2, 2.0f), weight(seed + 3), weight(seed + 4),
          randn({h * dk}, seed + 5, 0.5f), randn({h}, seed + 6, 0.5f)};
}

TEST(CpuKdaLowrank, DefaultHasTheBitsOfTheSeparateOps) {
  auto ops = make_cpu_ops();
  // A weight rounded to bf16 and back (as the GPU holds it) is still an f32 weight here.
  for (DType wdt : {DType::kF32, DType::kBF16})
    for (bool has_lb : {true, false}) {
      const int64_t t = 3, h = 4, dk = 8, r = 12, c = h * dk;
      const Inputs in = make(t, h, dk, r, wdt, 7);
      const std::string tag = std::string(dtype_name(wdt)) + (has_lb ? " lb" : " softplus");
      Tensor g = Tensor::empty({t, c}, DType::kF32), gate = Tensor::empty({t, c}, DType::kF32);
      Tensor beta = Tensor::empty({t, h}, DType::kF32);
      beta.copy_from(in.logits);  // in place, as the model calls it
      ops->kda_lowrank_gates(g, gate, beta, in.fa, in.ga, beta, in.f_b, in.g_b, in.dt_bias, in.a_log, has_lb, -5.0f);
      Tensor f = Tensor::empty({t, c}, DType::kF32), g_ref = Tensor::empty({t, c}, DType::kF32);
      Tensor gate_ref = Tensor::empty({t, c}, DType::kF32), beta_ref = Tensor::empty({t, h}, DType::kF32);
      ops->matmul(f, in.fa, in.f_b);
      ops->kda_gate(g_ref, f, in.dt_bias, in.a_log, has_lb, -5.0f);
      ops->sigmoid(beta_ref, in.logits);
      ops->matmul(gate_ref, in.ga, in.g_b);
      EXPECT_TRUE(same_bits(g, g_ref)) << tag;
      EXPECT_TRUE(same_bits(gate, gate_ref)) << tag;
      EXPECT_TRUE(same_bits(beta, beta_ref)) << tag;
      EXPECT_FALSE(same_bits(beta, in.logits)) << tag << ": beta was not written";
    }
}

TEST(CpuKdaLowrank, DefaultMatchesTheSpecFormulas) {
  auto ops = make_cpu_ops();
  const int64_t t = 2, h = 3, dk = 4, r = 8, c = h * dk;
  for (bool has_lb : {true, false}) {
    const Inputs in = make(t, h, dk, r, DType::kF32, 21);
    Tensor g = Tensor::empty({t, c}, DType::kF32), gate = Tensor::empty({t, c}, DType::kF32);
    Tensor beta = Tensor::empty({t, h}, DType::kF32);
    ops->kda_lowrank_gates(g, gate, beta, in.fa, in.ga, in.logits, in.f_b, in.g_b, in.dt_bias, in.a_log, has_lb,
                           -5.0f);
    const float *fa = in.fa.data<float>(), *ga = in.ga.data<float>(), *fb = in.f_b.data<float>(),
                *gb = in.g_b.data<float>(), *dt = in.dt_bias.data<float>(), *al = in.a_log.data<float>(),
                *lg = in.logits.data<float>();
    for (int64_t row = 0; row < t; ++row) {
      for (int64_t j = 0; j < c; ++j) {
        double fr = 0, gr = 0;
        for (int64_t i = 0; i < r; ++i) {
          fr += static_cast<double>(fa[row * r + i]) * fb[j * r + i];
          gr += static_cast<double>(ga[row * r + i]) * gb[j * r + i];
        }
        const double x = fr + dt[j], a = std::exp(static_cast<double>(al[j / dk]));
        const double want = has_lb ? -5.0 / (1.0 + std::exp(-a * x)) : -a * (x > 20 ? x : std::log1p(std::exp(x)));
        EXPECT_NEAR(g.data<float>()[row * c + j], want, 1e-5 * (1 + std::fabs(want))) << row << "," << j;
        EXPECT_NEAR(gate.data<float>()[row * c + j], gr, 1e-5 * (1 + std::fabs(gr))) << row << "," << j;
      }
      for (int64_t hh = 0; hh < h; ++hh) {
        const double want = 1.0 / (1.0 + std::exp(-static_cast<double>(lg[row * h + hh])));
        EXPECT_NEAR(beta.data<float>()[row * h + hh], want, 1e-6) << row << "," << hh;
      }
    }
  }
}

TEST(CpuKdaLowrank, MisShapedCallsAreErrors) {
  auto ops = make_cpu_ops();
  const Inputs in = make(2, 2, 4, 8, DType::kF32, 31);
  Tensor g = Tensor::empty({2, 8}, DType::kF32), gate = Tensor::empty({2, 8}, DType::kF32);
  Tensor beta = Tensor::empty({2, 2}, DType::kF32);
  const Tensor flat_fa = randn({16}, 1);
  EXPECT_THROW(ops->kda_lowrank_gates(g, gate, beta, flat_fa, in.ga, in.logits, in.f_b, in.g_b, in.dt_bias,
                                      in.a_log, true, -5.0f),
               StatusError);
  const Tensor wide_g_b = randn({8, 10}, 2);
  EXPECT_THROW(ops->kda_lowrank_gates(g, gate, beta, in.fa, in.ga, in.logits, in.f_b, wide_g_b, in.dt_bias,
                                      in.a_log, true, -5.0f),
               StatusError);
}

}  // namespace
}  // namespace tf
