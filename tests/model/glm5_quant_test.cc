// DENSE=q4 / fp8 on the fixtures (issue #8): the model with its large dense matrices
// re-quantized at load (Glm5Options::dense_quant) against transformers' fp32 reference
// logits (which the unquantized CPU model matches to ~1e-6), over the 150 prompt
// positions of one prefill and the 12 greedy decode steps: mean KL(ref || quant) per
// position and top-1 agreement, printed as "[quant] ..." lines.
//
// Thresholds: the worst fixture measured, KL x ~2, top-1 minus ~0.07 (the numbers are
// printed). Measured mean KL: fp8 1.9e-4 .. 3.3e-3 nats (tiny-fp8, whose KDA matrices
// are BF16 in the checkpoint), q4 8.8e-4 .. 1.05e-2; top-1: fp8 0.67 .. 0.88, q4
// 0.43 .. 0.71. Top-1 is low because these random-weight fixtures have nearly flat
// logits (the best two tokens are often within the quantization noise); KL is the
// measure to watch. Limits: fp8 mean KL <= 6e-3, top-1 >= 0.60; q4 mean KL <= 2e-2, top-1 >= 0.35.
// Also: the quantized matrices really are quantized (a q4 load holds q4 KDA / MLA /
// MLP matrices, the routed experts stay dense), and the tiny-fp8 fixture (the official
// FP8 layout) re-quantized to fp8 keeps the checkpoint's own values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "glm5_fixture.h"
#include "model/logit_agreement.h"

