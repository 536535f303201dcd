// `tensorfold synth-checkpoint --fp8-experts`: a tiny synthetic checkpoint whose routed experts
// are stored as the official FP8 release stores them (F8_E4M3 codes + F32 weight_scale_inv per
// 128x128 block, quant_method fp8): files and index agree, the codes dequantize to the BF16
// draw rounded to e4m3, the loader keeps them as an Fp8ExpertStack, and the model decodes
// finite, varied tokens on the CPU backend. --exl3 with it is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "comm/communicator.h"
#include "engine/load_progress.h"
#include "engine/synthetic_checkpoint.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/glm5/glm5_weights.h"
#include "model/safetensors.h"
#include "model/weight_source.h"
#include "synthetic_decode_testing.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path write_tiny_fp8(int64_t moe_intermediate = 0) {
  static int counter = 0;
  const fs::path dir =
      fs::temp_directory_path() / ("tf_synth_fp8_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  SyntheticCheckpointOptions o;
  o.geometry = *synthetic_geometry_preset("tiny");
  if (moe_intermediate > 0) o.geometry.moe_intermediate_size = moe_intermediate;
  o.shard_bytes = 1 << 20;
  o.fp8_experts = true;
  auto s = write_synthetic_checkpoint(dir, o);
  EXPECT_TRUE(s.has_value()) << s.status().to_string();
  if (s.has_value()) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    EXPECT_EQ(names, std::set<std::string>(s->files.begin(), s->files.end()));
  }
  return dir;
}

TEST(SyntheticFp8, ExpertsAreTheReleaseLayout) {
  const fs::path dir = write_tiny_fp8();
  std::ifstream in(dir / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const json q = json::parse(ss.str()).at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "fp8");
  EXPECT_EQ(q.at("weight_block_size"), json::array({128, 128}));
  auto ckpt = Checkpoint::open(dir.string());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  int fp8 = 0;
  for (const std::string& n : (*ckpt)->names()) {
    const TensorEntry* e = (*ckpt)->find(n);
    const bool routed = n.find(".mlp.experts.") != std::string::npos;
    if (routed && n.ends_with(".weight")) {
      EXPECT_EQ(e->dtype, DType::kF8E4M3) << n;
      const TensorEntry* sc = (*ckpt)->find(n + "_scale_inv");
      ASSERT_NE(sc, nullptr) << n;
      EXPECT_EQ(sc->dtype, DType::kF32);
      EXPECT_EQ(sc->shape, (Shape{(e->shape[0] + 127) / 128, (e->shape[1] + 127) / 128})) << n;
      ++fp8;
    } else if (!n.ends_with("_scale_inv")) {
      EXPECT_NE(e->dtype, DType::kF8E4M3) << n;
    }
  }
  Expected<Glm5Config> c = load_glm5_config(dir.string());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_GT(fp8, 0);
  EXPECT_EQ(fp8 % (3 * c->text.n_routed_experts), 0);
  // The dequantized codes are the BF16 checkpoint's draw, rounded to e4m3 (relative error
  // at most 2^-4 for normal values; a few near-zero ones round to subnormals).
  SyntheticCheckpointOptions o;
  o.geometry = *synthetic_geometry_preset("tiny");
  auto bf16_tensors = synthetic_tensors(o.geometry, o.seed);
  ASSERT_TRUE(bf16_tensors.has_value());
  auto ws = open_weight_source(dir.string(), *c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  int compared = 0;
  for (const GeneratedTensor& t : *bf16_tensors) {
    if (t.name.find(".mlp.experts.3.down_proj.weight") == std::string::npos) continue;
    Tensor want = Tensor::empty(t.shape, t.recipe.dtype);
    fill_demo_elements(t.recipe, 0, want.numel(), want.raw());
    const std::vector<float> w = want.to_f32().to_vector();
    auto got = (*ws)->get_f32(t.name, t.shape);
    ASSERT_TRUE(got.has_value()) << got.status().to_string();
    const std::vector<float> g = got->to_vector();
    double worst = 0, mx = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      mx = std::max(mx, static_cast<double>(std::fabs(w[i])));
      worst = std::max(worst, static_cast<double>(std::fabs(g[i] - w[i])));
    }
    EXPECT_LE(worst, mx / 16) << t.name;
    EXPECT_GT(mx, 0.0);
    ++compared;
  }
  EXPECT_GT(compared, 0);
  fs::remove_all(dir);
}

