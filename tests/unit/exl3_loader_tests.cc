// EXL3 loading: quantization_config, per-projection loading, and every refusal
// (each message must name the tensor or field and say why), on checkpoints
// written to a temp folder from synthetic tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/dtype.h"
#include "exl3_test_util.h"
#include "model/exl3_synthetic.h"
#include "model/exl3_weights.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using test::Tensors;
using test::TempDir;
using test::write_and_open;

Tensor i32_scalar(uint32_t v) {
  Tensor t = Tensor::empty({}, DType::kI32);
  std::memcpy(t.raw(), &v, 4);
  return t;
}

// Replaces (or with a null tensor removes) one tensor of a list.
Tensors edit(Tensors t, const std::string& name, const Tensor& value) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    if (it->first == name) {
      if (value.is_null()) t.erase(it);
      else it->second = value;
      return t;
    }
  }
  if (!value.is_null()) t.emplace_back(name, value);
  return t;
}

const std::string kP = "model.language_model.layers.3.mlp.experts.7.gate_proj";

Tensors linear_tensors(int64_t in, int64_t out, Exl3Codebook cb = Exl3Codebook::kMcg, int bits = 4) {
  Exl3SyntheticOptions o;
  o.codebook = cb;
  o.bits = bits;
  o.seed = 11;
  return exl3_linear_tensors(kP, make_synthetic_exl3_linear(in, out, o));
}

// Loads kP as in x out and expects a failure whose message holds every `needles`.
void expect_refused(const Tensors& tensors, int64_t in, int64_t out, std::vector<std::string> needles,
                    std::optional<Exl3Codebook> expected = std::nullopt) {
  TempDir dir;
  auto ckpt = write_and_open(dir, tensors);
  ASSERT_NE(ckpt, nullptr);
  auto w = load_exl3_linear(*ckpt, kP, in, out, expected);
  ASSERT_FALSE(w.has_value()) << "loaded although it should be refused";
  for (const std::string& n : needles) {
    EXPECT_NE(w.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << w.status().to_string();
  }
}

// ---- quantization_config ------------------------------------------------------

QuantizationConfig quant(const std::string& json) {
  QuantizationConfig q;
  q.raw = nlohmann::json::parse(json);
  q.method = q.raw.value("quant_method", "");
  return q;
}

TEST(Exl3QuantConfig, TheServedCheckpointParses) {
  // config.json of the EXL3 TR3 4-bpw checkpoint (glm53-checkpoint-facts.md §5.1).
  auto c = parse_exl3_quant_config(
      quant(R"({"bits": 4, "codebook": "mcg", "head_bits": 16, "non_routed_dtype_policy": "official_source_native",
                "quant_method": "exl3", "scope": "glm53_routed_experts_only", "serving_reader_qualified": false,
                "version": "0.0.43"})"),
      "config.json");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->bits, 4.0);
  EXPECT_EQ(c->codebook, Exl3Codebook::kMcg);
  EXPECT_EQ(c->head_bits, 16);
  EXPECT_EQ(c->scope, "glm53_routed_experts_only");
  EXPECT_EQ(c->version, "0.0.43");
  // Fractional average bits and an absent codebook are fine.
  auto d = parse_exl3_quant_config(
      quant(R"({"quant_method": "exl3", "bits": 4.05, "head_bits": 16, "scope": "glm53_routed_experts_only"})"), "c");
  ASSERT_TRUE(d.has_value()) << d.status().to_string();
  EXPECT_FALSE(d->codebook.has_value());
}

// exllamav3's own conversions quantize every linear (the head at head_bits, 6 when
// absent) and write no scope: served, the non-expert linears dequantized at load.
TEST(Exl3QuantConfig, ExllamaV3ConversionsParse) {
  auto c = parse_exl3_quant_config(
      quant(R"({"quant_method": "exl3", "version": "0.0.43", "bits": 4.05, "calibration": {"rows": 250, "cols": 2048},
                "out_scales": "auto", "codebook": "mcg"})"),
      "config.json");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->head_bits, 6);
  EXPECT_EQ(c->scope, "");
  for (const char* json : {R"({"quant_method": "exl3", "bits": 4, "head_bits": 8, "scope": "all_linears"})",
                           R"({"quant_method": "exl3", "bits": 2.5, "head_bits": 16})"}) {
    auto d = parse_exl3_quant_config(quant(json), "config.json");
    EXPECT_TRUE(d.has_value()) << json << ": " << d.status().to_string();
  }
}

