// WeightSource over the committed fixtures (both namings, FP8, sharded) and over
// broken checkpoints built in a temp folder; glm5_weight_spec against the names
// transformers actually wrote.
#include "model/weight_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return std::string(TF_TEST_DATA_DIR) + "/model/" + name; }

Glm5Config config_of(const std::string& name) {
  auto c = load_glm5_config(fixture(name));
  EXPECT_TRUE(c.has_value()) << c.status().to_string();
  return *c;
}

std::unique_ptr<WeightSource> open_fixture(const std::string& name) {
  auto s = open_weight_source(fixture(name), config_of(name));
  EXPECT_TRUE(s.has_value()) << s.status().to_string();
  return s.has_value() ? std::move(*s) : nullptr;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

class WeightFixtureTest : public ::testing::TestWithParam<std::string> {};

// Every expected tensor loads as f32 with its spec shape; nothing is unknown.
TEST_P(WeightFixtureTest, LoadsEveryExpectedTensor) {
  const Glm5Config config = config_of(GetParam());
  auto source = open_fixture(GetParam());
  ASSERT_NE(source, nullptr);
  std::vector<Status> problems;
  Status first = validate_checkpoint(*source, config, &problems);
  EXPECT_TRUE(first.is_ok()) << first.to_string();
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(source->unknown_tensors(), std::vector<std::string>{});
  size_t n = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(config)) {
    auto t = source->get_f32(e.name, e.shape);
    ASSERT_TRUE(t.has_value()) << t.status().to_string();
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_TRUE(t->is_contiguous());
    EXPECT_TRUE(t->device().is_cpu());
    ++n;
  }
  EXPECT_GT(n, 100u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WeightFixtureTest,
                         ::testing::Values("tiny-flat", "tiny-nested", "tiny-flat-hf", "tiny-kpool8", "tiny-fp8"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) c = c == '-' ? '_' : c;
                           return s;
                         });

// The spec lists exactly the tensors save_pretrained wrote (scales aside).
TEST(Glm5WeightSpec, MatchesTheNamesTransformersWrote) {
  for (const std::string name : {"tiny-flat", "tiny-nested", "tiny-kpool8", "tiny-fp8"}) {
    auto ckpt = Checkpoint::open(fixture(name));
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
    std::set<std::string> on_disk;
    for (const std::string& n : (*ckpt)->names()) {
      if (n.size() < 10 || n.compare(n.size() - 10, 10, "_scale_inv") != 0) on_disk.insert(n);
    }
    std::set<std::string> spec;
    for (const WeightSpecEntry& e : glm5_weight_spec(config_of(name))) {
      EXPECT_TRUE(spec.insert(e.name).second) << "duplicate " << e.name;
      const TensorEntry* te = (*ckpt)->find(e.name);
      ASSERT_NE(te, nullptr) << name << ": spec tensor not on disk: " << e.name;
      EXPECT_EQ(te->shape, e.shape) << name << ": " << e.name;
    }
    for (const std::string& n : on_disk) EXPECT_TRUE(spec.count(n)) << name << ": not in the spec: " << n;
  }
}

