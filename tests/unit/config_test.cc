#include "model/config.h"

#include <gtest/gtest.h>

namespace tf {
namespace {

const std::string kData = TF_TEST_DATA_DIR;

TEST(Glm5Config, OfficialReleaseConfig) {
  auto c = load_glm5_config(kData + "/glm53/config.json");
  ASSERT_TRUE(c) << c.status().to_string();
  const auto& t = c->text;
  EXPECT_TRUE(c->nested);
  EXPECT_EQ(t.num_hidden_layers, 45);
  EXPECT_EQ(t.hidden_size, 4096);
  EXPECT_EQ(t.n_routed_experts, 288);
  EXPECT_EQ(t.index_kpool, 4);
  EXPECT_EQ(t.qk_head_dim, 256);
  EXPECT_EQ(t.num_nextn_predict_layers, 1);
  EXPECT_EQ(t.count_layers(AttentionKind::kLinear), 34);
  EXPECT_EQ(t.count_layers(AttentionKind::kSparseMla), 11);
  EXPECT_EQ(t.layer_types[3], AttentionKind::kSparseMla);
  EXPECT_EQ(t.mlp_layer_types[2], MlpKind::kDense);
  EXPECT_EQ(t.mlp_layer_types[3], MlpKind::kSparse);
  EXPECT_EQ(t.eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_EQ(t.linear_num_heads, 64);
  EXPECT_EQ(t.linear_lower_bound, -5.0);
  EXPECT_TRUE(c->vision.present);
  EXPECT_EQ(c->vision.out_hidden_size, 4096);
  EXPECT_EQ(c->vision.image_size, 448);
  EXPECT_EQ(c->vision.rope_theta, 10000.0);  // no rope key in the release: transformers' default
  EXPECT_EQ(c->quantization.method, "fp8");
  EXPECT_EQ(c->quantization.weight_block_size, (std::vector<int>{128, 128}));
  EXPECT_EQ(c->image_token_id, 154854);
}

TEST(Glm5Config, TransformersWrittenFixtures) {
  auto nested = load_glm5_config(kData + "/model/tiny-nested");
  ASSERT_TRUE(nested) << nested.status().to_string();
  EXPECT_TRUE(nested->nested);
  EXPECT_EQ(nested->text.indexer_types[4], IndexerKind::kShared);
  EXPECT_EQ(nested->text.n_group, 3);
  auto flat = load_glm5_config(kData + "/model/tiny-flat");
  ASSERT_TRUE(flat) << flat.status().to_string();
  EXPECT_FALSE(flat->nested);
  EXPECT_FALSE(flat->vision.present);
  EXPECT_EQ(flat->text.num_hidden_layers, 4);
  EXPECT_EQ(flat->text.mlp_layer_types[1], MlpKind::kSparse);
}

TEST(Glm5Config, DefaultsAndDerivedFieldsLikeTransformers) {
  auto c = parse_glm5_config(R"({"model_type": "glm5_next", "num_hidden_layers": 9})");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_FALSE(c->nested);
  const auto& t = c->text;
  EXPECT_EQ(t.vocab_size, 154880);
  EXPECT_EQ(t.index_kpool, 16);  // transformers' default (the release sets 4)
  ASSERT_EQ(t.layer_types.size(), 9u);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(t.layer_types[i], i % 4 == 3 ? AttentionKind::kSparseMla : AttentionKind::kLinear) << i;
    EXPECT_EQ(t.mlp_layer_types[i], i < 3 ? MlpKind::kDense : MlpKind::kSparse) << i;
  }
  // freq 1, offset 2: every layer full.
  for (auto k : t.indexer_types) EXPECT_EQ(k, IndexerKind::kFull);
}

TEST(Glm5Config, VisionRopeTheta) {
  auto parse = [](const std::string& vision) {
    return parse_glm5_config(R"({"model_type": "glm5_next", "text_config": {}, "vision_config": )" + vision + "}");
  };
  auto c = parse(R"({"rope_parameters": {"rope_type": "axial", "rope_theta": 500000.0}})");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->vision.rope_theta, 500000.0);
  c = parse(R"({"rope_theta": 20000})");  // the legacy top-level spelling
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->vision.rope_theta, 20000.0);
  c = parse("{}");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->vision.rope_theta, 10000.0);
  c = parse(R"({"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})");
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("vision_config.rope_parameters.rope_type"), std::string::npos)
      << c.status().to_string();
  c = parse(R"({"rope_parameters": {"rope_theta": "big"}})");
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("vision_config.rope_parameters.rope_theta"), std::string::npos)
      << c.status().to_string();
  EXPECT_FALSE(parse(R"({"rope_parameters": {"rope_theta": 0}})"));
}

