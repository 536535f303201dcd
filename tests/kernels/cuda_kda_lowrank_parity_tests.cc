// Ops::kda_lowrank_gates on CUDA (cuda_kda_lowrank.cu: the KDA low-rank ups of decode
// rows in one launch) against the default sequence on the GPU (legacy_small_ops()
// forces it: matmul, kda_gate, sigmoid, matmul) and against the CPU backend:
// - decode rows (1-64; GLM-5.3-Flash's 64 heads x 128 with R = 128 bf16, and small
//   f32/bf16 shapes; with and without the lower bound): bit for bit equal to the GPU
//   default sequence, and within 1e-5 (relative to the largest value, floor 1) of the
//   CPU (the CPU matmul sums in another order);
// - a row's bits do not depend on the other rows of the call; beta in place equals
//   beta out of place; a captured graph replays the eager bits; with or without
//   programmatic dependent launch: the same bits;
// - calls the kernel does not take (over exact_rows rows, R not a multiple of 4 or
//   above 256, mixed weight dtypes) still give the default's result;
// - mis-shaped weights or biases are errors naming them.
// Part of cuda_ops_parity_tests (label gpu): runs on the GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/status.h"
#include "cpu_cuda_test.h"
#include "kernels/cuda/cuda_kda_lowrank.h"
#include "kernels/cuda/legacy_small_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

struct Case {
  int64_t heads, dk, rank;
  DType wdt;
};

struct Inputs {
  Tensor fa, ga, beta_logits, f_b, g_b, dt_bias, a_log;  // host
};

Inputs make_inputs(int64_t t, const Case& c, uint32_t seed) {
  const int64_t ch = c.heads * c.dk;
  Inputs in;
  in.fa = randn({t, c.rank}, seed, 1.0f);
  in.ga = randn({t, c.rank}, seed + 1, 1.0f);
  in.beta_logits = randn({t, c.heads}, seed + 2, 2.0f);
  // Weights ~ 1/sqrt(R): pre-activations O(1), so the gate's sigmoid is not saturated.
  in.f_b = randn({ch, c.rank}, seed + 3, 1.0f / 11.0f).to_dtype(c.wdt);
  in.g_b = randn({ch, c.rank}, seed + 4, 1.0f / 11.0f).to_dtype(c.wdt);
  in.dt_bias = randn({ch}, seed + 5, 0.5f);
  in.a_log = randn({c.heads}, seed + 6, 0.5f);
  return in;
}

struct Outs {
  Tensor g, gate, beta;  // host
};

class CudaKdaLowrank : public CpuCudaTest {
 protected:
  // The op on the GPU (the default sequence when `legacy`), results on the host.
  Outs gpu(const Inputs& in, bool has_lb, bool legacy = false, bool in_place = true) {
    const int64_t t = in.fa.size(0), ch = in.f_b.size(0), h = in.a_log.numel();
    Tensor g = gpu_->empty({t, ch}), gate = gpu_->empty({t, ch});
    Tensor logits = up(in.beta_logits);
    Tensor beta = in_place ? logits : gpu_->empty({t, h});
    cuda::legacy_small_ops() = legacy;
    gpu_->kda_lowrank_gates(g, gate, beta, up(in.fa), up(in.ga), logits, up(in.f_b), up(in.g_b), up(in.dt_bias),
                            up(in.a_log), has_lb, -5.0f);
    cuda::legacy_small_ops() = false;
    return {down(g), down(gate), down(beta)};
  }
  Outs cpu(const Inputs& in, bool has_lb) {
    const int64_t t = in.fa.size(0), ch = in.f_b.size(0), h = in.a_log.numel();
    Outs o{Tensor::empty({t, ch}, DType::kF32), Tensor::empty({t, ch}, DType::kF32),
           Tensor::empty({t, h}, DType::kF32)};
    // The CPU backend takes f32 weights: the bf16 ones widened (exactly).
    cpu_->kda_lowrank_gates(o.g, o.gate, o.beta, in.fa, in.ga, in.beta_logits, in.f_b.to_dtype(DType::kF32),
                            in.g_b.to_dtype(DType::kF32), in.dt_bias, in.a_log, has_lb, -5.0f);
    return o;
  }
};