// The release (tests/data/model/glm53): every non-expert key of the official
// index, the per-expert count, and the shapes of shard 62's verbatim header.
TEST(Glm5WeightSpec, MatchesTheOfficialRelease) {
  const std::string dir = std::string(TF_TEST_DATA_DIR) + "/model/glm53/";
  auto config = load_glm5_config(dir + "config.json");
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  ASSERT_EQ(config->text.num_nextn_predict_layers, 1);
  std::set<std::string> official;
  std::ifstream names(dir + "non_expert_names.txt");
  for (std::string line; std::getline(names, line);) {
    const std::string suffix = "_scale_inv";
    if (line.size() > suffix.size() && line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0) {
      continue;  // FP8 scale companions are not in the spec
    }
    official.insert(line);
  }
  ASSERT_GT(official.size(), 1500u);
  std::map<std::string, Shape> spec;
  size_t experts = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(*config)) {
    if (e.name.find(".mlp.experts.") != std::string::npos) {
      ++experts;
    } else {
      spec[e.name] = e.shape;
    }
  }
  EXPECT_EQ(experts, 37152u);  // 43 MoE layers (3..45) x 288 experts x 3 (facts §4)
  for (const std::string& n : official) EXPECT_TRUE(spec.count(n)) << "official tensor not in the spec: " << n;
  for (const auto& [n, shape] : spec) EXPECT_TRUE(official.count(n)) << "spec tensor not in the release: " << n;
  auto header = nlohmann::json::parse(std::ifstream(dir + "shard62.header.json"), nullptr, false);
  ASSERT_TRUE(header.is_object());
  size_t checked = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    ASSERT_TRUE(spec.count(it.key())) << it.key();
    EXPECT_EQ(spec[it.key()], it.value()["shape"].get<Shape>()) << it.key();
    ++checked;
  }
  EXPECT_EQ(checked, 351u);
  // shapes stated in facts §4 for tensors outside shard 62
  const std::string l = layer_prefix(3);
  EXPECT_EQ(spec.at(layer_prefix(0) + "hc_attn_fn"), (Shape{24, 16384}));
  EXPECT_EQ(spec.at(layer_prefix(0) + "self_attn.q_conv1d.weight"), (Shape{8192, 1, 4}));
  EXPECT_EQ(spec.at(layer_prefix(0) + "self_attn.dt_bias"), (Shape{8192}));
  EXPECT_EQ(spec.at(l + "self_attn.q_b_proj.weight"), (Shape{16384, 1536}));
  EXPECT_EQ(spec.at(l + "self_attn.kv_b_proj.weight"), (Shape{32768, 512}));
  EXPECT_EQ(spec.at(l + "self_attn.o_proj.weight"), (Shape{4096, 16384}));
  EXPECT_EQ(spec.at(l + "self_attn.indexer.index_kpool_compress_ape"), (Shape{4, 128}));
  EXPECT_EQ(spec.at(l + "self_attn.indexer.wq_b.weight"), (Shape{4096, 1536}));
  EXPECT_EQ(spec.at(layer_prefix(45) + "eh_proj.weight"), (Shape{4096, 8192}));
  EXPECT_EQ(spec.at("lm_head.weight"), (Shape{154880, 4096}));
}

TEST(Glm5WeightSpec, MtpLayerFollowsTheDecoderLayers) {
  Glm5Config c = config_of("tiny-flat");
  c.text.num_nextn_predict_layers = 1;
  const int64_t h = c.text.hidden_size;
  std::map<std::string, Shape> spec;
  for (const WeightSpecEntry& e : glm5_weight_spec(c)) spec[e.name] = e.shape;
  const std::string p = layer_prefix(c.text.num_hidden_layers);
  EXPECT_EQ(spec.at(p + "eh_proj.weight"), (Shape{h, 2 * h}));
  for (const char* n : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight",
                        "post_attention_layernorm.weight", "self_attn.kv_a_layernorm.weight",
                        "self_attn.indexer.weights_proj.weight", "mlp.gate.e_score_correction_bias"}) {
    EXPECT_TRUE(spec.count(p + n)) << n;
  }
  EXPECT_TRUE(spec.count(expert_weight_name(c.text.num_hidden_layers, c.text.n_routed_experts - 1, "down_proj")));
  EXPECT_FALSE(spec.count(p + "hc_attn_fn"));
  EXPECT_FALSE(spec.count(p + "shared_head.head.weight"));
  WeightSpecOptions no_mtp;
  no_mtp.include_mtp = false;
  for (const WeightSpecEntry& e : glm5_weight_spec(c, no_mtp)) EXPECT_NE(e.name.rfind(p, 0), 0u) << e.name;
}