namespace tf::test {
namespace {

Glm5Options quant_options(MatrixFormat f) {
  Glm5Options c;
  c.latent_dtype = DType::kF32;
  c.page_size = 16;
  c.num_pages = 256;
  c.indexer_ties = TopkTies::kTorchCpu;
  c.dense_quant = f;
  return c;
}

// Logits of every prompt position (one prefill), then of each greedy decode step.
Tensor run_logits(Glm5Model& model, const Fixture& f) {
  auto seq = model.new_sequence();
  StepEntry e{seq.get(), f.prompt_ids, true};
  auto res = model.step({&e, 1});
  EXPECT_TRUE(res.has_value()) << res.status().to_string();
  if (!res.has_value()) return Tensor();
  std::vector<float> all = (*res)[0].logits.to_vector();
  const int64_t vocab = (*res)[0].logits.size(1);
  for (int32_t id : f.greedy_ids) {
    const std::vector<int32_t> one = {id};
    StepEntry d{seq.get(), one, false};
    auto r = model.step({&d, 1});
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return Tensor();
    const std::vector<float> row = (*r)[0].logits.to_vector();
    all.insert(all.end(), row.begin(), row.end());
  }
  return Tensor::from_floats({static_cast<int64_t>(all.size()) / vocab, vocab}, all);
}

Tensor reference_logits(const Fixture& f) {
  std::vector<float> all = f.prompt_logits.to_vector();
  const std::vector<float> steps = f.greedy_step_logits.to_vector();
  all.insert(all.end(), steps.begin(), steps.end());
  return Tensor::from_floats({static_cast<int64_t>(all.size()) / f.prompt_logits.size(1), f.prompt_logits.size(1)},
                             all);
}

struct Threshold {
  MatrixFormat format;
  double max_mean_kl, min_top1;
};

TEST(Glm5Quant, KlAndTop1AgainstTheReference) {
  const Threshold limits[] = {{MatrixFormat::kFp8Block, 6e-3, 0.60}, {MatrixFormat::kQ4, 2e-2, 0.35}};
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    const Tensor ref = reference_logits(f);
    for (const Threshold& t : limits) {
      auto comm = make_single_rank_communicator();
      auto model = load_model(f, *comm, quant_options(t.format));
      ASSERT_TRUE(model) << f.name;
      const Tensor got = run_logits(*model, f);
      ASSERT_FALSE(got.is_null());
      auto a = compare_logits(ref, got);
      ASSERT_TRUE(a.has_value()) << a.status().to_string();
      std::printf("[quant] %-12s %-3s %lld positions: mean KL %.3g nats (max %.3g), top-1 agreement %.3f\n",
                  f.name.c_str(), matrix_format_name(t.format), static_cast<long long>(a->rows), a->mean_kl,
                  a->max_kl, a->top1);
      EXPECT_LE(a->mean_kl, t.max_mean_kl) << f.name << " " << matrix_format_name(t.format);
      EXPECT_GE(a->top1, t.min_top1) << f.name << " " << matrix_format_name(t.format);
    }
  }
}

TEST(Glm5Quant, LoadHoldsQuantizedMatrices) {
  Fixture f = load_fixture(fixture_dirs().front());
  auto ws = open_weights(f);
  ASSERT_TRUE(ws);
  auto w = load_glm5_weights(*ws, f.config.text, 0, 1, DType::kF32, MatrixFormat::kQ4);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  int quantized = 0;
  for (const LayerWeights& l : w->layers) {
    if (l.attention == AttentionKind::kLinear) {
      EXPECT_EQ(l.kda.q_proj.format(), MatrixFormat::kQ4);
      EXPECT_EQ(l.kda.o_proj.format(), MatrixFormat::kQ4);
      EXPECT_TRUE(l.kda.f_a.dtype() == DType::kF32);  // the low-rank gates stay dense
    } else {
      EXPECT_EQ(l.mla.q_b.format(), MatrixFormat::kQ4);
      EXPECT_EQ(l.mla.o_proj.format(), MatrixFormat::kQ4);
    }
    if (l.mlp == MlpKind::kDense) {
      EXPECT_EQ(l.dense.gate_up.format(), MatrixFormat::kQ4);
    } else {
      EXPECT_EQ(l.moe.shared.down.format(), MatrixFormat::kQ4);
      EXPECT_FALSE(l.moe.experts_gate_up.is_null());  // routed experts: stacked dense
    }
    ++quantized;
  }
  EXPECT_GT(quantized, 0);
  EXPECT_TRUE(w->lm_head.dtype() == DType::kF32);
}

// tiny-fp8 stores MLA, MLP and expert matrices in the official FP8 layout: DENSE=fp8
// re-quantizes what the loader dequantized and must land on the checkpoint's own
// values (codes equal, scales within an ulp), so the release is served as it is.
TEST(Glm5Quant, Fp8CheckpointServedWithItsOwnValues) {
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    if (f.name != "tiny-fp8") continue;
    auto ws = open_weights(f);
    ASSERT_TRUE(ws);
    auto exact = load_glm5_weights(*ws, f.config.text, 0, 1, DType::kF32);
    auto fp8 = load_glm5_weights(*ws, f.config.text, 0, 1, DType::kF32, MatrixFormat::kFp8Block);
    ASSERT_TRUE(exact.has_value() && fp8.has_value());
    int checked = 0;
    for (size_t i = 0; i < exact->layers.size(); ++i) {
      const LayerWeights &a = exact->layers[i], &b = fp8->layers[i];
      if (a.attention == AttentionKind::kLinear) continue;
      for (auto [m, d] : {std::pair{&b.mla.q_a, &a.mla.q_a}, {&b.mla.q_b, &a.mla.q_b}, {&b.mla.o_proj, &a.mla.o_proj}}) {
        ASSERT_EQ(m->format(), MatrixFormat::kFp8Block);
        const Tensor got = dequantize_matrix(*m);
        const Tensor& want = d->dense();
        ASSERT_EQ(got.shape(), want.shape());
        double worst = 0;
        for (int64_t j = 0; j < got.numel(); ++j) {
          const double w = want.data<float>()[j], g = got.data<float>()[j];
          worst = std::max(worst, std::fabs(g - w) / std::max(std::fabs(w), 1e-30));
        }
        EXPECT_LE(worst, 2.5e-7) << "layer " << i << " " << m->describe();
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
    return;
  }
  GTEST_FAIL() << "no tiny-fp8 fixture";
}

}  // namespace
}  // namespace tf::test
