// The synthetic checkpoint generator (src/engine/synthetic_checkpoint.h, `tensorfold
// synth-checkpoint`): the full geometry's config and tensor list against the release (computed,
// nothing written), the tokenizer at full vocabulary, a scaled-down checkpoint written into a temp
// folder that loads (checkpoint validation, the model on the CPU ops, the serving engine) and
// generates, the full 45-layer depth staying finite, byte-identical output for one seed whatever
// the thread count, and the refusals.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "comm/communicator.h"
#include "engine/demo_checkpoint.h"
#include "engine/engine.h"
#include "engine/synthetic_checkpoint.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/glm5_weight_spec.h"
#include "model/safetensors.h"
#include "model/weight_names.h"
#include "model/weight_source.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

fs::path scratch(const std::string& what) {
  static int counter = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("tf_synth_test_" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(counter++));
  fs::remove_all(p);
  return p;
}

SyntheticGeometry preset(const char* name) {
  Expected<SyntheticGeometry> g = synthetic_geometry_preset(name);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  return g.has_value() ? *g : SyntheticGeometry{};
}

// A small folder of several shards (the tiny model is ~3 MB; 1 MB shards).
SyntheticCheckpointOptions tiny_options() {
  SyntheticCheckpointOptions o;
  o.geometry = preset("tiny");
  o.shard_bytes = 1 << 20;
  return o;
}

// ---------------------------------------------------------------------------------------------
// Full geometry against the release (nothing written)

TEST(SyntheticConfig, FullPresetIsTheReleaseTextConfigWithFewerExperts) {
  const json official = json::parse(read_file(fs::path(TF_TEST_DATA_DIR) / "model/glm53/config.json"));
  SyntheticGeometry g = preset("full");
  EXPECT_EQ(g.experts, 32);
  g.experts = 288;
  json ours = json::parse(synthetic_config_json(g));
  // With the release's expert count the text config is the release's, key for key.
  EXPECT_EQ(ours["text_config"], official["text_config"]) << ours["text_config"].dump(1);
  json top = official;
  top.erase("text_config");
  top.erase("vision_config");
  top.erase("quantization_config");
  ours.erase("text_config");
  EXPECT_EQ(ours, top);
  g.experts = 8;
  const json eight = json::parse(synthetic_config_json(g));
  json expected = official["text_config"];
  expected["n_routed_experts"] = 8;
  EXPECT_EQ(eight["text_config"], expected);
  // The parser reads it back with the full geometry.
  Expected<Glm5Config> c = parse_glm5_config(synthetic_config_json(g));
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_FALSE(c->vision.present);
  EXPECT_TRUE(c->quantization.method.empty());
  EXPECT_EQ(c->text.count_layers(AttentionKind::kSparseMla), 11);
  EXPECT_EQ(c->text.num_nextn_predict_layers, 1);
}

TEST(SyntheticConfig, GenerationConfigIsTheOfficialFileAtFullVocab) {
  EXPECT_EQ(synthetic_generation_config_json(preset("full")),
            read_file(fs::path(TF_TEST_DATA_DIR) / "glm53/generation_config.json"));
  // Scaled down: the same ids moved to vocab - 60.
  const SyntheticGeometry tiny = preset("tiny");
  const json j = json::parse(synthetic_generation_config_json(tiny));
  const int64_t f = synthetic_first_special_id(tiny);
  EXPECT_EQ(f, tiny.vocab_size - 60);
  EXPECT_EQ(j["eos_token_id"], json({f, f + 7, f + 9}));
  EXPECT_EQ(j["pad_token_id"], f);
}