// The module-name copy gives bit-identical f32 tensors.
TEST(WeightSource, BothNamingsGiveIdenticalTensors) {
  const Glm5Config config = config_of("tiny-flat");
  auto disk = open_fixture("tiny-flat");
  auto module = open_fixture("tiny-flat-hf");
  ASSERT_NE(disk, nullptr);
  ASSERT_NE(module, nullptr);
  auto raw = Checkpoint::open(fixture("tiny-flat-hf"));
  ASSERT_TRUE(raw.has_value());
  ASSERT_TRUE((*raw)->has("model.language_model.layers.1.mlp.experts.gate_up_proj"));  // really the other naming
  ASSERT_FALSE((*raw)->has("model.language_model.layers.1.mlp.experts.0.gate_proj.weight"));
  for (const WeightSpecEntry& e : glm5_weight_spec(config)) {
    auto a = disk->get_f32(e.name);
    auto b = module->get_f32(e.name);
    ASSERT_TRUE(a.has_value()) << a.status().to_string();
    ASSERT_TRUE(b.has_value()) << b.status().to_string();
    EXPECT_TRUE(bit_equal(*a, *b)) << e.name;
  }
}

// FP8 fixture: the loader's values are code * scale_inv of the element's block, edge blocks included.
TEST(WeightSource, Fp8FixtureDequantizesPerBlock) {
  auto source = open_fixture("tiny-fp8");
  ASSERT_NE(source, nullptr);
  auto ckpt = Checkpoint::open(fixture("tiny-fp8"));
  ASSERT_TRUE(ckpt.has_value());
  for (const std::string& name : {std::string("model.language_model.layers.0.mlp.gate_proj.weight"),
                                 std::string("model.language_model.layers.1.self_attn.q_a_proj.weight"),
                                 expert_weight_name(2, 5, "up_proj"), expert_weight_name(3, 11, "down_proj")}) {
    auto codes = (*ckpt)->tensor(name);
    auto scale = (*ckpt)->tensor(name + "_scale_inv");
    ASSERT_TRUE(codes.has_value() && scale.has_value()) << name;
    ASSERT_EQ(codes->dtype(), DType::kF8E4M3) << name;
    auto w = source->get_f32(name);
    ASSERT_TRUE(w.has_value()) << w.status().to_string();
    const int64_t rows = codes->size(0), cols = codes->size(1);
    ASSERT_TRUE(rows % 128 != 0 || cols % 128 != 0) << name << " has no partial edge block";
    const Tensor s = scale->to_f32();
    for (int64_t r : {int64_t{0}, std::min<int64_t>(127, rows - 1), rows - 1}) {
      for (int64_t c : {int64_t{0}, std::min<int64_t>(127, cols - 1), cols - 1}) {
        const uint8_t code = static_cast<const uint8_t*>(codes->raw())[r * cols + c];
        const float expect = fp8_e4m3_to_float(code) * s.data<float>()[(r / 128) * s.size(1) + c / 128];
        EXPECT_EQ(w->data<float>()[r * cols + c], expect) << name << " at " << r << "," << c;
      }
    }
  }
  // non-FP8 tensors (BF16 / F32 on disk) arrive as f32 too
  auto bias = source->get_f32("model.language_model.layers.1.mlp.gate.e_score_correction_bias", {12});
  ASSERT_TRUE(bias.has_value()) << bias.status().to_string();
}

// Broken checkpoints, built from tiny-flat in a temp folder.
class BrokenCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tf_ws_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    fs::copy_file(fixture("tiny-flat") + "/config.json", dir_ / "config.json");
    auto ckpt = Checkpoint::open(fixture("tiny-flat"));
    ASSERT_TRUE(ckpt.has_value());
    ckpt_ = std::move(*ckpt);
    for (const std::string& n : ckpt_->names()) tensors_.emplace_back(n, *ckpt_->tensor(n));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes tensors_ (edited by the test) and opens them.
  std::unique_ptr<WeightSource> write_and_open(const Glm5Config& config) {
    Status s = write_safetensors((dir_ / "model.safetensors").string(), tensors_);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    auto src = open_weight_source(dir_.string(), config);
    EXPECT_TRUE(src.has_value()) << src.status().to_string();
    return src.has_value() ? std::move(*src) : nullptr;
  }
  void erase(const std::string& name) {
    std::erase_if(tensors_, [&](const auto& p) { return p.first == name; });
  }
  void rename_all(const std::string& from, const std::string& to) {
    for (auto& [n, t] : tensors_) {
      if (n.rfind(from, 0) == 0) n = to + n.substr(from.size());
    }
  }

  fs::path dir_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