TEST(SyntheticFp8, LoadsAsAnFp8StackAndDecodesOnTheCpu) {
  const fs::path dir = write_tiny_fp8();
  Expected<Glm5Config> c = load_glm5_config(dir.string());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  auto ws = open_weight_source(dir.string(), *c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  // Through the engine's progress wrapper too (it must hand the FP8 bytes through).
  const engine::ProgressWeightSource progress(**ws, 1 << 20);
  for (const WeightSource* src : {static_cast<const WeightSource*>(ws->get()),
                                  static_cast<const WeightSource*>(&progress)}) {
    auto w = load_glm5_weights(*src, c->text, 0, 1, DType::kF32);
    ASSERT_TRUE(w.has_value()) << w.status().to_string();
    int stacks = 0;
    for (const LayerWeights& l : w->layers) stacks += l.moe.fp8_experts.num_experts() > 0;
    EXPECT_GT(stacks, 0);
  }
  EXPECT_GT(progress.loaded_bytes(), 0);
  const std::vector<int32_t> out = cpu_greedy_tokens(dir.string(), 12);
  EXPECT_EQ(out.size(), 12u);
  EXPECT_GE(std::set<int32_t>(out.begin(), out.end()).size(), 3u);
  fs::remove_all(dir);
}

// Two tensor-parallel ranks of I = 256 (a 128-block each): each rank's stack is its
// slice of the one-rank stack, codes and scales (gate/up rows, down columns).
TEST(SyntheticFp8, TensorParallelSlicesAreTheWholeStacksBlocks) {
  const fs::path dir = write_tiny_fp8(256);
  Expected<Glm5Config> c = load_glm5_config(dir.string());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  auto ws = open_weight_source(dir.string(), *c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto whole = load_glm5_weights(**ws, c->text, 0, 1, DType::kF32);
  ASSERT_TRUE(whole.has_value()) << whole.status().to_string();
  int checked = 0;
  for (int rank = 0; rank < 2; ++rank) {
    auto part = load_glm5_weights(**ws, c->text, rank, 2, DType::kF32);
    ASSERT_TRUE(part.has_value()) << part.status().to_string();
    for (size_t l = 0; l < whole->layers.size(); ++l) {
      const Fp8ExpertStack &a = whole->layers[l].moe.fp8_experts, &b = part->layers[l].moe.fp8_experts;
      if (a.num_experts() == 0) continue;
      ASSERT_EQ(b.num_experts(), a.num_experts()) << "layer " << l << " rank " << rank;
      ASSERT_EQ(b.intermediate(), 128);
      const Tensor want_g = a.gate.slice(1, 128 * rank, 128 * rank + 128).contiguous();
      const Tensor want_gs = a.gate_scales.slice(1, rank, rank + 1).contiguous();
      const Tensor want_d = a.down.slice(2, 128 * rank, 128 * rank + 128).contiguous();
      const Tensor want_ds = a.down_scales.slice(2, rank, rank + 1).contiguous();
      EXPECT_EQ(0, std::memcmp(want_g.raw(), b.gate.raw(), want_g.nbytes())) << "layer " << l;
      EXPECT_EQ(0, std::memcmp(want_gs.raw(), b.gate_scales.raw(), want_gs.nbytes())) << "layer " << l;
      EXPECT_EQ(0, std::memcmp(want_d.raw(), b.down.raw(), want_d.nbytes())) << "layer " << l;
      EXPECT_EQ(0, std::memcmp(want_ds.raw(), b.down_scales.raw(), want_ds.nbytes())) << "layer " << l;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  fs::remove_all(dir);
}

TEST(SyntheticFp8, RefusedWithExl3) {
  SyntheticCheckpointOptions o;
  o.geometry = *synthetic_geometry_preset("tiny");
  o.fp8_experts = true;
  o.exl3 = Exl3SyntheticOptions{};
  const fs::path dir = fs::temp_directory_path() / ("tf_synth_fp8_bad_" + std::to_string(::getpid()));
  auto s = write_synthetic_checkpoint(dir, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().to_string().find("--fp8-experts"), std::string::npos) << s.status().to_string();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tf
