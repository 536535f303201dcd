// The loader stacks the routed experts of every MoE layer for Ops::moe_experts:
// experts_gate_up [E, 2*I_local, H] (this rank's gate rows, then its up rows) and
// experts_down [E, H, I_local], equal to the checkpoint's per-expert tensors, in f32
// and in bf16, at one rank and at each of two ranks.
#include <gtest/gtest.h>

#include <string>

#include "glm5_fixture.h"
#include "model/glm5/glm5_weights.h"

namespace tf::test {
namespace {

// Expects `got` (f32 or bf16) to hold `want` (f32) converted to got's dtype.
void expect_holds(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Tensor expected = want.to_dtype(got.dtype()).to_f32();
  EXPECT_EQ(got.to_f32().to_vector(), expected.to_vector()) << what;
}

TEST(Glm5MoeWeights, RoutedExpertsAreStackedPerExpert) {
  const std::vector<std::string> dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  const Fixture f = load_fixture(dirs.front());
  const auto src = open_weights(f);
  const Glm5TextConfig& cfg = f.config.text;
  const int64_t e = cfg.n_routed_experts, h = cfg.hidden_size, inter = cfg.moe_intermediate_size;
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int world : {1, 2})
      for (int rank = 0; rank < world; ++rank) {
        auto w = load_glm5_weights(*src, cfg, rank, world, dt);
        ASSERT_TRUE(w.has_value()) << w.status().to_string();
        const ShardRange s = shard_range(inter, rank, world);
        int moe_layers = 0;
        for (size_t i = 0; i < w->layers.size(); ++i) {
          if (w->layers[i].mlp != MlpKind::kSparse) continue;
          ++moe_layers;
          const MoeWeights& m = w->layers[i].moe;
          ASSERT_FALSE(m.experts_gate_up.is_null()) << "layer " << i;
          EXPECT_TRUE(m.experts.empty()) << "layer " << i;
          EXPECT_EQ(m.experts_gate_up.dtype(), dt);
          ASSERT_EQ(m.experts_gate_up.shape(), (Shape{e, 2 * s.size(), h}));
          ASSERT_EQ(m.experts_down.shape(), (Shape{e, h, s.size()}));
          for (int64_t ex : {int64_t{0}, e / 2, e - 1}) {
            const std::string p = "model.language_model.layers." + std::to_string(i) + ".mlp.experts." +
                                  std::to_string(ex) + ".";
            const std::string tag = p + " rank " + std::to_string(rank) + "/" + std::to_string(world);
            auto g = src->get_f32(p + "gate_proj.weight", {inter, h});
            auto u = src->get_f32(p + "up_proj.weight", {inter, h});
            auto d = src->get_f32(p + "down_proj.weight", {h, inter});
            ASSERT_TRUE(g && u && d) << tag;
            const Tensor stack = m.experts_gate_up.select(0, ex);
            expect_holds(stack.slice(0, 0, s.size()).contiguous(), g->slice(0, s.begin, s.end).contiguous(),
                         tag + "gate rows");
            expect_holds(stack.slice(0, s.size(), 2 * s.size()).contiguous(),
                         u->slice(0, s.begin, s.end).contiguous(), tag + "up rows");
            expect_holds(m.experts_down.select(0, ex).contiguous(), d->slice(1, s.begin, s.end).contiguous(),
                         tag + "down columns");
          }
        }
        EXPECT_GT(moe_layers, 0);
      }
}

}  // namespace
}  // namespace tf::test