TEST(Glm5Config, IndexerScheduleFromFreqOffsetAndPattern) {
  auto c = parse_glm5_config(R"({"model_type": "glm5_next", "num_hidden_layers": 8,
      "layer_types": ["linear_attention","full_attention","deepseek_sparse_attention","deepseek_sparse_attention",
                      "deepseek_sparse_attention","linear_attention","linear_attention","deepseek_sparse_attention"],
      "index_topk_freq": 2, "index_skip_topk_offset": 2})");
  ASSERT_TRUE(c) << c.status().to_string();
  // full iff max(i - 1, 0) % 2 == 0 -> i = 0, 1, 3, 5, 7
  std::vector<IndexerKind> want = {IndexerKind::kFull, IndexerKind::kFull, IndexerKind::kShared, IndexerKind::kFull,
                                   IndexerKind::kShared, IndexerKind::kFull, IndexerKind::kShared, IndexerKind::kFull};
  EXPECT_EQ(c->text.indexer_types, want);
  EXPECT_EQ(c->text.layer_types[1], AttentionKind::kSparseMla);  // "full_attention" alias

  auto p = parse_glm5_config(R"({"model_type": "glm5_next", "num_hidden_layers": 4,
      "layer_types": ["linear_attention","linear_attention","deepseek_sparse_attention","deepseek_sparse_attention"],
      "index_topk_pattern": "FFFS"})");
  ASSERT_TRUE(p) << p.status().to_string();
  EXPECT_EQ(p->text.indexer_types[3], IndexerKind::kShared);
}

TEST(Glm5Config, LinearAttnConfigOverrides) {
  auto c = parse_glm5_config(R"({"model_type": "glm5_next", "num_hidden_layers": 4, "linear_lower_bound": null,
      "linear_attn_config": {"head_dim": 64, "num_heads": 8, "short_conv_kernel_size": 3}})");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->text.linear_head_dim, 64);
  EXPECT_EQ(c->text.linear_num_heads, 8);
  EXPECT_EQ(c->text.linear_conv_kernel_dim, 3);
  EXPECT_EQ(c->text.linear_lower_bound, -5.0);  // safe_gate defaults on
}

TEST(Glm5Config, QuantizationConfigsWeServe) {
  for (const char* q :
       {R"({"quant_method": "fp8", "weight_block_size": [64, 128]})", R"({"quant_method": "exl3"})",
        R"({"quant_method": null, "weight_block_size": null})", R"({})"}) {
    auto c =
        parse_glm5_config(std::string(R"({"model_type": "glm5_next", "quantization_config": )") + q + "}");
    ASSERT_TRUE(c) << q << ": " << c.status().to_string();
  }
  auto c = parse_glm5_config(R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8",
      "weight_block_size": [64, 128]}})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->quantization.weight_block_size, (std::vector<int>{64, 128}));
}

TEST(Glm5Config, ErrorsNameTheField) {
  struct Case { const char* json; const char* expect; };
  const Case cases[] = {
      {R"({"model_type": "llama"})", "model_type 'llama' is not supported"},
      {R"({"hidden_size": 4})", "missing 'model_type'"},
      {R"({"model_type": "glm5_next", "text_config": {"hidden_size": "big"}})",
       "text_config.hidden_size: expected an integer"},
      {R"({"model_type": "glm5_next", "num_hidden_layers": 2, "layer_types": ["linear_attention"]})",
       "layer_types: has 1 entries for 2 layers"},
      {R"({"model_type": "glm5_next", "num_hidden_layers": 1, "mlp_layer_types": ["moe"]})",
       "mlp_layer_types[0]: unknown value 'moe'"},
      {R"({"model_type": "glm5_next", "index_topk": 10, "index_kpool": 4})",
       "index_topk: 10 is not divisible"},
      {R"({"model_type": "glm5_next", "qk_rope_head_dim": 64})", "qk_rope_head_dim"},
      {R"({"model_type": "glm5_next", "num_key_value_heads": 8})", "num_key_value_heads"},
      {R"({"model_type": "glm5_next", "num_hidden_layers": 2, "layer_types": ["linear_attention", "deepseek_sparse_attention"],
           "indexer_types": ["full", "shared"]})",
       "indexer_types[1]"},
      {R"(not json)", "not valid JSON"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "gptq", "bits": 4}})",
       "quantization_config.quant_method 'gptq' is not supported"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": 8}})",
       "quantization_config.quant_method"},
      {R"({"model_type": "glm5_next", "quantization_config": "fp8"})",
       "quantization_config: expected an object"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})",
       "quantization_config.weight_block_size: expected [rows, cols]"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8", "weight_block_size": "128"}})",
       "quantization_config.weight_block_size"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]}})",
       "quantization_config.weight_block_size"},
      {R"({"model_type": "glm5_next", "quantization_config": {"quant_method": "fp8", "weight_block_size": [1.5, 2]}})",
       "quantization_config.weight_block_size"},
  };
  for (const auto& c : cases) {
    auto r = parse_glm5_config(c.json, "m/config.json");
    ASSERT_FALSE(r) << c.json;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("m/config.json"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tf