bool same(const Outs& a, const Outs& b) {
  return same_bits(a.g, b.g) && same_bits(a.gate, b.gate) && same_bits(a.beta, b.beta);
}

Tensor row_of(const Tensor& t, int64_t r) { return t.slice(0, r, r + 1).contiguous(); }

TEST_F(CudaKdaLowrank, FusedHasTheDefaultBitsAndMatchesTheCpu) {
  double worst = 0;
  for (const Case& c : {Case{64, 128, 128, DType::kBF16}, Case{4, 16, 16, DType::kF32},
                        Case{3, 32, 64, DType::kBF16}, Case{2, 8, 200, DType::kBF16}, Case{5, 4, 256, DType::kF32}}) {
    for (int64_t t : {1, 2, 8, 9, 33, 64}) {
      for (bool has_lb : {true, false}) {
        const Inputs in = make_inputs(t, c, 10 + static_cast<uint32_t>(t + c.heads * c.dk + c.rank));
        const std::string tag = "H=" + std::to_string(c.heads) + " Dk=" + std::to_string(c.dk) +
                                " R=" + std::to_string(c.rank) + " " + dtype_name(c.wdt) +
                                " T=" + std::to_string(t) + (has_lb ? " lb" : " softplus");
        const Outs fused = gpu(in, has_lb), seq = gpu(in, has_lb, true), ref = cpu(in, has_lb);
        EXPECT_TRUE(same_bits(seq.g, fused.g)) << "g " << tag;
        EXPECT_TRUE(same_bits(seq.gate, fused.gate)) << "gate " << tag;
        EXPECT_TRUE(same_bits(seq.beta, fused.beta)) << "beta " << tag;
        const double eg = parity_rel_err(ref.g, fused.g), egate = parity_rel_err(ref.gate, fused.gate),
                     eb = parity_rel_err(ref.beta, fused.beta);
        EXPECT_LE(eg, 1e-5) << "g vs CPU " << tag;
        EXPECT_LE(egate, 1e-5) << "gate vs CPU " << tag;
        EXPECT_LE(eb, 1e-6) << "beta vs CPU " << tag;
        worst = std::max({worst, eg, egate, eb});
      }
    }
  }
  std::printf("[kda-lowrank] fused == default sequence bit for bit; worst rel err vs CPU %.3g\n", worst);
}

TEST_F(CudaKdaLowrank, RowsAreIndependentAndInPlaceBetaIsTheSame) {
  const Case c{64, 128, 128, DType::kBF16};
  const Inputs all = make_inputs(8, c, 77);
  const Outs o = gpu(all, true), again = gpu(all, true), apart = gpu(all, true, false, false);
  EXPECT_TRUE(same(o, again)) << "repeated calls differ";
  EXPECT_TRUE(same(o, apart)) << "beta out of place differs from in place";
  for (int64_t r : {0, 3, 7}) {
    Inputs one = all;
    one.fa = row_of(all.fa, r);
    one.ga = row_of(all.ga, r);
    one.beta_logits = row_of(all.beta_logits, r);
    const Outs alone = gpu(one, true);
    EXPECT_TRUE(same_bits(row_of(o.g, r), alone.g)) << "row " << r;
    EXPECT_TRUE(same_bits(row_of(o.gate, r), alone.gate)) << "row " << r;
    EXPECT_TRUE(same_bits(row_of(o.beta, r), alone.beta)) << "row " << r;
  }
}