TEST(Exl3QuantConfig, RefusalsNameTheField) {
  const std::string ok_tail = R"("head_bits": 16, "scope": "glm53_routed_experts_only")";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"quant_method": "fp8", "weight_block_size": [128, 128]})", "quant_method"},
      {R"({"quant_method": "exl3", )" + ok_tail + "}", "bits"},
      {R"({"quant_method": "exl3", "bits": 9, )" + ok_tail + "}", "bits"},
      {R"({"quant_method": "exl3", "bits": "4", )" + ok_tail + "}", "bits"},
      {R"({"quant_method": "exl3", "bits": 4, "codebook": "mcg2", )" + ok_tail + "}", "codebook"},
      {R"({"quant_method": "exl3", "bits": 4, "head_bits": 12})", "head_bits"},
      {R"({"quant_method": "exl3", "bits": 4, "head_bits": 0})", "head_bits"},
      {R"({"quant_method": "exl3", "bits": 4, "head_bits": "6"})", "head_bits"},
      {R"({"quant_method": "exl3", "bits": 4, "head_bits": 16, "scope": 7})", "scope"},
  };
  for (const auto& [json, field] : bad) {
    auto c = parse_exl3_quant_config(quant(json), "ckpt/config.json");
    ASSERT_FALSE(c.has_value()) << json;
    EXPECT_NE(c.status().message().find("ckpt/config.json: quantization_config." + field), std::string::npos)
        << c.status().to_string();
  }
}

// ---- one projection -----------------------------------------------------------

TEST(Exl3Load, RoundTripsEveryCodebook) {
  for (Exl3Codebook cb : {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    for (int bits : {1, 4, 8}) {
      const Tensors t = linear_tensors(256, 384, cb, bits);
      TempDir dir;
      auto ckpt = write_and_open(dir, t);
      ASSERT_NE(ckpt, nullptr);
      auto w = load_exl3_linear(*ckpt, kP, 256, 384, cb);
      ASSERT_TRUE(w.has_value()) << w.status().to_string();
      EXPECT_EQ(w->codebook, cb);
      EXPECT_EQ(w->bits, bits);
      EXPECT_EQ(w->in_features(), 256);
      EXPECT_EQ(w->out_features(), 384);
      EXPECT_TRUE(test::bytes_equal(w->trellis, t[0].second));
      EXPECT_TRUE(test::bytes_equal(w->suh, t[1].second));
      EXPECT_TRUE(test::bytes_equal(w->svh, t[2].second));
      EXPECT_TRUE(w->bias.is_null());
    }
  }
}

TEST(Exl3Load, PaddedDimsAreMultiplesOf128) {
  // A 200 -> 300 projection is stored as 256 x 384.
  TempDir dir;
  auto ckpt = write_and_open(dir, linear_tensors(200, 300));
  ASSERT_NE(ckpt, nullptr);
  auto w = load_exl3_linear(*ckpt, kP, 200, 300);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->trellis.shape(), (Shape{16, 24, 64}));
  // The same tensors do not fit a layer whose padded dims differ.
  auto v = load_exl3_linear(*ckpt, kP, 300, 300);
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.status().message().find(kP + ".trellis"), std::string::npos) << v.status().to_string();
  EXPECT_NE(v.status().message().find("[24, 24, 64]"), std::string::npos) << v.status().to_string();
}

TEST(Exl3Load, BiasAndLegacySignVectors) {
  Exl3SyntheticOptions o;
  o.bias = true;
  Tensors t = exl3_linear_tensors(kP, make_synthetic_exl3_linear(128, 128, o));
  // Legacy packed signs instead of suh/svh: element 16w + j = bit j of word w, set = -1.
  Tensor su = Tensor::zeros({8}, DType::kI16), sv = Tensor::zeros({8}, DType::kI16);
  su.data<int16_t>()[0] = 0x0005;                          // elements 0 and 2 negative
  sv.data<int16_t>()[7] = static_cast<int16_t>(0x8000);   // element 127 negative
  t = edit(edit(t, kP + ".suh", Tensor()), kP + ".svh", Tensor());
  t = edit(edit(t, kP + ".su", su), kP + ".sv", sv);
  TempDir dir;
  auto ckpt = write_and_open(dir, t);
  ASSERT_NE(ckpt, nullptr);
  auto w = load_exl3_linear(*ckpt, kP, 128, 128);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  ASSERT_FALSE(w->bias.is_null());
  const std::vector<float> suh = w->suh.to_vector(), svh = w->svh.to_vector();
  EXPECT_EQ(suh[0], -1.0f);
  EXPECT_EQ(suh[1], 1.0f);
  EXPECT_EQ(suh[2], -1.0f);
  EXPECT_EQ(suh[127], 1.0f);
  EXPECT_EQ(svh[126], 1.0f);
  EXPECT_EQ(svh[127], -1.0f);
}

