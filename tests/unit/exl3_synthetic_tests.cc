// Synthetic EXL3 checkpoints: generate -> write -> validate/load -> decode on the
// CPU (finite, deterministic, the intended scale), and the checkpoint-level
// refusals of validate_exl3_checkpoint on the tiny-flat geometry (hidden 64,
// MoE intermediate 32: both padded to 128, as real EXL3 converters store them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "exl3_test_util.h"
#include "kernels/api/exl3_decode.h"
#include "kernels/cpu/exl3_linear.h"
#include "model/exl3_synthetic.h"
#include "model/exl3_weights.h"
#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"
#include "model/weight_source.h"

namespace tf {
namespace {

using test::Tensors;
using test::TempDir;

// tiny-flat's config (layers 1-3 MoE) with 4 routed experts and an EXL3 quantization_config.
Glm5Config tiny_exl3_config(const Exl3SyntheticOptions& o, int experts = 4) {
  std::ifstream in(std::string(TF_TEST_DATA_DIR) + "/model/tiny-flat/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["n_routed_experts"] = experts;
  j["num_experts_per_tok"] = std::min(experts, 2);
  j["quantization_config"] = synthetic_exl3_quantization_config(o);
  auto c = parse_glm5_config(j.dump(), "tiny-exl3/config.json");
  if (!c.has_value()) throw StatusError(c.status());
  return *c;
}

Tensors all_experts(const Glm5Config& c, const Exl3SyntheticOptions& o) {
  Tensors t;
  for (int layer = 0; layer < c.text.num_hidden_layers; ++layer) {
    if (c.text.mlp_layer_types[layer] != MlpKind::kSparse) continue;
    for (auto& x : synthetic_exl3_layer_experts(c.text, layer, 0, c.text.n_routed_experts, o)) t.push_back(std::move(x));
  }
  return t;
}

Status validate(const Tensors& t, const Glm5Config& c, std::vector<Status>* problems = nullptr) {
  TempDir dir;
  auto ckpt = test::write_and_open(dir, t);
  if (!ckpt) return internal_error("could not write the checkpoint");
  return validate_exl3_checkpoint(*ckpt, c, problems);
}

// Renames every tensor of one projection prefix (or drops them when `to` is empty).
Tensors rename_prefix(Tensors t, const std::string& from, const std::string& to) {
  Tensors out;
  for (auto& [name, tensor] : t) {
    if (name.rfind(from + ".", 0) == 0) {
      if (!to.empty()) out.emplace_back(to + name.substr(from.size()), tensor);
    } else {
      out.emplace_back(name, tensor);
    }
  }
  return out;
}

std::string prefix_of(int layer, int expert, const char* proj) {
  std::string p = expert_weight_name(layer, expert, proj);
  return p.substr(0, p.size() - 7);
}

TEST(Exl3Synthetic, SameSeedSameBytesOtherSaltOtherBytes) {
  Exl3SyntheticOptions o;
  o.seed = 5;
  const Exl3Weight a = make_synthetic_exl3_linear(256, 128, o, 1), b = make_synthetic_exl3_linear(256, 128, o, 1);
  EXPECT_TRUE(test::bytes_equal(a.trellis, b.trellis));
  EXPECT_TRUE(test::bytes_equal(a.suh, b.suh));
  EXPECT_TRUE(test::bytes_equal(a.svh, b.svh));
  const Exl3Weight c = make_synthetic_exl3_linear(256, 128, o, 2);
  EXPECT_FALSE(test::bytes_equal(a.trellis, c.trellis));
  EXPECT_FALSE(test::bytes_equal(a.suh, c.suh));
  o.seed = 6;
  EXPECT_FALSE(test::bytes_equal(a.trellis, make_synthetic_exl3_linear(256, 128, o, 1).trellis));
  // A subset of a layer's experts equals the same experts generated with the rest.
  const Glm5Config cfg = tiny_exl3_config(o);
  const Tensors all = synthetic_exl3_layer_experts(cfg.text, 2, 0, 4, o);
  const Tensors one = synthetic_exl3_layer_experts(cfg.text, 2, 3, 4, o);
  const size_t per_expert = one.size();
  ASSERT_EQ(all.size(), 4 * per_expert);
  for (size_t i = 0; i < per_expert; ++i) {
    EXPECT_EQ(all[3 * per_expert + i].first, one[i].first);
    EXPECT_TRUE(test::bytes_equal(all[3 * per_expert + i].second, one[i].second)) << one[i].first;
  }
}

// Every codebook and K: generated, written, validated, loaded, decoded and run.
TEST(Exl3Synthetic, RoundTripThroughACheckpoint) {
  for (Exl3Codebook cb : {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    for (int bits = 1; bits <= 8; ++bits) {
      Exl3SyntheticOptions o;
      o.codebook = cb;
      o.bits = bits;
      o.seed = 100 + bits;
      const Glm5Config cfg = tiny_exl3_config(o, 2);
      const Tensors tensors = all_experts(cfg, o);
      TempDir dir;
      auto ckpt = test::write_and_open(dir, tensors);
      ASSERT_NE(ckpt, nullptr);
      std::vector<Status> problems;
      Status s = validate_exl3_checkpoint(*ckpt, cfg, &problems);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_TRUE(problems.empty());
      auto e = load_exl3_expert(*ckpt, cfg.text, 3, 1, cb);
      ASSERT_TRUE(e.has_value()) << e.status().to_string();
      EXPECT_EQ(e->gate.in_features(), 128);   // hidden 64 padded
      EXPECT_EQ(e->down.out_features(), 128);
      EXPECT_EQ(e->gate.bits, bits);
      // The generator's weight equals what was loaded (same seed and salt).
      const uint64_t salt = (uint64_t{3} << 40) | (uint64_t{1} << 8) | 1;  // layer 3, expert 1, up_proj
      EXPECT_TRUE(test::bytes_equal(e->up.trellis, make_synthetic_exl3_linear(64, 32, o, salt).trellis));
      // Run gate on 3 tokens of the unpadded width: finite, same twice.
      Tensor x = Tensor::empty({3, 64}, DType::kF32);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
      Tensor y1 = Tensor::empty({3, 32}, DType::kF32), y2 = Tensor::empty({3, 32}, DType::kF32);
      cpu::exl3_matmul(y1, x, e->gate, "gate");
      cpu::exl3_matmul(y2, x, e->gate, "gate");
      EXPECT_TRUE(test::bytes_equal(y1, y2));
      for (float v : y1.to_vector()) ASSERT_TRUE(std::isfinite(v));
      // The dequantized weight has about the requested RMS.
      const Tensor w = exl3_dequantize(e->down, "down");
      double sum2 = 0;
      for (float v : w.to_vector()) sum2 += double(v) * v;
      const double rms = std::sqrt(sum2 / static_cast<double>(w.numel()));
      EXPECT_GT(rms, 0.6 * o.weight_rms) << exl3_codebook_name(cb) << " K=" << bits;
      EXPECT_LT(rms, 1.4 * o.weight_rms) << exl3_codebook_name(cb) << " K=" << bits;
    }
  }
}

// GLM-5.3-Flash's expert geometry (4096 <-> 2048, K=4 mcg): shapes and bytes as in the real checkpoint.
TEST(Exl3Synthetic, Glm53ExpertGeometry) {
  Exl3SyntheticOptions o;
  const Exl3Weight gate = make_synthetic_exl3_linear(4096, 2048, o), down = make_synthetic_exl3_linear(2048, 4096, o);
  EXPECT_EQ(gate.trellis.shape(), (Shape{256, 128, 64}));
  EXPECT_EQ(down.trellis.shape(), (Shape{128, 256, 64}));
  // glm53-checkpoint-facts.md §5.1: 256*128*64*2 + 4096*2 + 2048*2 + 4 bytes per projection.
  int64_t bytes = 0;
  for (const auto& [name, t] : exl3_linear_tensors("p", gate)) bytes += static_cast<int64_t>(t.nbytes());
  EXPECT_EQ(bytes, 256 * 128 * 64 * 2 + 4096 * 2 + 2048 * 2 + 4);
  EXPECT_TRUE(check_exl3_weight(gate, "gate").is_ok());
  EXPECT_TRUE(check_exl3_weight(down, "down").is_ok());
}

TEST(Exl3Checkpoint, FlatNamingIsAccepted) {
  Exl3SyntheticOptions o;
  const Glm5Config cfg = tiny_exl3_config(o, 2);
  Tensors t;
  for (auto& [name, tensor] : all_experts(cfg, o)) t.emplace_back("model." + name.substr(text_prefix().size()), tensor);
  TempDir dir;
  auto ckpt = test::write_and_open(dir, t);
  ASSERT_NE(ckpt, nullptr);
  Status s = validate_exl3_checkpoint(*ckpt, cfg);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(exl3_expert_prefix(*ckpt, 1, 0, "gate_proj"), "model.layers.1.mlp.experts.0.gate_proj");
  auto e = load_exl3_expert(*ckpt, cfg.text, 1, 0);
  EXPECT_TRUE(e.has_value()) << e.status().to_string();
}

TEST(Exl3Checkpoint, RefusesAMissingExpert) {
  Exl3SyntheticOptions o;
  const Glm5Config cfg = tiny_exl3_config(o);
  const std::string p = prefix_of(2, 3, "down_proj");
  std::vector<Status> problems;
  Status s = validate(rename_prefix(all_experts(cfg, o), p, ""), cfg, &problems);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(problems.size(), 1u);
  EXPECT_NE(s.message().find(p + ".trellis"), std::string::npos) << s.to_string();
}

TEST(Exl3Checkpoint, RefusesAnUnknownCodebookMarker) {
  Exl3SyntheticOptions o;
  const Glm5Config cfg = tiny_exl3_config(o);
  const std::string p = prefix_of(1, 0, "gate_proj");
  Tensors t = all_experts(cfg, o);
  Tensor marker = Tensor::zeros({}, DType::kI32);
  t.emplace_back(p + ".mul2", marker);
  Status s = validate(t, cfg);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(p + ".mul2"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("unknown"), std::string::npos) << s.to_string();
}

// Outside the routed experts, a linear of the model may be EXL3 (exllamav3 quantizes them
// all): checked like an expert. A trellis of no weight of the model is refused.
TEST(Exl3Checkpoint, OtherLinearsMayBeExl3ButStrayTrellisesAreRefused) {
  Exl3SyntheticOptions o;
  const Glm5Config cfg = tiny_exl3_config(o);
  Tensors t = all_experts(cfg, o);
  const std::string p = layer_prefix(0) + "self_attn.o_proj";
  for (auto& x : exl3_linear_tensors(p, make_synthetic_exl3_linear(64, 64, o))) t.push_back(x);
  for (auto& x : exl3_linear_tensors("lm_head", make_synthetic_exl3_linear(64, 384, o, 9))) t.push_back(x);
  Status ok = validate(t, cfg);
  EXPECT_TRUE(ok.is_ok()) << ok.to_string();
  // Mis-shaped for the model (o_proj is 64 -> 64: 128 x 128 padded, not 128 x 256).
  Tensors wrong = rename_prefix(t, p, "");
  for (auto& x : exl3_linear_tensors(p, make_synthetic_exl3_linear(64, 256, o))) wrong.push_back(x);
  Status s = validate(wrong, cfg);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(p + ".trellis"), std::string::npos) << s.to_string();
  // A linear the model does not have.
  const std::string stray = layer_prefix(0) + "self_attn.x_proj";
  for (auto& x : exl3_linear_tensors(stray, make_synthetic_exl3_linear(64, 64, o))) t.push_back(x);
  s = validate(t, cfg);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(stray + ".trellis"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(kExl3UnusedTrellis), std::string::npos) << s.to_string();
}

TEST(Exl3Checkpoint, ReportsEveryProblemAndTheConfigFirst) {
  Exl3SyntheticOptions o;
  Glm5Config cfg = tiny_exl3_config(o);
  Tensors t = all_experts(cfg, o);
  // Two broken projections: a mul1 expert in an mcg checkpoint, and a K=9 trellis.
  const std::string a = prefix_of(1, 1, "up_proj"), b = prefix_of(3, 2, "gate_proj");
  Exl3SyntheticOptions mul1 = o;
  mul1.codebook = Exl3Codebook::kMul1;
  t = rename_prefix(t, a, "");
  for (auto& x : exl3_linear_tensors(a, make_synthetic_exl3_linear(64, 32, mul1))) t.push_back(x);
  for (auto& [name, tensor] : t) {
    if (name == b + ".trellis") tensor = Tensor::zeros({8, 8, 144}, DType::kI16);
  }
  std::vector<Status> problems;
  Status s = validate(t, cfg, &problems);
  ASSERT_EQ(problems.size(), 2u) << s.to_string();
  EXPECT_NE(problems[0].message().find(a), std::string::npos) << problems[0].to_string();
  EXPECT_NE(problems[0].message().find("codebook mul1"), std::string::npos) << problems[0].to_string();
  EXPECT_NE(problems[1].message().find(b + ".trellis"), std::string::npos) << problems[1].to_string();
  // A config that is not servable is the one problem reported.
  cfg.quantization.raw["head_bits"] = 12;
  problems.clear();
  s = validate(t, cfg, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(s.message().find("quantization_config.head_bits"), std::string::npos) << s.to_string();
}

// exl3_matmul (rotate x, decode tiles, rotate back) and exl3_dequantize (the dense W)
// are two routes to the same function: they agree to f32 rounding on padded,
// non-square shapes, with bias, for every codebook; an empty batch is a no-op.
TEST(Exl3Synthetic, MatmulEqualsTheDequantizedWeight) {
  for (Exl3Codebook cb : {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    Exl3SyntheticOptions o;
    o.codebook = cb;
    o.bits = 3;
    o.bias = true;
    o.seed = 9;
    const int64_t in = 300, out = 200;  // stored as 384 x 256
    const Exl3Weight w = make_synthetic_exl3_linear(in, out, o);
    const Tensor dense = exl3_dequantize(w, "w");
    ASSERT_EQ(dense.shape(), (Shape{384, 256}));
    Tensor x = Tensor::empty({4, in}, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.11f * static_cast<float>(i * i % 97));
    Tensor y = Tensor::empty({4, out}, DType::kF32);
    cpu::exl3_matmul(y, x, w, "w");
    const std::vector<float> bias = w.bias.to_vector();
    double err = 0, scale = 0;
    for (int64_t t = 0; t < 4; ++t) {
      for (int64_t j = 0; j < out; ++j) {
        double s = bias[j];
        for (int64_t i = 0; i < in; ++i) s += double(x.data<float>()[t * in + i]) * dense.data<float>()[i * 256 + j];
        err = std::max(err, std::abs(s - y.data<float>()[t * out + j]));
        scale = std::max(scale, std::abs(s));
      }
    }
    EXPECT_LT(err / scale, 2e-6) << exl3_codebook_name(cb);
    Tensor none_in = Tensor::empty({0, in}, DType::kF32), none_out = Tensor::empty({0, out}, DType::kF32);
    EXPECT_NO_THROW(cpu::exl3_matmul(none_out, none_in, w, "w"));
  }
}

// The MTP layer's experts are part of the checkpoint too.
TEST(Exl3Checkpoint, MtpExpertsAreRequired) {
  Exl3SyntheticOptions o;
  std::ifstream in(std::string(TF_TEST_DATA_DIR) + "/model/tiny-flat/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["n_routed_experts"] = 2;
  j["num_experts_per_tok"] = 2;
  j["num_nextn_predict_layers"] = 1;
  j["quantization_config"] = synthetic_exl3_quantization_config(o);
  auto cfg = parse_glm5_config(j.dump(), "mtp/config.json");
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  Tensors t = all_experts(*cfg, o);
  std::vector<Status> problems;
  Status s = validate(t, *cfg, &problems);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(problems.size(), 6u);  // layer 4 (MTP): 2 experts x gate/up/down
  EXPECT_NE(s.message().find(prefix_of(4, 0, "gate_proj") + ".trellis"), std::string::npos) << s.to_string();
  for (auto& x : synthetic_exl3_layer_experts(cfg->text, 4, 0, 2, o)) t.push_back(std::move(x));
  s = validate(t, *cfg);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

// A whole synthetic EXL3 checkpoint: tiny-flat's other tensors in one shard, the
// experts written layer by layer, an index over all of them. It validates both as
// an EXL3 checkpoint and as a GLM-5.3-Flash checkpoint, with nothing unknown.
TEST(Exl3Synthetic, WritesACheckpointLayerByLayer) {
  Exl3SyntheticOptions o;
  o.seed = 77;
  const std::string tiny = std::string(TF_TEST_DATA_DIR) + "/model/tiny-flat";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(tiny + "/config.json"));
  j["quantization_config"] = synthetic_exl3_quantization_config(o);
  auto cfg = parse_glm5_config(j.dump(), "config.json");
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  TempDir dir;
  std::map<std::string, std::string> weight_map;
  Status s = write_synthetic_exl3_experts(dir.str(), cfg->text, o, &weight_map);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  // Layers 1-3 are MoE: three files, 12 experts x 3 projections x 4 tensors.
  for (int layer = 1; layer <= 3; ++layer) {
    EXPECT_TRUE(std::filesystem::exists(dir.str() + "/exl3-experts-00" + std::to_string(layer) + ".safetensors"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.str() + "/exl3-experts-000.safetensors"));
  EXPECT_EQ(weight_map.size(), 3u * 12 * 3 * 4);
  auto base = Checkpoint::open(tiny);
  ASSERT_TRUE(base.has_value()) << base.status().to_string();
  Tensors other;
  for (const std::string& n : (*base)->names()) {
    if (n.find(".mlp.experts.") != std::string::npos) continue;
    other.emplace_back(n, *(*base)->tensor(n));
    weight_map[n] = "base.safetensors";
  }
  ASSERT_TRUE(write_safetensors(dir.str() + "/base.safetensors", other).is_ok());
  std::ofstream(dir.str() + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
  std::ofstream(dir.str() + "/config.json") << j.dump();

  auto ckpt = Checkpoint::open(dir.str());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  s = validate_exl3_checkpoint(**ckpt, *cfg);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  auto ws = open_weight_source(dir.str(), *cfg);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  s = validate_checkpoint(**ws, *cfg);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ((*ws)->unknown_tensors(), std::vector<std::string>{});

  // With an MTP layer its experts get a file of their own (layer 4).
  Glm5TextConfig mtp = cfg->text;
  mtp.num_nextn_predict_layers = 1;
  TempDir dir2;
  std::map<std::string, std::string> map2;
  ASSERT_TRUE(write_synthetic_exl3_experts(dir2.str(), mtp, o, &map2).is_ok());
  EXPECT_TRUE(std::filesystem::exists(dir2.str() + "/exl3-experts-004.safetensors"));
  EXPECT_EQ(map2.size(), 4u * 12 * 3 * 4);
  // Same seed, same bytes: layer 2 equals the first writer's.
  auto a = SafetensorsFile::open(dir.str() + "/exl3-experts-002.safetensors");
  auto b = SafetensorsFile::open(dir2.str() + "/exl3-experts-002.safetensors");
  ASSERT_TRUE(a.has_value() && b.has_value());
  for (const TensorEntry& e : (*a)->entries()) {
    EXPECT_TRUE(test::bytes_equal(*(*a)->tensor(e.name), *(*b)->tensor(e.name))) << e.name;
  }
}

// Tensor-parallel slices (spec §5): output slices give exactly the full layer's
// columns; input slices' outputs sum to the full layer's; off-grid cuts are refused.
TEST(Exl3Synthetic, SlicesForTensorParallelism) {
  Exl3SyntheticOptions o;
  o.seed = 4;
  o.bias = true;
  const Exl3Weight w = make_synthetic_exl3_linear(256, 300, o);  // stored 256 x 384
  Tensor x = Tensor::empty({3, 256}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.7f * static_cast<float>(i));
  Tensor full = Tensor::empty({3, 384}, DType::kF32);
  cpu::exl3_matmul(full, x, w, "w");
  // Columns [128, 384) (the padded end).
  auto cols = exl3_output_slice(w, 128, 384, "w");
  ASSERT_TRUE(cols.has_value()) << cols.status().to_string();
  EXPECT_EQ(cols->trellis.shape(), (Shape{16, 16, 64}));
  Tensor part = Tensor::empty({3, 256}, DType::kF32);
  cpu::exl3_matmul(part, x, *cols, "cols");
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t j = 0; j < 256; ++j) ASSERT_EQ(part.data<float>()[t * 256 + j], full.data<float>()[t * 384 + 128 + j]);
  // Rows [0, 128) + [128, 256): partial outputs sum to the full output (bias once).
  auto top = exl3_input_slice(w, 0, 128, "w"), bottom = exl3_input_slice(w, 128, 256, "w");
  ASSERT_TRUE(top.has_value() && bottom.has_value());
  EXPECT_FALSE(top->bias.is_null());
  EXPECT_TRUE(bottom->bias.is_null());
  Tensor y0 = Tensor::empty({3, 384}, DType::kF32), y1 = Tensor::empty({3, 384}, DType::kF32);
  cpu::exl3_matmul(y0, x.slice(1, 0, 128).contiguous(), *top, "top");
  cpu::exl3_matmul(y1, x.slice(1, 128, 256).contiguous(), *bottom, "bottom");
  double err = 0, scale = 0;
  for (int64_t i = 0; i < full.numel(); ++i) {
    err = std::max(err, std::abs(double(y0.data<float>()[i]) + y1.data<float>()[i] - full.data<float>()[i]));
    scale = std::max(scale, std::abs(double(full.data<float>()[i])));
  }
  EXPECT_LT(err / scale, 2e-6);
  // Off the 128 grid, empty, or out of range.
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 64}, {64, 384}, {128, 128}, {0, 512}}) {
    auto bad = exl3_output_slice(w, b, e, "layers.1.experts.2.gate_proj");
    ASSERT_FALSE(bad.has_value()) << b << ", " << e;
    EXPECT_NE(bad.status().message().find("layers.1.experts.2.gate_proj"), std::string::npos);
  }
  EXPECT_FALSE(exl3_input_slice(w, 0, 200, "w").has_value());
}

}  // namespace
}  // namespace tf