TEST_F(CudaKdaLowrank, GraphReplayAndPdlGiveTheEagerBits) {
  const Case c{64, 128, 128, DType::kBF16};
  const int64_t t = 4, ch = c.heads * c.dk;
  const Inputs in = make_inputs(t, c, 91);
  const Outs eager = gpu(in, true, false, false);
  cuda::kda_lowrank_pdl() = false;
  const Outs no_pdl = gpu(in, true, false, false);
  cuda::kda_lowrank_pdl() = true;
  EXPECT_TRUE(same(eager, no_pdl)) << "programmatic dependent launch changes the bits";
  const Tensor fa = up(in.fa), ga = up(in.ga), logits = up(in.beta_logits), f_b = up(in.f_b), g_b = up(in.g_b),
               dt = up(in.dt_bias), al = up(in.a_log);
  Tensor g = gpu_->zeros({t, ch}), gate = gpu_->zeros({t, ch}), beta = gpu_->zeros({t, c.heads});
  auto graph =
      gpu_->capture([&]() { gpu_->kda_lowrank_gates(g, gate, beta, fa, ga, logits, f_b, g_b, dt, al, true, -5.0f); });
  ASSERT_TRUE(graph) << graph.status().to_string();
  ASSERT_TRUE(gpu_->replay(**graph).is_ok());
  EXPECT_TRUE(same(eager, {down(g), down(gate), down(beta)}));
}

TEST_F(CudaKdaLowrank, CallsTheKernelDoesNotTakeGiveTheDefaultResult) {
  struct Odd {
    Case c;
    int64_t t;
  };
  for (const Odd& o : {Odd{{4, 16, 18, DType::kBF16}, 3}, Odd{{2, 16, 512, DType::kBF16}, 2},
                       Odd{{4, 16, 32, DType::kBF16}, 65}, Odd{{3, 6, 16, DType::kF32}, 2}}) {
    const Inputs in = make_inputs(o.t, o.c, 300 + static_cast<uint32_t>(o.c.rank + o.t));
    const std::string tag = "R=" + std::to_string(o.c.rank) + " T=" + std::to_string(o.t);
    EXPECT_TRUE(same(gpu(in, true), gpu(in, true, true))) << tag;
    if (o.t <= 64) {  // above exact_rows the GPU matmul rounds x to bf16 (cuBLAS)
      const Outs ref = cpu(in, true), got = gpu(in, true);
      EXPECT_LE(parity_rel_err(ref.g, got.g), 1e-5) << tag;
      EXPECT_LE(parity_rel_err(ref.gate, got.gate), 1e-5) << tag;
    }
  }
  // f_b f32 with g_b bf16: the default sequence, each matmul by its own weight.
  Inputs mixed = make_inputs(2, {4, 16, 32, DType::kBF16}, 400);
  mixed.f_b = mixed.f_b.to_dtype(DType::kF32);
  EXPECT_TRUE(same(gpu(mixed, false), gpu(mixed, false, true)));
}

TEST_F(CudaKdaLowrank, MisShapedInputsAreErrorsNamingThem) {
  const Case c{4, 16, 32, DType::kBF16};
  const Inputs in = make_inputs(2, c, 500);
  Tensor g = gpu_->empty({2, 64}), gate = gpu_->empty({2, 64}), beta = gpu_->empty({2, 4});
  const Tensor fa = up(in.fa), ga = up(in.ga), logits = up(in.beta_logits), f_b = up(in.f_b), dt = up(in.dt_bias),
               al = up(in.a_log);
  const Tensor short_g_b = up(randn({64, 16}, 1).to_dtype(DType::kBF16));
  try {
    gpu_->kda_lowrank_gates(g, gate, beta, fa, ga, logits, f_b, short_g_b, dt, al, true, -5.0f);
    ADD_FAILURE() << "a g_b of another shape was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("g_b"), std::string::npos) << e.status().message();
  }
  const Tensor short_bias = up(randn({60}, 2));
  try {
    gpu_->kda_lowrank_gates(g, gate, beta, fa, ga, logits, f_b, up(in.g_b), short_bias, al, true, -5.0f);
    ADD_FAILURE() << "a dt_bias of another width was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("dt_bias"), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace tf
