// GLM-5.3-Flash on an EXL3 checkpoint (CPU backend): tiny-flat's weights with its
// routed experts replaced by synthetic EXL3 ones (K=4 mcg; hidden 64 and MoE
// intermediate 32 stored padded to 128, as exllamav3 stores them) run through
// Ops::exl3_matmul, and must give the logits and greedy tokens of the same model
// whose experts are those EXL3 weights dequantized to f32 (exl3_dequantize)
// and loaded as ordinary weights. Only f32 summation order differs between the two.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "comm/communicator.h"
#include "glm5_fixture.h"
#include "kernels/api/exl3_decode.h"
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

// `base` (its prompt and references) for the checkpoint written to `dir`, with that config.
Fixture fixture_at(const Fixture& base, const std::string& dir) {
  Fixture f = base;
  f.dir = dir;
  auto c = load_glm5_config(dir);
  if (!c.has_value()) throw StatusError(c.status());
  f.config = *c;
  return f;
}

// The two checkpoints, written once per test binary under the temp dir.
struct Exl3Pair {
  Fixture exl3, dense, original;
  std::string root;
};

Tensor dense_weight(const Exl3Weight& w, int64_t in, int64_t out) {
  return exl3_dequantize_linear(w, in, out, "expert");  // [out, in], padding dropped
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
    r.exl3 = fixture_at(r.original, r.root + "/exl3");
    r.dense = fixture_at(r.original, r.root + "/dense");
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
  // As f32 it is the dequantized weight (the loader reads the experts with get_exl3).
  auto f = ws->get_f32(gate);
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  auto twin = Checkpoint::open(p.dense.dir);
  ASSERT_TRUE(twin.has_value());
  const Tensor want = *(*twin)->tensor(gate);
  ASSERT_EQ(f->shape(), want.shape());
  EXPECT_EQ(std::memcmp(f->raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0);
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

// Greedy runs (6 decode steps) of two checkpoints that must be the same model up to f32
// summation order: the prefill and every step's logits within 1e-5, the same tokens.
// Returns the first one's run.
TpRun expect_same_model(const Fixture& x, const Fixture& y, const char* what) {
  auto c1 = make_single_rank_communicator(), c2 = make_single_rank_communicator();
  auto a = run_greedy(x, *c1, 6);
  auto b = run_greedy(y, *c2, 6);
  if (!a.has_value() || !b.has_value()) {
    ADD_FAILURE() << what << ": " << (a.has_value() ? b.status() : a.status()).to_string();
    return TpRun();
  }
  const double prefill = rel_err(a->prefill, b->prefill);
  std::printf("%s: prefill max|d|/max|ref| = %.3g\n", what, prefill);
  EXPECT_LT(prefill, 1e-5) << what;
  EXPECT_EQ(a->decode.size(), b->decode.size()) << what;
  for (size_t i = 0; i < std::min(a->decode.size(), b->decode.size()); ++i)
    EXPECT_LT(rel_err(a->decode[i], b->decode[i]), 1e-5) << what << " step " << i;
  EXPECT_EQ(a->tokens, b->tokens) << what;
  return std::move(*a);
}

TEST(Glm5Exl3, MatchesTheDequantizedModel) {
  const Exl3Pair& p = pair();
  const TpRun a = expect_same_model(p.exl3, p.dense, "EXL3 vs dequantized");
  ASSERT_FALSE(a.prefill.is_null());
  // The experts were really replaced: the original fixture's logits are far away.
  EXPECT_GT(rel_err(a.prefill, p.original.prompt_logits), 1e-3);
}

// exllamav3's quantization_config: no scope, the default head_bits (6).
nlohmann::json exllama_quantization_config() {
  return {{"quant_method", "exl3"}, {"version", "0.0.43"}, {"bits", 4.6}, {"codebook", "mcg"}, {"out_scales", "auto"}};
}

// An exllamav3-style conversion of checkpoint folder `src` (synthetic_exl3_conversion, K 4
// and 6 alternating, as exllamav3's strategies vary it); `dequantized` receives the dense
// values of the linears it converted.
Tensors exllama_conversion(const std::string& src, Tensors* dequantized) {
  auto ckpt = Checkpoint::open(src);
  if (!ckpt.has_value()) throw StatusError(ckpt.status());
  Exl3SyntheticOptions o;
  o.seed = 5;
  auto t = synthetic_exl3_conversion(**ckpt, o, {4, 6}, dequantized);
  if (!t.has_value()) throw StatusError(t.status());
  return std::move(*t);
}

// Writes `tensors` and `config` as checkpoint folder `dir`.
void write_checkpoint(const std::string& dir, const Tensors& tensors, const nlohmann::json& config) {
  fs::create_directories(dir);
  Status s = write_safetensors(dir + "/model.safetensors", tensors);
  if (!s.is_ok()) throw StatusError(s);
  std::ofstream(dir + "/config.json") << config.dump(1);
}

// An exllamav3-style conversion of pair()'s EXL3 checkpoint (routed experts EXL3 already)
// and its dense twin: pair()'s dense twin with the converted linears dequantized. The
// loader dequantizes the non-expert linears to the same f32 values.
struct FullPair {
  Fixture exl3, dense;
  std::vector<std::string> replaced;  // the non-expert linears stored EXL3
};

const FullPair& full_pair() {
  static FullPair r = [] {
    const Exl3Pair& p = pair();
    FullPair f;
    Tensors dequantized;
    const Tensors exl3 = exllama_conversion(p.exl3.dir, &dequantized);
    std::map<std::string, Tensor> replace(dequantized.begin(), dequantized.end());
    for (const auto& [n, t] : dequantized) f.replaced.push_back(n);
    auto twin = Checkpoint::open(p.dense.dir);
    if (!twin.has_value()) throw StatusError(twin.status());
    Tensors dense;
    for (const std::string& n : (*twin)->names())
      dense.emplace_back(n, replace.count(n) ? replace.at(n) : *(*twin)->tensor(n));
    nlohmann::json cfg = nlohmann::json::parse(read_text(p.dense.dir + "/config.json"));
    write_checkpoint(p.root + "/full_dense", dense, cfg);
    cfg["quantization_config"] = exllama_quantization_config();
    write_checkpoint(p.root + "/full", exl3, cfg);
    f.exl3 = fixture_at(p.original, p.root + "/full");
    f.dense = fixture_at(p.original, p.root + "/full_dense");
    return f;
  }();
  return r;
}

TEST(Glm5Exl3, ExllamaV3FullConversionMatchesTheDequantizedModel) {
  const FullPair& p = full_pair();
  ASSERT_GT(p.replaced.size(), 40u);  // every KDA / MLA / indexer / MLP projection and lm_head
  auto ws = open_weights(p.exl3);
  ASSERT_TRUE(ws);
  Status v = validate_checkpoint(*ws, p.exl3.config);
  EXPECT_TRUE(v.is_ok()) << v.to_string();
  EXPECT_EQ(ws->unknown_tensors(), std::vector<std::string>{});
  // The memory estimate's count of them (as BF16 once dequantized).
  auto stored = Checkpoint::open(p.exl3.dir);
  ASSERT_TRUE(stored.has_value());
  const Exl3DenseLinears d = exl3_dense_linears(**stored);
  EXPECT_EQ(d.linears, static_cast<int64_t>(p.replaced.size()));
  EXPECT_EQ(exl3_dense_linears(**Checkpoint::open(pair().exl3.dir)).linears, 0);  // experts only
  int64_t padded = 0;
  for (const std::string& n : p.replaced) {
    const Shape s = *ws->shape(n);
    padded += (s[0] + 127) / 128 * 128 * ((s[1] + 127) / 128 * 128);
  }
  EXPECT_EQ(d.elements, padded);
  EXPECT_GT(d.file_bytes, d.elements / 2);  // at least 4 bits per weight (K = 4 and 6)
  EXPECT_LT(d.file_bytes, d.elements);      // and under 8
  // The weight source hands each of them out as the dequantized weight, bit for bit.
  auto twin = Checkpoint::open(p.dense.dir);
  ASSERT_TRUE(twin.has_value());
  for (const std::string& n : {std::string("lm_head.weight"), p.replaced.front(), p.replaced.back()}) {
    auto got = ws->get_f32(n);
    ASSERT_TRUE(got.has_value()) << n << ": " << got.status().to_string();
    const Tensor want = *(*twin)->tensor(n);
    ASSERT_EQ(got->shape(), want.shape()) << n;
    EXPECT_EQ(std::memcmp(got->raw(), want.raw(), static_cast<size_t>(want.nbytes())), 0) << n;
  }
  const TpRun a = expect_same_model(p.exl3, p.dense, "exllamav3-style full EXL3 vs dequantized");
  ASSERT_FALSE(a.prefill.is_null());
  // The linears were really replaced: the experts-only checkpoint's logits are far away.
  auto c3 = make_single_rank_communicator();
  auto e = run_greedy(pair().exl3, *c3, 0);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  EXPECT_GT(rel_err(a.prefill, e->prefill), 1e-3);
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
  cfg.quantization.raw["head_bits"] = 12;
  auto ws = open_weight_source(p.exl3.dir, cfg);
  ASSERT_FALSE(ws.has_value());
  EXPECT_NE(ws.status().message().find("quantization_config.head_bits"), std::string::npos)
      << ws.status().to_string();
}

// Copies the EXL3 checkpoint with one tensor replaced (a null tensor removes it) or added.
// `from` (default: the experts-only EXL3 checkpoint) names the checkpoint to copy.
std::string edited_copy(const Exl3Pair& p, const std::string& name, const Tensor& value, const std::string& tag,
                        std::string from = "") {
  if (from.empty()) from = p.exl3.dir;
  const std::string dir = p.root + "/" + tag;
  fs::create_directories(dir);
  auto ckpt = Checkpoint::open(from);
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
  fs::copy_file(from + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  return dir;
}

// A checkpoint edit and what its refusal must say.
struct BrokenCase {
  std::string tag, name;  // the edited copy's folder name; the tensor replaced or added
  Tensor value;           // null: the tensor is removed
  std::string needle;     // in the refusal, beside the tensor's name
};

// Each edit of `from` (open_weight_source + Glm5Model::load on the CPU) must be refused,
// naming the tensor and saying `needle`.
void expect_refusals(const std::vector<BrokenCase>& cases, const std::string& from, const Glm5Config& config) {
  for (const BrokenCase& c : cases) {
    const std::string dir = edited_copy(pair(), c.name, c.value, c.tag, from);
    auto comm = make_single_rank_communicator();
    Status s;
    auto ws = open_weight_source(dir, config);
    if (!ws.has_value()) {
      s = ws.status();
    } else {
      auto m = Glm5Model::load(config, **ws, cpu_ops(), *comm);
      ASSERT_FALSE(m.has_value()) << c.tag << ": loaded";
      s = m.status();
    }
    EXPECT_NE(s.message().find(c.name), std::string::npos) << c.tag << ": " << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.tag << ": " << s.to_string();
  }
}

// The checks through the serving path (open_weight_source + Glm5Model::load):
// a truncated or mis-shaped trellis, an unknown codebook marker and a trellis beside a
// dense weight (which one would be meant?) each fail with a message naming the tensor.
TEST(Glm5Exl3, BrokenCheckpointsAreRefusedNamingTheTensor) {
  const Exl3Pair& p = pair();
  const std::string e = "model.language_model.layers.2.mlp.experts.5.";
  Tensor marker = Tensor::zeros({}, DType::kI32);
  expect_refusals(
      {
          {"truncated", e + "up_proj.trellis", Tensor::zeros({8, 8, 63}, DType::kI16), "truncated tile bitstreams"},
          {"misshaped", e + "down_proj.trellis", Tensor::zeros({8, 16, 64}, DType::kI16), "needs [8, 8, 64]"},
          {"k9", e + "gate_proj.trellis", Tensor::zeros({8, 8, 144}, DType::kI16), "1 to 8"},
          {"no_svh", e + "gate_proj.svh", Tensor(), "has no"},
          {"marker", e + "gate_proj.mul2", marker, "unknown companion"},
          {"stray", "model.language_model.layers.0.self_attn.o_proj.trellis", Tensor::zeros({8, 8, 64}, DType::kI16),
           "no weight of the model uses"},
      },
      p.exl3.dir, p.exl3.config);
}

// The same checks for an EXL3 linear outside the routed experts (dequantized at load).
TEST(Glm5Exl3, BrokenNonExpertLinearsAreRefusedNamingTheTensor) {
  const FullPair& f = full_pair();
  const std::string q = "model.language_model.layers.0.self_attn.q_proj.";
  expect_refusals(
      {
          {"full_truncated", q + "trellis", Tensor::zeros({8, 8, 63}, DType::kI16), "truncated tile bitstreams"},
          {"full_misshaped", "lm_head.trellis", Tensor::zeros({8, 8, 64}, DType::kI16), "needs [8, 24, "},
          {"full_marker", q + "mul2", Tensor::zeros({}, DType::kI32), "unknown companion"},
          // GLM-5.3's KDA projections take no bias: one beside the trellis would be dropped.
          {"full_bias", q + "bias", Tensor::zeros({128}, DType::kF16), "does not take"},
      },
      f.exl3.dir, f.exl3.config);
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

// Two tensor-parallel ranks give one rank's logits (within f32 summation order) and tokens.
void expect_tp2_matches_tp1(const Fixture& f, const char* what) {
  auto c1 = make_single_rank_communicator();
  auto one = run_greedy(f, *c1, 6);
  ASSERT_TRUE(one.has_value()) << one.status().to_string();
  run_ranks(2, [&](int rank, Communicator& comm) {
    auto r = run_greedy(f, comm, 6);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    const double err = rel_err(r->prefill, one->prefill);
    EXPECT_LT(err, 1e-5) << what << " rank " << rank;
    if (rank == 0) std::printf("%s TP=2 vs TP=1: prefill max|d|/max|ref| = %.3g\n", what, err);
    EXPECT_EQ(r->tokens, one->tokens) << what << " rank " << rank;
  });
}

TEST(Glm5Exl3, TensorParallelMatchesOneRank) { expect_tp2_matches_tp1(wide_fixture(), "EXL3"); }

// The same with the wide checkpoint's other linears stored EXL3 as well: each rank
// dequantizes them and keeps its rows / columns, as it does a BF16 checkpoint's.
TEST(Glm5Exl3, ExllamaV3FullConversionTensorParallelMatchesOneRank) {
  const Fixture wide = wide_fixture();
  const std::string dir = pair().root + "/wide_full";
  Tensors unused;
  nlohmann::json cfg = nlohmann::json::parse(read_text(wide.dir + "/config.json"));
  cfg["quantization_config"] = exllama_quantization_config();
  write_checkpoint(dir, exllama_conversion(wide.dir, &unused), cfg);
  ASSERT_GT(unused.size(), 40u);
  expect_tp2_matches_tp1(fixture_at(wide, dir), "exllamav3-style full EXL3");
}

}  // namespace
}  // namespace tf::test