TEST_F(BrokenCheckpointTest, MissingTensorIsNamed) {
  const std::string gone = "model.language_model.layers.2.self_attn.q_conv1d.weight";
  erase(gone);
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  EXPECT_FALSE(src->has(gone));
  std::vector<Status> problems;
  Status first = validate_checkpoint(*src, config_of("tiny-flat"), &problems);
  ASSERT_FALSE(first.is_ok());
  EXPECT_EQ(first.code(), StatusCode::kNotFound);
  EXPECT_NE(first.message().find(gone), std::string::npos) << first.message();
  EXPECT_NE(first.message().find(dir_.string()), std::string::npos) << first.message();
  EXPECT_EQ(problems.size(), 1u);
  auto t = src->get_f32(gone);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find(gone), std::string::npos);
  // the alternatives tried are listed
  EXPECT_NE(t.status().message().find("self_attn.conv1d.weight part 1/3"), std::string::npos) << t.status().message();
}

TEST_F(BrokenCheckpointTest, MisShapedTensorIsNamedWithBothShapes) {
  const std::string bad = "model.language_model.layers.1.mlp.experts.3.up_proj.weight";  // [32, 64]
  for (auto& [n, t] : tensors_) {
    if (n == bad) t = Tensor::zeros({31, 64}, DType::kF32);
  }
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  std::vector<Status> problems;
  Status first = validate_checkpoint(*src, config_of("tiny-flat"), &problems);
  ASSERT_FALSE(first.is_ok());
  EXPECT_NE(first.message().find(bad), std::string::npos) << first.message();
  EXPECT_NE(first.message().find("[31, 64]"), std::string::npos) << first.message();
  EXPECT_NE(first.message().find("[32, 64]"), std::string::npos) << first.message();
  EXPECT_EQ(problems.size(), 1u);
  auto t = src->get_f32(bad, {32, 64});
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("[31, 64]"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("[32, 64]"), std::string::npos) << t.status().message();
}

TEST_F(BrokenCheckpointTest, AllProblemsAreListed) {
  erase("model.language_model.norm.weight");
  erase("lm_head.weight");
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  std::vector<Status> problems;
  EXPECT_FALSE(validate_checkpoint(*src, config_of("tiny-flat"), &problems).is_ok());
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].message().find("model.language_model.norm.weight"), std::string::npos);
  EXPECT_NE(problems[1].message().find("lm_head.weight"), std::string::npos);
}

TEST_F(BrokenCheckpointTest, UnknownTensorIsReportedNotFatal) {
  tensors_.emplace_back("model.language_model.layers.0.self_attn.mystery.weight", Tensor::zeros({2}, DType::kF32));
  tensors_.emplace_back("model.language_model.layers.7.input_layernorm.weight", Tensor::zeros({64}, DType::kF32));
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  EXPECT_TRUE(validate_checkpoint(*src, config_of("tiny-flat")).is_ok());
  EXPECT_EQ(src->unknown_tensors(),
            (std::vector<std::string>{"model.language_model.layers.0.self_attn.mystery.weight",
                                      "model.language_model.layers.7.input_layernorm.weight"}));
}

TEST_F(BrokenCheckpointTest, FlatTextOnlyPrefixLoadsTheSameTensors) {
  rename_all("model.language_model.", "model.");
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  EXPECT_TRUE(src->unknown_tensors().empty());
  auto orig = open_fixture("tiny-flat");
  for (const WeightSpecEntry& e : glm5_weight_spec(config_of("tiny-flat"))) {
    auto a = src->get_f32(e.name, e.shape);
    ASSERT_TRUE(a.has_value()) << a.status().to_string();
    EXPECT_TRUE(bit_equal(*a, *orig->get_f32(e.name))) << e.name;
  }
}