TEST(Exl3Load, RefusesAMissingOrMistypedTrellis) {
  const Tensors t = linear_tensors(128, 128);
  expect_refused(edit(t, kP + ".trellis", Tensor()), 128, 128, {kP + ".trellis", "not found"});
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({8, 8, 32}, DType::kI32)), 128, 128,
                 {kP + ".trellis", "expected i16"});
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({64, 64}, DType::kI16)), 128, 128,
                 {kP + ".trellis", "expected i16 [in/16, out/16, 16*K]"});
}

TEST(Exl3Load, RefusesTruncatedTrellis) {
  const Tensors t = linear_tensors(128, 128);
  // 63 words per tile: the tile bitstreams are cut short.
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({8, 8, 63}, DType::kI16)), 128, 128,
                 {kP + ".trellis", "not a multiple of 16", "truncated"});
  // Fewer tile rows than the layer needs.
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({7, 8, 64}, DType::kI16)), 128, 128,
                 {kP + ".trellis", "[7, 8, 64]", "needs [8, 8, 64]"});
}

TEST(Exl3Load, RefusesTruncatedFile) {
  TempDir dir;
  const Tensors t = linear_tensors(128, 128);
  ASSERT_TRUE(write_safetensors(dir.str() + "/model.safetensors", t).is_ok());
  const std::string path = dir.str() + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 4000);  // the last tensors lose their bytes
  auto c = Checkpoint::open(dir.str());
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.status().message().find("truncated"), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find(kP), std::string::npos) << c.status().to_string();
}

TEST(Exl3Load, RefusesKOutOfRange) {
  const Tensors t = linear_tensors(128, 128);
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({8, 8, 144}, DType::kI16)), 128, 128,
                 {kP + ".trellis", "K = 9", "1 to 8"});
  expect_refused(edit(t, kP + ".trellis", Tensor::zeros({8, 8, 0}, DType::kI16)), 128, 128,
                 {kP + ".trellis", "K = 0"});
}

TEST(Exl3Load, RefusesMisShapedScales) {
  const Tensors t = linear_tensors(128, 256);
  expect_refused(edit(t, kP + ".suh", Tensor::zeros({256}, DType::kF16)), 128, 256, {kP + ".suh", "f16[128]"});
  expect_refused(edit(t, kP + ".suh", Tensor::zeros({128}, DType::kF32)), 128, 256, {kP + ".suh", "f16[128]"});
  expect_refused(edit(t, kP + ".svh", Tensor()), 128, 256, {kP + ".svh", "has no"});
  expect_refused(edit(t, kP + ".svh", Tensor::zeros({2, 128}, DType::kF16)), 128, 256, {kP + ".svh", "f16[256]"});
  expect_refused(edit(t, kP + ".bias", Tensor::zeros({128}, DType::kF16)), 128, 256, {kP + ".bias", "f16[256]"});
  expect_refused(edit(t, kP + ".scale", Tensor::zeros({1}, DType::kF16)), 128, 256, {kP + ".scale"});
}

// One inf / NaN in a scale vector or the bias makes every output NaN: refused at load, naming it.
TEST(Exl3Load, RefusesNonFiniteScalesAndBias) {
  const Tensors t = linear_tensors(128, 256);
  auto with = [](const Tensor& v, int64_t i, uint16_t bits) {  // a copy of v with f16 element i set to bits
    Tensor c = Tensor::empty(v.shape(), v.dtype());
    c.copy_from(v);
    c.data<uint16_t>()[i] = bits;
    return c;
  };
  auto find = [&](const std::string& name) {
    for (const auto& [n, v] : t)
      if (n == name) return v;
    return Tensor();
  };
  const Tensor suh = find(kP + ".suh"), svh = find(kP + ".svh");
  ASSERT_FALSE(suh.is_null());
  ASSERT_FALSE(svh.is_null());
  expect_refused(edit(t, kP + ".suh", with(suh, 5, 0x7C00)), 128, 256, {kP + ".suh", "non-finite", "[5]"});
  expect_refused(edit(t, kP + ".svh", with(svh, 255, 0xFE00)), 128, 256,
                 {kP + ".svh", "non-finite", "[255]"});
  expect_refused(edit(t, kP + ".bias", with(Tensor::zeros({256}, DType::kF16), 0, 0xFC00)), 128, 256,
                 {kP + ".bias", "non-finite", "[0]"});
  // The largest finite f16 is fine.
  TempDir dir;
  auto ckpt = write_and_open(dir, edit(t, kP + ".suh", with(suh, 5, 0x7BFF)));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_TRUE(load_exl3_linear(*ckpt, kP, 128, 256, std::nullopt).has_value());
}

