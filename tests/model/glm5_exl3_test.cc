// GLM-5.3-Flash on an EXL3 checkpoint (CPU backend): tiny-flat's weights with its
// routed experts replaced by synthetic EXL3 ones (K=4 mcg; hidden 64 and MoE
// intermediate 32 stored padded to 128, as exllamav3 stores them) run through
// Ops::exl3_matmul, and must give the logits and greedy tokens of the same model
// whose experts are those EXL3 weights dequantized to f32 (cpu::exl3_dequantize)
// and loaded as ordinary weights. Only f32 summation order differs between the two.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/communicator.h"
#include "glm5_fixture.h"
#include "kernels/cpu/exl3_linear.h"
#include "model/exl3_synthetic.h"
#include "model/exl3_weights.h"
#include "model/glm5_weight_spec.h"

namespace tf::test {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, Tensor>>;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The two checkpoints, written once per test binary under the temp dir.
struct Exl3Pair {
  Fixture exl3, dense, original;
  std::string root;
};

Tensor dense_weight(const Exl3Weight& w, int64_t in, int64_t out) {
  // [k_pad, n_pad] input-major -> [out, in] (Hugging Face orientation, padding dropped).
  const Tensor full = cpu::exl3_dequantize(w, "expert");
  return full.slice(0, 0, in).slice(1, 0, out).transpose(0, 1).contiguous();
}

const Exl3Pair& pair() {
  static Exl3Pair p = [] {
    Exl3Pair r;
    std::string tiny;
    for (const auto& d : fixture_dirs())
      if (fs::path(d).filename() == "tiny-flat") tiny = d;
    r.original = load_fixture(tiny);
    r.root = (fs::temp_directory_path() / ("tf_glm5_exl3_" + std::to_string(::getpid()))).string();
    fs::create_directories(r.root + "/exl3");
    fs::create_directories(r.root + "/dense");
    auto ckpt = Checkpoint::open(tiny);
    if (!ckpt.has_value()) throw StatusError(ckpt.status());
    Tensors base;
    for (const std::string& n : (*ckpt)->names()) {
      if (n.find(".mlp.experts.") != std::string::npos) continue;  // routed experts only
      auto t = (*ckpt)->tensor(n);
      if (!t.has_value()) throw StatusError(t.status());
      base.emplace_back(n, *t);
    }
    const Glm5TextConfig& text = r.original.config.text;
    Exl3SyntheticOptions o;
    o.seed = 21;
    o.weight_rms = 0.05f;  // large enough that the experts move the logits
    Tensors exl3 = base;
    for (int layer = 0; layer < text.num_hidden_layers; ++layer) {
      if (text.mlp_layer_types[layer] != MlpKind::kSparse) continue;
      for (auto& t : synthetic_exl3_layer_experts(text, layer, 0, text.n_routed_experts, o)) exl3.push_back(t);
    }
    Status s = write_safetensors(r.root + "/exl3/model.safetensors", exl3);
    if (!s.is_ok()) throw StatusError(s);
    nlohmann::json cfg = nlohmann::json::parse(read_text(tiny + "/config.json"));
    std::ofstream(r.root + "/dense/config.json") << cfg.dump(1);
    cfg["quantization_config"] = synthetic_exl3_quantization_config(o);
    std::ofstream(r.root + "/exl3/config.json") << cfg.dump(1);
    // The dense twin: the same experts, dequantized.
    auto q = Checkpoint::open(r.root + "/exl3");
    if (!q.has_value()) throw StatusError(q.status());
    Tensors dense = base;
    const int64_t h = text.hidden_size, i = text.moe_intermediate_size;
    for (int layer = 0; layer < text.num_hidden_layers; ++layer) {
      if (text.mlp_layer_types[layer] != MlpKind::kSparse) continue;
      for (int e = 0; e < text.n_routed_experts; ++e) {
        auto ex = load_exl3_expert(**q, text, layer, e, Exl3Codebook::kMcg);
        if (!ex.has_value()) throw StatusError(ex.status());
        const std::string p = "model.language_model.layers." + std::to_string(layer) + ".mlp.experts." +
                              std::to_string(e) + ".";
        dense.emplace_back(p + "gate_proj.weight", dense_weight(ex->gate, h, i));
        dense.emplace_back(p + "up_proj.weight", dense_weight(ex->up, h, i));
        dense.emplace_back(p + "down_proj.weight", dense_weight(ex->down, i, h));
      }
    }
    s = write_safetensors(r.root + "/dense/model.safetensors", dense);
    if (!s.is_ok()) throw StatusError(s);
    for (Fixture* f : {&r.exl3, &r.dense}) *f = r.original;
    r.exl3.dir = r.root + "/exl3";
    r.dense.dir = r.root + "/dense";
    auto c = load_glm5_config(r.exl3.dir);
    if (!c.has_value()) throw StatusError(c.status());
    r.exl3.config = *c;
    return r;
  }();
  return p;
}

class Cleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    fs::remove_all(fs::temp_directory_path() / ("tf_glm5_exl3_" + std::to_string(::getpid())));
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

TEST(Glm5Exl3, CheckpointValidates) {
  const Exl3Pair& p = pair();
  auto ws = open_weights(p.exl3);
  ASSERT_TRUE(ws);
  Status s = validate_checkpoint(*ws, p.exl3.config);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(ws->unknown_tensors(), std::vector<std::string>{});
  const std::string gate = "model.language_model.layers.1.mlp.experts.0.gate_proj.weight";
  EXPECT_TRUE(ws->has(gate));
  auto shape = ws->shape(gate);
  ASSERT_TRUE(shape.has_value()) << shape.status().to_string();
  EXPECT_EQ(*shape, (Shape{32, 64}));
  auto f = ws->get_f32(gate);
  ASSERT_FALSE(f.has_value());
  EXPECT_NE(f.status().message().find("EXL3"), std::string::npos) << f.status().to_string();
  auto q = ws->get_exl3(gate, 64, 32);
  ASSERT_TRUE(q.has_value()) << q.status().to_string();
  ASSERT_TRUE(q->has_value());
  EXPECT_EQ((*q)->trellis.shape(), (Shape{8, 8, 64}));
  EXPECT_TRUE((*q)->trellis.owns_memory());
  // Unquantized tensors are not EXL3.
  auto router = ws->get_exl3("model.language_model.layers.1.mlp.gate.weight", 64, 12);
  ASSERT_TRUE(router.has_value());
  EXPECT_FALSE(router->has_value());
  EXPECT_TRUE(ws->get_f32("model.language_model.layers.1.mlp.gate.weight").has_value());
}

TEST(Glm5Exl3, MatchesTheDequantizedModel) {
  const Exl3Pair& p = pair();
  auto c1 = make_single_rank_communicator(), c2 = make_single_rank_communicator();
  auto a = run_greedy(p.exl3, *c1, 6);
  ASSERT_TRUE(a.has_value()) << a.status().to_string();
  auto b = run_greedy(p.dense, *c2, 6);
  ASSERT_TRUE(b.has_value()) << b.status().to_string();
  const double prefill = rel_err(a->prefill, b->prefill);
  std::printf("EXL3 vs dequantized: prefill max|d|/max|ref| = %.3g\n", prefill);
  EXPECT_LT(prefill, 1e-5);
  ASSERT_EQ(a->decode.size(), b->decode.size());
  for (size_t i = 0; i < a->decode.size(); ++i) EXPECT_LT(rel_err(a->decode[i], b->decode[i]), 1e-5) << "step " << i;
  EXPECT_EQ(a->tokens, b->tokens);
  // The experts were really replaced: the original fixture's logits are far away.
  EXPECT_GT(rel_err(a->prefill, p.original.prompt_logits), 1e-3);
}

// MoE intermediate 32 split over 2 ranks gives 16-channel shards: refused.
TEST(Glm5Exl3, TensorParallelOffThe128GridIsRefused) {
  const Exl3Pair& p = pair();
  run_ranks(2, [&](int, Communicator& comm) {
    auto ws = open_weight_source(p.exl3.dir, p.exl3.config);
    ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
    auto m = Glm5Model::load(p.exl3.config, **ws, cpu_ops(), comm);
    ASSERT_FALSE(m.has_value());
    EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(m.status().message().find("not on 128-channel boundaries"), std::string::npos)
        << m.status().to_string();
    EXPECT_NE(m.status().message().find("2 tensor-parallel ranks"), std::string::npos) << m.status().to_string();
  });
}

TEST(Glm5Exl3, UnservableQuantizationConfigIsRefusedAtOpen) {
  const Exl3Pair& p = pair();
  Glm5Config cfg = p.exl3.config;
  cfg.quantization.raw["scope"] = "all_linears";
  auto ws = open_weight_source(p.exl3.dir, cfg);
  ASSERT_FALSE(ws.has_value());
  EXPECT_NE(ws.status().message().find("quantization_config.scope"), std::string::npos) << ws.status().to_string();
}

// Copies the EXL3 checkpoint with one tensor replaced (a null tensor removes it) or added.
std::string edited_copy(const Exl3Pair& p, const std::string& name, const Tensor& value, const std::string& tag) {
  const std::string dir = p.root + "/" + tag;
  fs::create_directories(dir);
  auto ckpt = Checkpoint::open(p.exl3.dir);
  if (!ckpt.has_value()) throw StatusError(ckpt.status());
  Tensors t;
  bool replaced = false;
  for (const std::string& n : (*ckpt)->names()) {
    if (n == name) {
      replaced = true;
      if (!value.is_null()) t.emplace_back(n, value);
      continue;
    }
    t.emplace_back(n, *(*ckpt)->tensor(n));
  }
  if (!replaced) t.emplace_back(name, value);
  Status s = write_safetensors(dir + "/model.safetensors", t);
  if (!s.is_ok()) throw StatusError(s);
  fs::copy_file(p.exl3.dir + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  return dir;
}

// The checks through the serving path (open_weight_source + Glm5Model::load):
// a truncated or mis-shaped trellis, an unknown codebook marker and EXL3 outside the
// routed experts each fail with a message naming the tensor.
TEST(Glm5Exl3, BrokenCheckpointsAreRefusedNamingTheTensor) {
  const Exl3Pair& p = pair();
  const std::string e = "model.language_model.layers.2.mlp.experts.5.";
  struct Case {
    std::string tag, name;
    Tensor value;
    std::string needle;
  };
  Tensor marker = Tensor::zeros({}, DType::kI32);
  const std::vector<Case> cases = {
      {"truncated", e + "up_proj.trellis", Tensor::zeros({8, 8, 63}, DType::kI16), "truncated tile bitstreams"},
      {"misshaped", e + "down_proj.trellis", Tensor::zeros({8, 16, 64}, DType::kI16), "needs [8, 8, 64]"},
      {"k9", e + "gate_proj.trellis", Tensor::zeros({8, 8, 144}, DType::kI16), "1 to 8"},
      {"no_svh", e + "gate_proj.svh", Tensor(), "has no"},
      {"marker", e + "gate_proj.mul2", marker, "unknown companion"},
      {"stray", "model.language_model.layers.0.self_attn.o_proj.trellis", Tensor::zeros({8, 8, 64}, DType::kI16),
       "outside the routed experts"},
  };
  for (const Case& c : cases) {
    const std::string dir = edited_copy(p, c.name, c.value, c.tag);
    auto comm = make_single_rank_communicator();
    Status s;
    auto ws = open_weight_source(dir, p.exl3.config);
    if (!ws.has_value()) {
      s = ws.status();
    } else {
      auto m = Glm5Model::load(p.exl3.config, **ws, cpu_ops(), *comm);
      ASSERT_FALSE(m.has_value()) << c.tag << ": loaded";
      s = m.status();
    }
    EXPECT_NE(s.message().find(c.name), std::string::npos) << c.tag << ": " << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.tag << ": " << s.to_string();
  }
}

// tiny-flat with MoE intermediate 256 (shared expert regenerated at that width, routed
// experts EXL3): two ranks hold 128 channels of every expert each.
Fixture wide_fixture() {
  const Exl3Pair& p = pair();
  const std::string dir = p.root + "/wide";
  Fixture f = p.exl3;
  f.dir = dir;
  if (fs::exists(dir + "/config.json")) {
    f.config = *load_glm5_config(dir);
    return f;
  }
  fs::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(read_text(p.exl3.dir + "/config.json"));
  cfg["moe_intermediate_size"] = 256;
  auto c = parse_glm5_config(cfg.dump(), dir + "/config.json");
  if (!c.has_value()) throw StatusError(c.status());
  const Glm5TextConfig& text = c->text;
  auto base = Checkpoint::open(p.original.dir);
  if (!base.has_value()) throw StatusError(base.status());
  Tensors t;
  uint32_t lcg = 12345;
  auto random = [&](Shape shape) {
    Tensor r = Tensor::empty(std::move(shape), DType::kF32);
    for (int64_t i = 0; i < r.numel(); ++i) {
      lcg = lcg * 1664525u + 1013904223u;
      r.data<float>()[i] = (static_cast<float>(lcg >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    return r;
  };
  for (const std::string& n : (*base)->names()) {
    if (n.find(".mlp.experts.") != std::string::npos) continue;
    if (n.find(".mlp.shared_experts.") != std::string::npos) {
      const bool down = n.find("down_proj") != std::string::npos;
      t.emplace_back(n, random(down ? Shape{text.hidden_size, 256} : Shape{256, text.hidden_size}));
      continue;
    }
    t.emplace_back(n, *(*base)->tensor(n));
  }
  Exl3SyntheticOptions o;
  o.seed = 33;
  o.weight_rms = 0.05f;
  for (int layer = 0; layer < text.num_hidden_layers; ++layer) {
    if (text.mlp_layer_types[layer] != MlpKind::kSparse) continue;
    for (auto& x : synthetic_exl3_layer_experts(text, layer, 0, text.n_routed_experts, o)) t.push_back(x);
  }
  Status s = write_safetensors(dir + "/model.safetensors", t);
  if (!s.is_ok()) throw StatusError(s);
  std::ofstream(dir + "/config.json") << cfg.dump(1);
  f.config = *c;
  return f;
}

TEST(Glm5Exl3, TensorParallelMatchesOneRank) {
  const Fixture f = wide_fixture();
  auto c1 = make_single_rank_communicator();
  auto one = run_greedy(f, *c1, 6);
  ASSERT_TRUE(one.has_value()) << one.status().to_string();
  run_ranks(2, [&](int rank, Communicator& comm) {
    auto r = run_greedy(f, comm, 6);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    const double err = rel_err(r->prefill, one->prefill);
    EXPECT_LT(err, 1e-5) << "rank " << rank;
    if (rank == 0) std::printf("EXL3 TP=2 vs TP=1: prefill max|d|/max|ref| = %.3g\n", err);
    EXPECT_EQ(r->tokens, one->tokens) << "rank " << rank;
  });
}

}  // namespace
}  // namespace tf::test