TEST_F(BrokenCheckpointTest, TiedEmbeddingsServeTheHead) {
  erase("lm_head.weight");
  Glm5Config config = config_of("tiny-flat");
  config.text.tie_word_embeddings = true;
  auto src = write_and_open(config);
  ASSERT_NE(src, nullptr);
  EXPECT_TRUE(validate_checkpoint(*src, config).is_ok());
  auto head = src->get_f32("lm_head.weight", {384, 64});
  ASSERT_TRUE(head.has_value()) << head.status().to_string();
  EXPECT_TRUE(bit_equal(*head, *src->get_f32("model.language_model.embed_tokens.weight")));
}

TEST_F(BrokenCheckpointTest, FusedTensorThatDoesNotSplitIsAnError) {
  // module naming with a gate_up_proj whose dim 1 is odd: gate/up cannot be cut
  for (auto& [n, t] : tensors_) {
    if (n == "model.language_model.layers.1.mlp.experts.0.gate_proj.weight") {
      n = "model.language_model.layers.1.mlp.experts.gate_up_proj";
      t = Tensor::zeros({12, 63, 64}, DType::kF32);
    }
  }
  erase("model.language_model.layers.1.mlp.experts.0.up_proj.weight");
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  auto t = src->get_f32(expert_weight_name(1, 0, "up_proj"));
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find("gate_up_proj"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("[12, 63, 64]"), std::string::npos) << t.status().message();
}

TEST_F(BrokenCheckpointTest, Fp8WithoutScaleIsAnError) {
  const std::string name = "model.language_model.layers.0.mlp.down_proj.weight";
  for (auto& [n, t] : tensors_) {
    if (n == name) t = t.to_dtype(DType::kF8E4M3);
  }
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  auto t = src->get_f32(name);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.status().message().find(name + "_scale_inv"), std::string::npos) << t.status().message();
}

// A small unquantized tensor (a norm, the KDA decay) with an inf / NaN is refused as it loads, naming it:
// it would fail every reply. bf16 too.
TEST_F(BrokenCheckpointTest, NonFiniteSmallTensorIsNamed) {
  const auto original = tensors_;
  for (const auto& [name, dtype] :
       {std::pair{std::string("model.language_model.layers.0.input_layernorm.weight"), DType::kF32},
        std::pair{std::string("model.language_model.layers.0.self_attn.A_log"), DType::kBF16}}) {
    tensors_ = original;
    for (auto& [n, t] : tensors_) {
      if (n != name) continue;
      std::vector<float> v = t.to_vector();
      v[1] = std::nanf("");
      t = Tensor::from_floats(t.shape(), v).to_dtype(dtype);
    }
    auto src = write_and_open(config_of("tiny-flat"));
    ASSERT_NE(src, nullptr);
    auto t = src->get_f32(name);
    ASSERT_FALSE(t.has_value()) << name;
    EXPECT_NE(t.status().message().find(name + "': non-finite value"), std::string::npos)
        << t.status().message();
    EXPECT_NE(t.status().message().find("at [1]"), std::string::npos) << t.status().message();
  }
}