TEST(Exl3Load, RefusesBadCodebookMarkers) {
  const Tensors t = linear_tensors(128, 128, Exl3Codebook::kMcg);
  // Both markers.
  expect_refused(edit(t, kP + ".mul1", i32_scalar(kExl3Mul1Multiplier)), 128, 128, {kP, "both codebook markers"});
  // A marker that is not an i32 scalar.
  Tensor i16 = Tensor::zeros({}, DType::kI16);
  expect_refused(edit(t, kP + ".mcg", i16), 128, 128, {kP + ".mcg", "i32 scalar"});
  expect_refused(edit(t, kP + ".mcg", Tensor::zeros({2}, DType::kI32)), 128, 128, {kP + ".mcg", "i32 scalar"});
  // A multiplier other than the locked one.
  expect_refused(edit(t, kP + ".mcg", i32_scalar(0x12345679u)), 128, 128, {kP + ".mcg", "0x12345679", "0xCBAC1FED"});
  expect_refused(edit(edit(t, kP + ".mcg", Tensor()), kP + ".mul1", i32_scalar(kExl3McgMultiplier)), 128, 128,
                 {kP + ".mul1", "0x83DCD12D"});
  // A marker that disagrees with quantization_config.codebook.
  expect_refused(t, 128, 128, {kP, "codebook mcg", "quantization_config.codebook is mul1"}, Exl3Codebook::kMul1);
  // No marker means 3INST, which a config saying mcg does not allow.
  expect_refused(edit(t, kP + ".mcg", Tensor()), 128, 128, {kP, "codebook 3inst"}, Exl3Codebook::kMcg);
}

TEST(Exl3Load, MarkerOfShapeOneIsAccepted) {
  // exllamav3 writes a 0-d marker; a 1-element vector carries the same information.
  Tensor m = Tensor::empty({1}, DType::kI32);
  const uint32_t v = kExl3Mul1Multiplier;
  std::memcpy(m.raw(), &v, 4);
  TempDir dir;
  auto ckpt = write_and_open(dir, edit(edit(linear_tensors(128, 128), kP + ".mcg", Tensor()), kP + ".mul1", m));
  ASSERT_NE(ckpt, nullptr);
  auto w = load_exl3_linear(*ckpt, kP, 128, 128);
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->codebook, Exl3Codebook::kMul1);
}

// ---- the structural check every backend runs ---------------------------------------

TEST(Exl3Check, AcceptsAWellFormedWeightAndNamesWhatIsWrong) {
  const Exl3Weight good = make_synthetic_exl3_linear(256, 128, Exl3SyntheticOptions{});
  EXPECT_TRUE(check_exl3_weight(good, "w").is_ok());
  struct Case {
    const char* what;
    std::function<void(Exl3Weight&)> edit;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"no trellis", [](Exl3Weight& w) { w.trellis = Tensor(); }, "w.trellis: missing"},
      {"i32 trellis", [](Exl3Weight& w) { w.trellis = Tensor::zeros({16, 8, 64}, DType::kI32); }, "w.trellis"},
      {"strided trellis", [](Exl3Weight& w) { w.trellis = Tensor::zeros({16, 16, 64}, DType::kI16).slice(1, 0, 8); },
       "w.trellis"},
      {"truncated", [](Exl3Weight& w) { w.trellis = Tensor::zeros({16, 8, 60}, DType::kI16); }, "multiple of 16"},
      {"K=9", [](Exl3Weight& w) { w.trellis = Tensor::zeros({16, 8, 144}, DType::kI16); w.bits = 9; }, "1 to 8"},
      {"bits disagree", [](Exl3Weight& w) { w.bits = 3; }, "K=4"},
      {"k not /128", [](Exl3Weight& w) { w.trellis = Tensor::zeros({12, 8, 64}, DType::kI16); }, "multiples of 128"},
      {"n not /128", [](Exl3Weight& w) { w.trellis = Tensor::zeros({16, 4, 64}, DType::kI16); }, "multiples of 128"},
      {"suh length", [](Exl3Weight& w) { w.suh = Tensor::zeros({128}, DType::kF16); }, "w.suh"},
      {"suh f32", [](Exl3Weight& w) { w.suh = Tensor::zeros({256}, DType::kF32); }, "w.suh"},
      {"svh length", [](Exl3Weight& w) { w.svh = Tensor::zeros({256}, DType::kF16); }, "w.svh"},
      {"bias length", [](Exl3Weight& w) { w.bias = Tensor::zeros({256}, DType::kF16); }, "w.bias"},
      {"scales elsewhere",
       [](Exl3Weight& w) { w.svh = Tensor::view_of(w.svh.raw(), {128}, DType::kF16, Device::cuda(0)); }, "w: trellis on"},
  };
  for (const Case& c : cases) {
    Exl3Weight w = good;
    c.edit(w);
    Status s = check_exl3_weight(w, "w");
    ASSERT_FALSE(s.is_ok()) << c.what;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << c.what << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace tf