// Every text tensor of the release (non-expert keys, shard 62's header, experts 0..N-1) with its
// shape, and the release's dtypes where it stores BF16 / F32.
void check_against_release(int experts) {
  SCOPED_TRACE("experts " + std::to_string(experts));
  const fs::path data(TF_TEST_DATA_DIR);
  SyntheticGeometry g = preset("full");
  g.experts = experts;
  Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(g, kDefaultSyntheticSeed);
  ASSERT_TRUE(tensors.has_value()) << tensors.status().to_string();
  std::map<std::string, const GeneratedTensor*> ours_other, ours_experts;
  for (const GeneratedTensor& t : *tensors) {
    auto& m = t.name.find(".mlp.experts.") != std::string::npos ? ours_experts : ours_other;
    EXPECT_TRUE(m.emplace(t.name, &t).second) << "duplicate " << t.name;
  }
  // Non-expert text tensors: the release's keys less the FP8 scale companions and the vision tower.
  std::set<std::string> release;
  for (const std::string& n : read_lines(data / "model/glm53/non_expert_names.txt"))
    if (!ends_with(n, "_scale_inv") && n.rfind("model.visual.", 0) != 0) release.insert(n);
  ASSERT_GT(release.size(), 1200u);
  for (const std::string& n : release) EXPECT_TRUE(ours_other.count(n)) << "release tensor missing: " << n;
  for (const auto& [n, t] : ours_other) EXPECT_TRUE(release.count(n)) << "not in the release: " << n;
  EXPECT_EQ(ours_other.size(), release.size());
  // Experts 0..N-1 of every MoE layer (3..44 and MTP layer 45).
  std::set<std::string> release_experts;
  for (const std::string& n : read_lines(data / "synthetic/release_expert_names_0-31.txt")) {
    const size_t at = n.find(".mlp.experts.") + 13;
    if (std::stoi(n.substr(at)) < experts) release_experts.insert(n);
  }
  ASSERT_EQ(release_experts.size(), size_t{43} * 3 * static_cast<size_t>(experts));
  std::set<std::string> expert_names;
  for (const auto& [n, t] : ours_experts) expert_names.insert(n);
  EXPECT_EQ(expert_names, release_experts);
  // Shapes: shard 62's verbatim header (layer 9's KDA tail and the final norm), with dtypes.
  const json header = json::parse(read_file(data / "model/glm53/shard62.header.json"));
  size_t checked = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__" || it.key().rfind("model.visual.", 0) == 0) continue;
    ASSERT_TRUE(ours_other.count(it.key())) << it.key();
    const GeneratedTensor& t = *ours_other.at(it.key());
    EXPECT_EQ(t.shape, it.value()["shape"].get<Shape>()) << it.key();
    EXPECT_EQ(std::string(dtype_safetensors_name(t.recipe.dtype)), it.value()["dtype"].get<std::string>()) << it.key();
    ++checked;
  }
  EXPECT_GE(checked, 4u);
  // Shapes stated in the facts (§4) for the rest; FP8 matrices of the release are BF16 here.
  auto shape = [&](const std::string& n) -> Shape {
    if (ours_other.count(n)) return ours_other.at(n)->shape;
    if (ours_experts.count(n)) return ours_experts.at(n)->shape;
    ADD_FAILURE() << "no tensor " << n;
    return {};
  };
  const std::string l0 = layer_prefix(0), l3 = layer_prefix(3), l45 = layer_prefix(45);
  EXPECT_EQ(shape("lm_head.weight"), (Shape{154880, 4096}));
  EXPECT_EQ(shape(text_prefix() + "embed_tokens.weight"), (Shape{154880, 4096}));
  EXPECT_EQ(shape(l0 + "hc_attn_fn"), (Shape{24, 16384}));
  EXPECT_EQ(shape(l0 + "hc_ffn_base"), (Shape{24}));
  EXPECT_EQ(shape(l0 + "hc_attn_scale"), (Shape{3}));
  EXPECT_EQ(shape(l0 + "self_attn.q_proj.weight"), (Shape{8192, 4096}));
  EXPECT_EQ(shape(l0 + "self_attn.k_conv1d.weight"), (Shape{8192, 1, 4}));
  EXPECT_EQ(shape(l0 + "self_attn.f_b_proj.weight"), (Shape{8192, 128}));
  EXPECT_EQ(shape(l0 + "self_attn.A_log"), (Shape{64}));
  EXPECT_EQ(shape(l0 + "self_attn.dt_bias"), (Shape{8192}));
  EXPECT_EQ(shape(l0 + "self_attn.o_proj.weight"), (Shape{4096, 8192}));
  EXPECT_EQ(shape(l0 + "mlp.gate_proj.weight"), (Shape{12288, 4096}));
  EXPECT_EQ(shape(l0 + "mlp.down_proj.weight"), (Shape{4096, 12288}));
  EXPECT_EQ(shape(l3 + "self_attn.q_a_proj.weight"), (Shape{1536, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.q_b_proj.weight"), (Shape{16384, 1536}));
  EXPECT_EQ(shape(l3 + "self_attn.kv_a_proj_with_mqa.weight"), (Shape{512, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.kv_b_proj.weight"), (Shape{32768, 512}));
  EXPECT_EQ(shape(l3 + "self_attn.o_proj.weight"), (Shape{4096, 16384}));
  EXPECT_EQ(shape(l3 + "self_attn.indexer.wq_b.weight"), (Shape{4096, 1536}));
  EXPECT_EQ(shape(l3 + "self_attn.indexer.wk.weight"), (Shape{128, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.indexer.weights_proj.weight"), (Shape{32, 4096}));
  EXPECT_EQ(shape(l3 + "self_attn.indexer.index_kpool_compress_ape"), (Shape{4, 128}));
  EXPECT_EQ(shape(l3 + "self_attn.indexer.index_kpool_compress_gate"), (Shape{128, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.gate.weight"), (Shape{experts, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.gate.e_score_correction_bias"), (Shape{experts}));
  EXPECT_EQ(shape(l3 + "mlp.shared_experts.up_proj.weight"), (Shape{2048, 4096}));
  EXPECT_EQ(shape(l3 + "mlp.shared_experts.down_proj.weight"), (Shape{4096, 2048}));
  EXPECT_EQ(shape(expert_weight_name(3, experts - 1, "gate_proj")), (Shape{2048, 4096}));
  EXPECT_EQ(shape(expert_weight_name(45, 0, "down_proj")), (Shape{4096, 2048}));
  EXPECT_EQ(shape(l45 + "eh_proj.weight"), (Shape{4096, 8192}));
  // F32 exactly where the release stores F32 (facts §4), BF16 elsewhere.
  for (const GeneratedTensor& t : *tensors) {
    const bool f32 = ends_with(t.name, "_base") || ends_with(t.name, "_scale") || ends_with(t.name, ".A_log") ||
                     ends_with(t.name, ".dt_bias") || ends_with(t.name, "e_score_correction_bias");
    EXPECT_EQ(t.recipe.dtype, f32 ? DType::kF32 : DType::kBF16) << t.name;
  }
}

TEST(SyntheticTensors, FullGeometryMatchesTheReleaseWeightMap) {
  check_against_release(8);
  check_against_release(32);
}

TEST(SyntheticTensors, SpreadKeepsActivationsAtUnitScale) {
  Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(preset("full"), 1);
  ASSERT_TRUE(tensors.has_value());
  std::map<std::string, DemoTensorRecipe> r;
  for (const GeneratedTensor& t : *tensors) r[t.name] = t.recipe;
  const std::string l0 = layer_prefix(0), l3 = layer_prefix(3);
  EXPECT_FLOAT_EQ(r.at(text_prefix() + "embed_tokens.weight").sigma, 1.0f);
  EXPECT_FLOAT_EQ(r.at("lm_head.weight").sigma, 1.0f / 64);                             // 1/sqrt(4096)
  EXPECT_FLOAT_EQ(r.at(l0 + "self_attn.o_proj.weight").sigma, 1.0f / std::sqrt(8192.0f));
  EXPECT_FLOAT_EQ(r.at(l0 + "mlp.down_proj.weight").sigma, 1.0f / std::sqrt(12288.0f));
  EXPECT_FLOAT_EQ(r.at(l0 + "self_attn.q_conv1d.weight").sigma, 0.5f);                 // 4 taps
  EXPECT_FLOAT_EQ(r.at(l3 + "self_attn.q_b_proj.weight").sigma, 1.0f / std::sqrt(1536.0f));
  EXPECT_EQ(r.at(l0 + "input_layernorm.weight").init, DemoInit::kOne);
  EXPECT_EQ(r.at(l0 + "hc_attn_base").init, DemoInit::kZero);
  EXPECT_EQ(r.at(l0 + "hc_attn_scale").init, DemoInit::kOne);
  EXPECT_EQ(r.at(l0 + "self_attn.A_log").init, DemoInit::kALog);
  EXPECT_EQ(r.at(l0 + "self_attn.dt_bias").init, DemoInit::kDtBias);
  EXPECT_EQ(r.at(l3 + "mlp.gate.e_score_correction_bias").init, DemoInit::kZero);
  // The drawn values have that spread (BF16-rounded, 64k samples).
  const DemoTensorRecipe& down = r.at(l0 + "mlp.down_proj.weight");
  std::vector<uint16_t> v(1 << 16);
  fill_demo_elements(down, 123456, static_cast<int64_t>(v.size()), v.data());
  double sum = 0, sq = 0;
  for (uint16_t b : v) {
    const double x = bf16_to_float(b);
    sum += x;
    sq += x * x;
  }
  const double mean = sum / v.size(), sd = std::sqrt(sq / v.size() - mean * mean);
  EXPECT_NEAR(sd / down.sigma, 1.0, 0.02);
  EXPECT_NEAR(mean / down.sigma, 0.0, 0.02);
}

// fill_demo_elements' vectorised BF16 path draws exactly what the scalar definition does.
TEST(SyntheticTensors, VectorisedFillEqualsTheScalarDraw) {
  const std::string name = expert_weight_name(7, 3, "up_proj");
  DemoWeightOptions wo;
  wo.seed = 99;
  DemoTensorRecipe r = demo_tensor_recipe(name, wo);
  ASSERT_EQ(r.init, DemoInit::kNormal);
  ASSERT_EQ(r.dtype, DType::kBF16);
  for (float sigma : {0.02f, 1.0f / 64, 1.0f}) {
    r.sigma = sigma;
    for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{987654321}}) {
      std::vector<uint16_t> got(1031);
      fill_demo_elements(r, first, static_cast<int64_t>(got.size()), got.data());
      for (size_t j = 0; j < got.size(); ++j) {
        const float v = sigma * demo_normal(99, name, static_cast<uint64_t>(first) + j);
        ASSERT_EQ(got[j], float_to_bf16(v)) << "element " << first + static_cast<int64_t>(j) << ", sigma " << sigma;
      }
    }
  }
}

TEST(SyntheticParams, CountsTotalActiveAndMtp) {
  SyntheticGeometry g = preset("full");
  g.experts = 8;
  Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(g, 1);
  ASSERT_TRUE(tensors.has_value());
  const SyntheticParams p = count_synthetic_params(g, *tensors);
  const int64_t per_expert = 3 * int64_t{2048} * 4096;
  EXPECT_EQ(p.routed_experts, 43 * 8 * per_expert);  // 42 MoE layers + the MTP layer
  int64_t total = 0;
  for (const GeneratedTensor& t : *tensors) total += shape_numel(t.shape);
  EXPECT_EQ(p.total, total);
  // Active: everything but the embedding, the MTP layer and 0 of 8 experts (top-8 of 8 = all).
  EXPECT_EQ(p.active, p.total - p.mtp - int64_t{154880} * 4096);
  g.experts = 32;
  tensors = synthetic_tensors(g, 1);
  ASSERT_TRUE(tensors.has_value());
  const SyntheticParams q = count_synthetic_params(g, *tensors);
  // Only the expert count changed: the same top-8 experts run per token; the routers of the 42
  // main MoE layers have 24 more rows (and bias entries).
  EXPECT_EQ(q.active - p.active, 42 * 24 * (4096 + 1));
  EXPECT_EQ(q.total - p.total, 43 * 24 * per_expert + 43 * 24 * (4096 + 1));  // experts + router rows + bias
  std::printf("full geometry: %.2fB params (32 experts), %.2fB active per token\n", q.total / 1e9, q.active / 1e9);
}

TEST(SyntheticPlan, ShardsAreFilledGreedilyUpToTheTarget) {
  SyntheticGeometry g = preset("full");
  for (int experts : {8, 32}) {
    g.experts = experts;
    Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(g, 1);
    ASSERT_TRUE(tensors.has_value());
    const uint64_t target = uint64_t{5} << 30;
    const ShardPlan plan = plan_shards(*tensors, target, {{"format", "pt"}});
    uint64_t data = 0, params_bytes = 0;
    std::set<size_t> placed;
    for (size_t k = 0; k < plan.shards.size(); ++k) {
      const ShardPlan::Shard& s = plan.shards[k];
      ASSERT_FALSE(s.entries.empty());
      EXPECT_TRUE(s.data_bytes <= target || s.entries.size() == 1) << s.file;
      if (k + 1 < plan.shards.size()) {
        // The next shard's first tensor in spec order did not fit here.
        size_t next_first = SIZE_MAX;
        for (const ShardPlan::Entry& e : plan.shards[k + 1].entries) next_first = std::min(next_first, e.tensor);
        EXPECT_GT(s.data_bytes + (*tensors)[next_first].nbytes(), target) << s.file;
      }
      uint64_t offset = 0;
      for (const ShardPlan::Entry& e : s.entries) {
        EXPECT_EQ(e.begin, offset);
        EXPECT_EQ(e.end - e.begin, (*tensors)[e.tensor].nbytes());
        EXPECT_TRUE(placed.insert(e.tensor).second);
        offset = e.end;
      }
      EXPECT_EQ(s.header.size() % 8, 0u);
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, plan.shards.size());
      EXPECT_EQ(s.file, name);
      data += s.data_bytes;
    }
    EXPECT_EQ(placed.size(), tensors->size());
    for (const GeneratedTensor& t : *tensors) params_bytes += shape_numel(t.shape) * dtype_size(t.recipe.dtype);
    EXPECT_EQ(plan.data_bytes, data);
    EXPECT_EQ(data, params_bytes);
    // BF16 nearly everywhere: about two bytes a parameter.
    const SyntheticParams p = count_synthetic_params(g, *tensors);
    EXPECT_GE(data, 2 * static_cast<uint64_t>(p.total));
    EXPECT_LT(data, 2 * static_cast<uint64_t>(p.total) + (uint64_t{1} << 20));
    std::printf("full geometry, %d experts: %zu tensors, %zu shards, %.2f GB, %.2fB params, %.2fB active\n", experts,
                tensors->size(), plan.shards.size(), plan.file_bytes / 1e9, p.total / 1e9, p.active / 1e9);
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

TEST(SyntheticTokenizer, FullVocabularyCoversEveryIdWithOfficialSpecialIds) {
  const fs::path dir = scratch("tok");
  fs::create_directories(dir);
  const SyntheticGeometry g = preset("full");
  ASSERT_TRUE(write_file_atomically(dir / "tokenizer.json", synthetic_tokenizer_json(g)).is_ok());
  ASSERT_TRUE(write_file_atomically(dir / "tokenizer_config.json", demo_tokenizer_config_json()).is_ok());
  ASSERT_TRUE(write_file_atomically(dir / "generation_config.json", synthetic_generation_config_json(g)).is_ok());
  auto tok = text::Tokenizer::from_directory(dir);
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 154856u);
  for (const SpecialToken& s : glm53_special_tokens()) {
    EXPECT_EQ((*tok)->token_to_id(s.text).value_or(-1), s.id) << s.text;
    EXPECT_TRUE((*tok)->is_special(static_cast<text::TokenId>(s.id))) << s.text;
  }
  EXPECT_EQ((*tok)->eos_token_ids(), (std::vector<text::TokenId>{154820, 154827, 154829}));
  // Every id below the added tokens decodes to non-empty text; the fillers after the demo BPE to
  // distinct words that encode back to their own id.
  const text::TokenId base = static_cast<text::TokenId>(demo_bpe_model().vocab.size());
  std::set<std::string> seen;
  for (text::TokenId id = 0; id < 154820; ++id) {
    const std::vector<text::TokenId> one = {id};
    const std::string s = (*tok)->decode(one);
    ASSERT_FALSE(s.empty()) << id;
    if (id < base) continue;
    EXPECT_TRUE(seen.insert(s).second) << "id " << id << " decodes like another: '" << s << "'";
    if (id % 997 == 0) {
      EXPECT_EQ((*tok)->encode(s), one) << s;
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(154820 - base));
  const std::vector<text::TokenId> ids = (*tok)->encode("[gMASK]<sop><|user|>Hello<|assistant|><think></think>");
  ASSERT_GE(ids.size(), 7u);
  EXPECT_EQ(std::vector<text::TokenId>(ids.begin(), ids.begin() + 3), (std::vector<text::TokenId>{154822, 154824, 154827}));
  EXPECT_EQ(std::vector<text::TokenId>(ids.end() - 3, ids.end()), (std::vector<text::TokenId>{154828, 154841, 154842}));
  const std::string s = "Grüße, 世界! 🚀 x=42;\n\tdone <|user|>";
  EXPECT_EQ((*tok)->decode((*tok)->encode(s)), s);
  fs::remove_all(dir);
}

TEST(SyntheticTokenizer, FillerWordsAreDistinctPronounceableWords) {
  std::set<std::string> words;
  for (uint64_t i = 0; i < 200000; i += 7) {
    const std::string w = synthetic_filler_word(i);
    ASSERT_GE(w.size(), 7u);
    EXPECT_EQ(w[0], ' ');
    for (size_t k = 1; k < w.size(); ++k) EXPECT_TRUE(std::islower(static_cast<unsigned char>(w[k]))) << w;
    EXPECT_TRUE(words.insert(w).second) << w;
  }
}

// ---------------------------------------------------------------------------------------------
// A written scaled-down checkpoint

class SyntheticTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(scratch("tiny"));
    std::vector<ShardWriteProgress> reports;
    SyntheticCheckpointOptions o = tiny_options();
    o.progress = [&](const ShardWriteProgress& p) { reports.push_back(p); };
    Expected<SyntheticSummary> s = write_synthetic_checkpoint(*dir_, o);
    ASSERT_TRUE(s.has_value()) << s.status().to_string();
    summary_ = new SyntheticSummary(*s);
    std::printf("tiny synthetic checkpoint: %zu tensors, %zu shards, %.2f MB in %.3f s\n", s->tensors, s->shards,
                s->bytes / 1e6, s->seconds);
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports.back().bytes_done, reports.back().bytes_total);
    EXPECT_EQ(reports.back().shards_done, s->shards);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete summary_;
  }
  static Glm5Config config() {
    Expected<Glm5Config> c = load_glm5_config(dir_->string());
    EXPECT_TRUE(c.has_value()) << c.status().to_string();
    return c.has_value() ? *c : Glm5Config{};
  }
  static inline fs::path* dir_ = nullptr;
  static inline SyntheticSummary* summary_ = nullptr;
};

TEST_F(SyntheticTiny, FolderHoldsShardsIndexAndOfficialFiles) {
  EXPECT_GE(summary_->shards, 3u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(*dir_)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>(summary_->files.begin(), summary_->files.end()));  // no leftovers
  char first[64];
  std::snprintf(first, sizeof(first), "model-00001-of-%05zu.safetensors", summary_->shards);
  EXPECT_TRUE(names.count(first)) << first;
  const fs::path official = fs::path(TF_TEST_DATA_DIR) / "glm53";
  EXPECT_EQ(read_file(*dir_ / "chat_template.jinja"), read_file(official / "chat_template.jinja"));
  EXPECT_EQ(read_file(*dir_ / "tokenizer_config.json"), read_file(official / "tokenizer_config.json"));
  uint64_t bytes = 0;
  for (const std::string& f : summary_->files) bytes += fs::file_size(*dir_ / f);
  EXPECT_EQ(bytes, summary_->bytes);
  // The index lists every tensor once, in the shard that holds it, with the data total.
  const json index = json::parse(read_file(*dir_ / "model.safetensors.index.json"));
  auto ckpt = Checkpoint::open(dir_->string());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  EXPECT_EQ(index["weight_map"].size(), (*ckpt)->names().size());
  EXPECT_EQ(index["weight_map"].size(), summary_->tensors);
  uint64_t data = 0;
  for (const std::string& n : (*ckpt)->names()) {
    EXPECT_EQ((*ckpt)->file_of(n), (*dir_ / index["weight_map"][n].get<std::string>()).string()) << n;
    const TensorEntry* e = (*ckpt)->find(n);
    data += e->data_end - e->data_begin;
    // Aligned for its dtype inside the data section (F32 first in each shard).
    EXPECT_EQ(e->data_begin % dtype_size(e->dtype), 0u) << n;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), data);
}

TEST_F(SyntheticTiny, CheckpointValidatesWithTheRecipeValues) {
  const Glm5Config c = config();
  EXPECT_EQ(c.text.n_routed_experts, 8);
  EXPECT_EQ(c.text.hidden_size, 128);
  auto ws = open_weight_source(dir_->string(), c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  std::vector<Status> problems;
  EXPECT_TRUE(validate_checkpoint(**ws, c, &problems).is_ok()) << (problems.empty() ? "" : problems[0].to_string());
  auto ckpt = Checkpoint::open(dir_->string());
  ASSERT_TRUE(ckpt.has_value());
  Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(preset("tiny"), kDefaultSyntheticSeed);
  ASSERT_TRUE(tensors.has_value());
  // The bytes on disk are the recipes' bytes, tensor by tensor.
  for (const GeneratedTensor& t : *tensors) {
    Expected<Tensor> on_disk = (*ckpt)->tensor(t.name);
    ASSERT_TRUE(on_disk.has_value()) << t.name;
    ASSERT_EQ(on_disk->dtype(), t.recipe.dtype) << t.name;
    ASSERT_EQ(on_disk->shape(), t.shape) << t.name;
    std::vector<char> expected(t.nbytes());
    fill_demo_elements(t.recipe, 0, shape_numel(t.shape), expected.data());
    ASSERT_EQ(std::memcmp(on_disk->raw(), expected.data(), expected.size()), 0) << t.name;
  }
}

TEST_F(SyntheticTiny, ModelLoadsAndDecodesFiniteVariedTokens) {
  const Glm5Config c = config();
  auto ws = open_weight_source(dir_->string(), c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto ops = make_cpu_ops();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(c, **ws, *ops, *comm);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  EXPECT_TRUE((*model)->has_mtp());
  auto tok = text::Tokenizer::from_directory(*dir_);
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  const std::vector<text::TokenId> ids =
      (*tok)->encode("[gMASK]<sop><|user|>Write a short poem about the sea, please.<|assistant|><think>");
  auto seq = (*model)->new_sequence();
  StepEntry prefill{seq.get(), std::span<const int32_t>(ids.data(), ids.size()), true};
  auto r = (*model)->step({&prefill, 1});
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  const std::vector<float> all = (*r)[0].logits.to_vector();
  ASSERT_TRUE(std::all_of(all.begin(), all.end(), [](float x) { return std::isfinite(x); }));
  const int64_t vocab = c.text.vocab_size, tokens = static_cast<int64_t>((*tok)->vocab_size());
  std::vector<int32_t> out;
  std::vector<float> last(all.end() - vocab, all.end());
  for (int i = 0; i < 24; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.begin() + tokens) - last.begin());
    out.push_back(next);
    StepEntry d{seq.get(), std::span<const int32_t>(&next, 1), false};
    auto rd = (*model)->step({&d, 1});
    ASSERT_TRUE(rd.has_value()) << rd.status().to_string();
    last = (*rd)[0].logits.to_vector();
    ASSERT_TRUE(std::all_of(last.begin(), last.end(), [](float x) { return std::isfinite(x); })) << "step " << i;
  }
  const std::set<int32_t> distinct(out.begin(), out.end());
  EXPECT_GE(distinct.size(), 4u);
  std::printf("tiny greedy text: %s\n", json((*tok)->decode(out)).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

TEST_F(SyntheticTiny, EngineServesIt) {
  engine::EngineOptions o;
  o.model_dir = dir_->string();
  o.parallel = 2;
  o.context = 512;
  o.kv = "bf16";
  o.memory_reserve_gib = 0;
  auto e = engine::Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  auto prompt = (*e)->tokenize("[gMASK]<sop><|user|>Hello!<|assistant|><think>", false);
  ASSERT_TRUE(prompt.has_value());
  engine::GenerationRequest g;
  g.request_id = "synth";
  g.prompt_tokens = *prompt;
  g.sampling.max_tokens = 16;
  g.sampling.temperature = 1.0;
  g.sampling.ignore_eos = true;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, error = false;
  int64_t completion = 0;
  std::string text;
  ASSERT_TRUE((*e)->submit(std::move(g), [&](engine::GenerationEvent ev) {
                   std::lock_guard<std::mutex> lock(mu);
                   if (ev.kind == engine::GenerationEvent::Kind::kError) error = done = true;
                   if (ev.kind == engine::GenerationEvent::Kind::kFinish) {
                     completion = ev.completion_tokens;
                     done = true;
                   }
                   text += ev.reasoning + ev.content;
                   cv.notify_all();
                 }).is_ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  EXPECT_FALSE(error);
  EXPECT_EQ(completion, 16);
  EXPECT_FALSE(text.empty());
  std::printf("engine reply: %s\n", json(text).dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

// ---------------------------------------------------------------------------------------------
// The full depth (45 layers + MTP, the release's layer pattern) at small widths stays finite
// and keeps positions apart: activations neither blow up nor collapse through the stack.
TEST(SyntheticDepth, FortyFiveLayersStayFiniteAndDistinct) {
  SyntheticCheckpointOptions o = tiny_options();
  o.geometry.num_layers = 45;
  o.geometry.hidden_size = 64;
  o.shard_bytes = uint64_t{1} << 30;
  const fs::path dir = scratch("deep");
  Expected<SyntheticSummary> s = write_synthetic_checkpoint(dir, o);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->shards, 1u);
  Expected<Glm5Config> c = load_glm5_config(dir.string());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  auto ws = open_weight_source(dir.string(), *c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto ops = make_cpu_ops();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(*c, **ws, *ops, *comm);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<int32_t>((i * 131 + 7) % 1900));
  auto seq = (*model)->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(ids.data(), ids.size()), true};
  auto r = (*model)->step({&e, 1});
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  const Tensor& logits = (*r)[0].logits;
  const int64_t v = logits.size(1);
  const std::vector<float> all = logits.to_vector();
  ASSERT_TRUE(std::all_of(all.begin(), all.end(), [](float x) { return std::isfinite(x); }));
  // Logits spread like a unit-RMS hidden state through a 1/sqrt(H) head: std near 1 per row.
  std::set<int64_t> argmaxes;
  for (int64_t row = 0; row < logits.size(0); ++row) {
    const float* p = all.data() + row * v;
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < v; ++k) {
      sum += p[k];
      sq += static_cast<double>(p[k]) * p[k];
    }
    const double sd = std::sqrt(sq / v - (sum / v) * (sum / v));
    EXPECT_GT(sd, 0.3) << "row " << row;
    EXPECT_LT(sd, 3.0) << "row " << row;
    argmaxes.insert(std::max_element(p, p + v) - p);
  }
  EXPECT_GE(argmaxes.size(), 10u) << "positions collapsed to the same prediction";
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Determinism and refusals

TEST(SyntheticDeterminism, SameSeedSameBytesWhateverTheThreads) {
  SyntheticCheckpointOptions a = tiny_options(), b = tiny_options(), c = tiny_options();
  a.threads = 1;
  b.threads = 3;
  c.seed = a.seed + 1;
  const fs::path da = scratch("det_a"), db = scratch("det_b"), dc = scratch("det_c");
  Expected<SyntheticSummary> sa = write_synthetic_checkpoint(da, a);
  Expected<SyntheticSummary> sb = write_synthetic_checkpoint(db, b);
  Expected<SyntheticSummary> sc = write_synthetic_checkpoint(dc, c);
  ASSERT_TRUE(sa.has_value() && sb.has_value() && sc.has_value());
  ASSERT_EQ(sa->files, sb->files);
  ASSERT_EQ(sa->files, sc->files);
  size_t differ = 0;
  for (const std::string& f : sa->files) {
    const std::string x = read_file(da / f);
    EXPECT_TRUE(x == read_file(db / f)) << f << " differs between 1 and 3 threads";
    if (x != read_file(dc / f)) ++differ;
  }
  EXPECT_EQ(differ, sa->shards);  // only the weights depend on the seed
  // Every random tensor differs with the seed; the constant ones (norms, biases) do not.
  auto ca = Checkpoint::open(da.string()), cc = Checkpoint::open(dc.string());
  ASSERT_TRUE(ca.has_value() && cc.has_value());
  Expected<std::vector<GeneratedTensor>> tensors = synthetic_tensors(a.geometry, a.seed);
  ASSERT_TRUE(tensors.has_value());
  for (const GeneratedTensor& t : *tensors) {
    Expected<Tensor> x = (*ca)->tensor(t.name), y = (*cc)->tensor(t.name);
    ASSERT_TRUE(x.has_value() && y.has_value()) << t.name;
    const bool same = std::memcmp(x->raw(), y->raw(), t.nbytes()) == 0;
    const bool random = t.recipe.init == DemoInit::kNormal || t.recipe.init == DemoInit::kALog ||
                        t.recipe.init == DemoInit::kDtBias;
    EXPECT_EQ(same, !random) << t.name;
  }
  for (const fs::path& d : {da, db, dc}) fs::remove_all(d);
}

TEST(SyntheticRefusals, BadGeometryAndFoldersSayWhy) {
  SyntheticCheckpointOptions o = tiny_options();
  o.geometry.experts = 1;  // below top-k 2
  const fs::path dir = scratch("refuse");
  Expected<SyntheticSummary> s = write_synthetic_checkpoint(dir, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("--experts 1 is below --top-k 2"), std::string::npos) << s.status().message();
  EXPECT_FALSE(fs::exists(dir)) << "nothing is created for a refused geometry";
  SyntheticGeometry full = preset("full");
  full.experts = 4;
  EXPECT_NE(validate_synthetic_geometry(full).message().find("--top-k 8"), std::string::npos);

  struct Case {
    void (*edit)(SyntheticGeometry&);
    const char* words;
  };
  const Case cases[] = {
      {[](SyntheticGeometry& g) { g.vocab_size = 1000; }, "--vocab 1000 is too small"},
      {[](SyntheticGeometry& g) { g.hidden_size = 0; }, "--hidden must be in [1,"},
      {[](SyntheticGeometry& g) { g.mtp_layers = 2; }, "--mtp-layers must be in [0, 1]"},
      {[](SyntheticGeometry& g) { g.first_dense = 9; }, "--first-dense must be in [0, 8]"},
      {[](SyntheticGeometry& g) { g.kv_lora_rank = -3; }, "--kv-lora-rank"},
      {[](SyntheticGeometry& g) { g.experts_per_token = 0; }, "--top-k must be in [1,"},
  };
  for (const Case& k : cases) {
    SyntheticGeometry g = preset("tiny");
    k.edit(g);
    const Status st = validate_synthetic_geometry(g);
    EXPECT_NE(st.message().find(k.words), std::string::npos) << k.words << " / " << st.message();
  }
  EXPECT_NE(synthetic_geometry_preset("huge").status().message().find("known: full, tiny"), std::string::npos);
  o = tiny_options();
  o.shard_bytes = 0;
  EXPECT_FALSE(write_synthetic_checkpoint(dir, o).has_value());

  // --out names a file.
  fs::create_directories(dir);
  const fs::path file = dir / "plain-file";
  std::ofstream(file) << "x";
  s = write_synthetic_checkpoint(file, tiny_options());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("is not a folder"), std::string::npos) << s.status().message();
  // A folder that cannot be created (below a file).
  s = write_synthetic_checkpoint(file / "sub", tiny_options());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("cannot create the output folder"), std::string::npos) << s.status().message();
  // A non-empty folder without --overwrite.
  s = write_synthetic_checkpoint(dir, tiny_options());
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().message().find("is not empty"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("--overwrite"), std::string::npos) << s.status().message();
  fs::remove_all(dir);
}

TEST(SyntheticRefusals, OverwriteReplacesAPreviousCheckpointAndKeepsOtherFiles) {
  const fs::path dir = scratch("overwrite");
  SyntheticCheckpointOptions o = tiny_options();
  ASSERT_TRUE(write_synthetic_checkpoint(dir, o).has_value());
  // A shard of a bigger earlier run and a user's file.
  std::ofstream(dir / "model-00099-of-00099.safetensors") << "stale";
  std::ofstream(dir / "notes.txt") << "mine";
  o.overwrite = true;
  o.shard_bytes = uint64_t{1} << 30;  // now one shard
  Expected<SyntheticSummary> s = write_synthetic_checkpoint(dir, o);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_EQ(s->shards, 1u);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  std::set<std::string> expected(s->files.begin(), s->files.end());
  expected.insert("notes.txt");
  EXPECT_EQ(names, expected);
  auto ckpt = Checkpoint::open(dir.string());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  EXPECT_EQ((*ckpt)->names().size(), s->tensors);
  fs::remove_all(dir);
}

TEST(SyntheticRefusals, NotEnoughDiskSpaceIsReportedBeforeWriting) {
  // A 4M x 4M dense MLP: 96 TiB, more than any disk.
  SyntheticCheckpointOptions o = tiny_options();
  o.geometry.num_layers = 1;
  o.geometry.first_dense = 1;
  o.geometry.hidden_size = int64_t{1} << 22;
  o.geometry.intermediate_size = int64_t{1} << 22;
  const fs::path dir = scratch("space");
  const auto t0 = std::chrono::steady_clock::now();
  Expected<SyntheticSummary> s = write_synthetic_checkpoint(dir, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.status().message().find("GB but only"), std::string::npos) << s.status().message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // Nothing but the (empty) folder was made.
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tf