// get_fp8 hands out an FP8 matrix as stored (codes and scales, bit for bit), nothing for
// a BF16 one or a cut of a fused tensor, and an error naming the scale grid when its dtype
// is not a float.
TEST_F(BrokenCheckpointTest, Fp8MatricesComeOutAsStoredOrNamed) {
  const std::string name = "model.language_model.layers.0.mlp.down_proj.weight";
  Shape shape;
  for (auto& [n, t] : tensors_) {
    if (n != name) continue;
    shape = t.shape();
    t = t.to_dtype(DType::kF8E4M3);
  }
  ASSERT_EQ(shape.size(), 2u);
  const Shape grid = {(shape[0] + 127) / 128, (shape[1] + 127) / 128};
  std::vector<float> sv(static_cast<size_t>(shape_numel(grid)));
  for (size_t i = 0; i < sv.size(); ++i) sv[i] = 0.5f + static_cast<float>(i);
  tensors_.emplace_back(name + "_scale_inv", Tensor::from_floats(grid, sv));
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  auto m = src->get_fp8(name, shape);
  ASSERT_TRUE(m.has_value()) << m.status().to_string();
  ASSERT_TRUE(m->has_value());
  EXPECT_EQ((*m)->format(), MatrixFormat::kFp8Block);
  const Tensor stored = *ckpt_->tensor(name);  // the BF16 original: its e4m3 rounding is what was written
  const Tensor codes = stored.to_dtype(DType::kF8E4M3);
  EXPECT_EQ(0, std::memcmp(codes.raw(), (*m)->codes().raw(), codes.nbytes()));
  EXPECT_EQ((*m)->scales().to_vector(), sv);
  auto bf16 = src->get_fp8("model.language_model.layers.0.mlp.up_proj.weight", {});
  ASSERT_TRUE(bf16.has_value());
  EXPECT_FALSE(bf16->has_value());
  // A scale grid of integers: refused, naming it.
  for (auto& [n, t] : tensors_)
    if (n == name + "_scale_inv") t = Tensor::zeros(grid, DType::kI32);
  src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  auto bad = src->get_fp8(name, shape);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find(name + "_scale_inv"), std::string::npos) << bad.status().message();
  // A damaged scale (NaN / inf) is refused as stored and dequantized, naming the grid and where.
  for (const float v : {std::nanf(""), -INFINITY}) {
    std::vector<float> damaged = sv;
    damaged.back() = v;
    for (auto& [n, t] : tensors_)
      if (n == name + "_scale_inv") t = Tensor::from_floats(grid, damaged);
    src = write_and_open(config_of("tiny-flat"));
    ASSERT_NE(src, nullptr);
    for (const Status& st : {src->get_fp8(name, shape).status(), src->get_f32(name).status()}) {
      ASSERT_FALSE(st.is_ok());
      EXPECT_NE(st.message().find("non-finite value"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
      EXPECT_NE(
          st.message().find("[" + std::to_string(grid[0] - 1) + ", " + std::to_string(grid[1] - 1) + "]"),
          std::string::npos)
          << st.message();
    }
  }
}

// Fused FP8 experts in module naming ([E, 2I, H] codes with one [E, ceil(2I/128), ceil(H/128)]
// grid): up_proj of expert e is rows [I, 2I) and keeps the global block index of each row.
TEST_F(BrokenCheckpointTest, FusedFp8ExpertsUseTheFusedGrid) {
  const int64_t experts = 2, inter = 72, hidden = 130;
  Tensor gate_up = Tensor::empty({experts, 2 * inter, hidden}, DType::kF8E4M3);
  std::memset(gate_up.raw(), 0x38, gate_up.nbytes());  // every code 1.0
  Tensor gu_scale = Tensor::from_floats({experts, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor down = Tensor::empty({experts, hidden, inter}, DType::kF8E4M3);
  std::memset(down.raw(), 0x40, down.nbytes());  // every code 2.0
  Tensor down_scale = Tensor::from_floats({experts, 2, 1}, {0.5f, 0.25f, 0.125f, 0.0625f});
  const std::string p = layer_prefix(1) + "mlp.experts.";
  tensors_ = {{p + "gate_up_proj", gate_up}, {p + "gate_up_proj_scale_inv", gu_scale},
              {p + "down_proj", down}, {p + "down_proj_scales_inv", down_scale}};
  auto src = write_and_open(config_of("tiny-flat"));
  ASSERT_NE(src, nullptr);
  auto up = src->get_f32(expert_weight_name(1, 1, "up_proj"), {inter, hidden});
  ASSERT_TRUE(up.has_value()) << up.status().to_string();
  const float* u = up->data<float>();
  EXPECT_EQ(u[0], 5.0f);                                // global row 72 -> block row 0, col block 0
  EXPECT_EQ(u[129], 6.0f);                              // col 129 -> col block 1
  EXPECT_EQ(u[(128 - 72) * hidden], 7.0f);              // global row 128 -> block row 1
  EXPECT_EQ(u[(inter - 1) * hidden + hidden - 1], 8.0f);
  auto gate = src->get_f32(expert_weight_name(1, 0, "gate_proj"), {inter, hidden});
  ASSERT_TRUE(gate.has_value()) << gate.status().to_string();
  EXPECT_EQ(gate->data<float>()[0], 1.0f);
  EXPECT_EQ(gate->data<float>()[(inter - 1) * hidden + 128], 2.0f);
  auto dn = src->get_f32(expert_weight_name(1, 1, "down_proj"), {hidden, inter});
  ASSERT_TRUE(dn.has_value()) << dn.status().to_string();
  EXPECT_EQ(dn->data<float>()[0], 2.0f * 0.125f);
  EXPECT_EQ(dn->data<float>()[129 * inter], 2.0f * 0.0625f);
}

// A synthetic checkpoint with the MTP layer (transformers never writes one): it
// loads, validates, and its tensors are not reported unknown.
TEST_F(BrokenCheckpointTest, MtpLayerLoads) {
  Glm5Config config = config_of("tiny-flat");
  config.text.num_nextn_predict_layers = 1;
  std::set<std::string> have;
  for (const auto& [n, t] : tensors_) have.insert(n);
  int added = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(config)) {
    if (have.count(e.name)) continue;
    Tensor t = Tensor::empty(e.shape, DType::kBF16);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
    convert_from_f32(v.data(), t.raw(), DType::kBF16, v.size());
    tensors_.emplace_back(e.name, t);
    ++added;
  }
  EXPECT_GT(added, 30);
  auto src = write_and_open(config);
  ASSERT_NE(src, nullptr);
  EXPECT_TRUE(validate_checkpoint(*src, config).is_ok());
  EXPECT_TRUE(src->unknown_tensors().empty());
  auto eh = src->get_f32(layer_prefix(4) + "eh_proj.weight", {64, 128});
  ASSERT_TRUE(eh.has_value()) << eh.status().to_string();
  EXPECT_EQ(eh->data<float>()[8], 8 % 7 - 3.0f);
  // without the MTP layer in the config, its tensors are unknown
  auto plain = open_weight_source(dir_.string(), config_of("tiny-flat"));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ((*plain)->unknown_tensors().size(), static_cast<size_t>(added));
}

TEST(WeightNames, AliasesOfCanonicalNames) {
  auto a = weight_aliases("model.language_model.layers.3.mlp.experts.7.up_proj.weight");
  ASSERT_GE(a.size(), 4u);
  EXPECT_EQ(a[0].name, "model.language_model.layers.3.mlp.experts.7.up_proj.weight");
  EXPECT_FALSE(a[0].is_slice());
  EXPECT_EQ(a[1].name, "model.language_model.layers.3.mlp.experts.gate_up_proj");
  EXPECT_EQ(a[1].select, 7);
  EXPECT_EQ(a[1].part, 1);
  EXPECT_EQ(a[1].parts, 2);
  EXPECT_EQ(a[2].name, "model.layers.3.mlp.experts.7.up_proj.weight");
  auto f = weight_aliases("model.language_model.layers.0.self_attn.A_log");
  EXPECT_EQ(f[1].name, "model.language_model.layers.0.self_attn.forget_gate.A_log");
  auto h = weight_aliases("model.language_model.layers.0.hc_ffn_scale");
  EXPECT_EQ(h[1].name, "model.language_model.layers.0.ffn_hc.scale");
  auto v = weight_aliases("model.language_model.layers.0.self_attn.v_conv1d.weight");
  EXPECT_EQ(v[1].name, "model.language_model.layers.0.self_attn.conv1d.weight");
  EXPECT_EQ(v[1].part, 2);
  EXPECT_EQ(v[1].parts, 3);
  EXPECT_EQ(weight_aliases("lm_head.weight").size(), 1u);
  EXPECT_GT(weight_aliases("lm_head.weight", /*tie_word_embeddings=*/true).size(), 1u);
}

}  // namespace
}  // namespace tf
