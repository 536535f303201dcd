// The roofline's byte and FLOP counts (src/bench/roofline.h) on the demo config
// and the real GLM-5.3-Flash config. Expected values are worked out by hand from
// the tensor shapes (comments give each term) and, for the real config, agree with
// the parameter totals of ../shared/spec/glm5-flash.md §1.6 (313,326,811,966 text
// parameters, 16,742,337,342 active with one embedding row). The sums are also
// checked against glm5_weight_spec(), the loader's own tensor list.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "apps/bench_roofline_config.h"
#include "bench/roofline.h"
#include "engine/demo_checkpoint.h"
#include "model/config.h"
#include "model/glm5_weight_spec.h"

namespace tf::bench {
namespace {

const std::string kData = TF_TEST_DATA_DIR;

RooflineModel real_model() {
  auto cfg = load_glm5_config(kData + "/glm53/config.json");
  EXPECT_TRUE(cfg.has_value()) << cfg.status().to_string();
  return apps::roofline_model(cfg->text);
}

Glm5Config demo_config() {
  auto cfg = parse_glm5_config(demo_config_json(), "demo config.json");
  EXPECT_TRUE(cfg.has_value()) << cfg.status().to_string();
  return *cfg;
}

RooflineDtypes dtypes(const std::string& weight, const std::string& kv) {
  auto d = roofline_dtypes(weight, kv);
  EXPECT_TRUE(d.has_value()) << d.status().to_string();
  return *d;
}

// What the engine keeps in f32 whatever the weight dtype (glm5_weights.h), by tensor name.
bool kept_f32(const std::string& name) {
  for (const char* part : {"norm", "conv1d", "dt_bias", "A_log", "hc_", "mlp.gate.", "compress_ape"})
    if (name.find(part) != std::string::npos) return true;
  return false;
}

// The matrices DENSE=q4/fp8 re-quantizes at load (glm5_weights.cc's qmat calls), by name:
// KDA and MLA projections (not the gate bottlenecks, b_proj, kv_b or the indexer),
// dense MLPs and shared experts (not routed experts or the router).
bool dense_requantized(const std::string& name) {
  if (name.find(".mlp.experts.") != std::string::npos || name.find("indexer") != std::string::npos) return false;
  if (name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0) return false;  // biases stay f32
  for (const char* part : {".q_proj.", ".k_proj.", ".v_proj.", ".o_proj.", ".q_a_proj.", ".q_b_proj.",
                           ".kv_a_proj_with_mqa.", ".gate_proj.", ".up_proj.", ".down_proj."})
    if (name.find(part) != std::string::npos) return true;
  return false;
}

TEST(Roofline, RealConfigLayerSchedule) {
  RooflineModel m = real_model();
  ASSERT_TRUE(m.validate().is_ok());
  EXPECT_EQ(m.kda_layers, 34);
  EXPECT_EQ(m.mla_layers, 11);
  EXPECT_EQ(m.indexer_layers, 11);
  EXPECT_EQ(m.dense_layers, 3);
  EXPECT_EQ(m.moe_layers, 42);
  EXPECT_EQ(m.routed_experts, 288);
  EXPECT_EQ(m.experts_per_token, 8);
  EXPECT_EQ(m.index_kpool, 4);
  EXPECT_EQ(m.index_topk, 2048);
}

TEST(Roofline, RealConfigParameterCounts) {
  const ModelWeights w = model_weights(real_model());
  // Per KDA layer: q,k,v 3*8192*4096 + f_a 128*4096 + f_b 8192*128 + b 64*4096 + g_a 128*4096
  // + g_b 8192*128 + o 4096*8192 = 137,625,600 in the weight dtype; conv 3*8192*4 + dt_bias 8192
  // + A_log 64 + o_norm 128 = 106,688 in f32.
  // Per MLA layer: q_a 1536*4096 + q_b 16384*1536 + kv_a 512*4096 + kv_b 32768*512 + o 4096*16384
  // = 117,440,512; norms 1536 + 512 = 2,048 f32. Per indexer: wq_b 4096*1536 + wk 128*4096
  // + weights_proj 32*4096 + compress gate 128*4096 = 7,471,104; k_norm 256 + ape 4*128 = 768 f32.
  // Dense MLP 3*12288*4096 = 150,994,944. Per MoE layer: shared 3*2048*4096 = 25,165,824; router
  // 288*4096 + 288 = 1,179,936 f32. Per layer: mHC 2*(24*16384 + 24 + 3) + norms 2*4096 = 794,678 f32.
  // lm_head 154880*4096 = 634,388,480; final norm 4096 f32.
  const int64_t matrix = 34 * int64_t{137625600} + 11 * int64_t{117440512} + 11 * int64_t{7471104} +
                         3 * int64_t{150994944} + 42 * int64_t{25165824} + int64_t{634388480};
  const int64_t f32 = 34 * int64_t{106688} + 11 * int64_t{2048} + 11 * int64_t{768} + 42 * int64_t{1179936} +
                      45 * int64_t{794678} + 4096;
  EXPECT_EQ(matrix, 8197636096);
  EXPECT_EQ(w.non_routed.matrix, matrix);
  EXPECT_EQ(w.non_routed.kept_f32, f32);
  EXPECT_EQ(w.per_expert, 3 * 2048 * 4096);
  EXPECT_EQ(w.routed_total, int64_t{25165824} * 288 * 42);
  EXPECT_EQ(w.embedding, int64_t{634388480});
  // glm5-flash.md §1.6: text total and active (the latter counts one embedding row, 4,096).
  EXPECT_EQ(w.total_params(), 313326811966);
  EXPECT_EQ(w.active_params() + 4096, 16742337342);
}

TEST(Roofline, RealConfigDecodeBytes) {
  const RooflineModel m = real_model();
  const DecodeTraffic t = decode_traffic(m, dtypes("bf16", "fp8"), 1, 1000);
  // Non-routed: 8,197,636,096 bf16 elements + 88,980,286 f32 elements.
  EXPECT_DOUBLE_EQ(t.weights, 2.0 * 8197636096 + 4.0 * 88980286);
  // One token: its 8 experts in each of 42 layers, 25,165,824 bf16 elements each.
  EXPECT_NEAR(t.experts_per_moe_layer, 8.0, 1e-9);
  EXPECT_NEAR(t.routed_experts, 42.0 * 8 * 25165824 * 2, 1.0);
  // KDA state per layer: 64*128*128 + conv history 3*3*8192 = 1,122,304 f32, read and written, 34 layers.
  EXPECT_DOUBLE_EQ(t.kda_state, 34.0 * 1122304 * 4 * 2);
  // Latents: 11 layers x min(1000, 2048) x (512 fp8 + 4-byte scale).
  EXPECT_DOUBLE_EQ(t.latents, 11.0 * 1000 * 516);
  // Indexer: 11 layers x ceil(1000 / 4) pools x 128 f32.
  EXPECT_DOUBLE_EQ(t.indexer_keys, 11.0 * 250 * 128 * 4);
  EXPECT_NEAR(t.total(), 33974977752.0, 2.0);

  // Long context: latents cap at index_topk, indexer keys keep growing; f32 weights double the matrices.
  const DecodeTraffic l = decode_traffic(m, dtypes("f32", "bf16"), 4, 131072);
  EXPECT_DOUBLE_EQ(l.weights, 4.0 * 8197636096 + 4.0 * 88980286);
  EXPECT_DOUBLE_EQ(l.latents, 4.0 * 11 * 2048 * 1024);
  EXPECT_DOUBLE_EQ(l.indexer_keys, 4.0 * 11 * 32768 * 128 * 4);
  EXPECT_DOUBLE_EQ(l.kda_state, 4.0 * 34 * 1122304 * 4 * 2);
}

TEST(Roofline, DenseFormatAndExl3ExpertBytes) {
  const RooflineModel m = real_model();
  const ModelWeights w = model_weights(m);
  // DENSE re-quantizes per KDA layer q, k, v, o 4*8192*4096 = 134,217,728; per MLA layer
  // q_a 6,291,456 + q_b 25,165,824 + kv_a 2,097,152 + o 67,108,864 = 100,663,296; the
  // dense MLPs 150,994,944 each and the shared experts 25,165,824 per MoE layer.
  EXPECT_EQ(w.non_routed.quantized, 34 * int64_t{134217728} + 11 * int64_t{100663296} + 3 * int64_t{150994944} +
                                        42 * int64_t{25165824});
  EXPECT_EQ(w.non_routed.quantized, 7180648448);
  RooflineDtypes d = dtypes("bf16", "fp8");
  EXPECT_EQ(d.dense_name, "bf16");
  EXPECT_DOUBLE_EQ(d.dense, 2.0);
  ASSERT_TRUE(set_dense_format(d, "q4").is_ok());
  EXPECT_DOUBLE_EQ(d.dense, 4.25 / 8);  // 4-bit codes + an f16 scale per 64 weights
  EXPECT_EQ(d.dense_name, "q4");
  ASSERT_TRUE(set_exl3_experts(d, m, 4).is_ok());
  // K = 4: half a byte per weight + the f16 sign vectors (4096 + 2048 per 4096 x 2048 matrix).
  EXPECT_DOUBLE_EQ(d.expert, 0.5 + 2.0 * (4096 + 2048) / (4096.0 * 2048));
  const DecodeTraffic t = decode_traffic(m, d, 1, 1000);
  EXPECT_DOUBLE_EQ(t.weights,
                   2.0 * (8197636096 - 7180648448) + 4.25 / 8 * 7180648448 + 4.0 * 88980286);
  EXPECT_NEAR(t.routed_experts, 42.0 * 8 * 25165824 * d.expert, 1.0);
  // What a batch-1 step streams with EXL3 experts and q4 dense: 2.03 GB of bf16 matrices
  // (lm_head 1.27 of them), 3.81 GB q4, 0.36 GB f32 and 4.24 GB of experts (issue #8
  // estimated 8.5 GB; the f32 mHC/routers and the bf16 lm_head make the difference).
  EXPECT_NEAR((t.weights + t.routed_experts) / 1e9, 10.44, 0.01);
  nlohmann::json j = decode_roofline(m, d, RooflineHardware{4800, 790, "flags"}, 1, 1000);
  EXPECT_EQ(j["detail"]["dense_format"], "q4");
  EXPECT_EQ(j["detail"]["expert_format"], "exl3 4-bit");
  EXPECT_NE(j["summary"].get<std::string>().find("dense q4, experts exl3 4-bit"), std::string::npos);
  // LM_HEAD=q4: lm_head (154,880 x 4096) at 4.25 bits instead of bf16; dense / "" go back.
  EXPECT_EQ(d.head_name, "bf16");
  ASSERT_TRUE(set_head_format(d, "q4").is_ok());
  EXPECT_EQ(d.head_name, "q4");
  const double head = 154880.0 * 4096;
  EXPECT_NEAR(decode_traffic(m, d, 1, 1000).weights, t.weights - head * (2.0 - 4.25 / 8), 1.0);
  EXPECT_NE(decode_roofline(m, d, RooflineHardware{4800, 790, "flags"}, 1, 1000)["summary"].get<std::string>().find(
                "lm_head q4"),
            std::string::npos);
  ASSERT_TRUE(set_head_format(d, "fp8").is_ok());
  EXPECT_NEAR(decode_traffic(m, d, 1, 1000).weights, t.weights - head * (1.0 - 4.0 / 16384), 1.0);
  ASSERT_TRUE(set_head_format(d, "dense").is_ok());
  EXPECT_DOUBLE_EQ(decode_traffic(m, d, 1, 1000).weights, t.weights);
  EXPECT_EQ(d.head_name, "bf16");
  EXPECT_NE(set_head_format(d, "bf16").message().find("LM_HEAD"), std::string::npos);
  // fp8 dense: a byte + an f32 per 128x128 block; bf16 / f32 / "" keep the weight dtype.
  ASSERT_TRUE(set_dense_format(d, "fp8").is_ok());
  EXPECT_DOUBLE_EQ(d.dense, 1.0 + 4.0 / 16384);
  ASSERT_TRUE(set_dense_format(d, "bf16").is_ok());
  EXPECT_DOUBLE_EQ(d.dense, 2.0);
  EXPECT_EQ(d.dense_name, "bf16");
  ASSERT_TRUE(set_dense_format(d, "").is_ok());
  EXPECT_DOUBLE_EQ(d.dense, 2.0);
  EXPECT_NE(set_dense_format(d, "q3").message().find("DENSE"), std::string::npos);
  EXPECT_FALSE(set_exl3_experts(d, m, 0).is_ok());
  EXPECT_FALSE(set_exl3_experts(d, m, 9).is_ok());
  // The FP8 release's experts as stored: a byte + an f32 per 128x128 block.
  set_fp8_experts(d);
  EXPECT_DOUBLE_EQ(d.expert, 1.0 + 4.0 / 16384);
  EXPECT_NEAR(decode_traffic(m, d, 1, 1000).routed_experts, 42.0 * 8 * 25165824 * (1.0 + 4.0 / 16384), 1.0);
  EXPECT_EQ(decode_roofline(m, d, RooflineHardware{4800, 790, "flags"}, 1, 1000)["detail"]["expert_format"],
            "fp8 e4m3 (128x128 blocks)");
}

TEST(Roofline, ExpectedDistinctExperts) {
  // E * (1 - (1 - k/E)^B): 288 experts, top-8.
  EXPECT_NEAR(expected_distinct_experts(288, 8, 1), 8.0, 1e-9);
  EXPECT_NEAR(expected_distinct_experts(288, 8, 4), 30.6912, 1e-4);
  EXPECT_NEAR(expected_distinct_experts(288, 8, 16), 104.4978, 1e-4);
  EXPECT_NEAR(expected_distinct_experts(288, 8, 64), 240.5335, 1e-4);
  // Top-k = E: every expert at any batch (the synthetic 8-expert checkpoint).
  EXPECT_DOUBLE_EQ(expected_distinct_experts(8, 8, 1), 8.0);
  EXPECT_DOUBLE_EQ(expected_distinct_experts(8, 8, 64), 8.0);
  // 16 experts, top-4, 4 tokens: 16 * (1 - 0.75^4) = 10.9375.
  EXPECT_DOUBLE_EQ(expected_distinct_experts(16, 4, 4), 10.9375);
  EXPECT_EQ(expected_distinct_experts(16, 4, 0), 0.0);
}

TEST(Roofline, RealConfigFlops) {
  const RooflineModel m = real_model();
  // Attention at 1000 tokens: MLA 4*64*512*1000 x 11 + indexer 2*32*128*250 x 11 + KDA 6*64*128*128 x 34.
  const double attn = 11.0 * 4 * 64 * 512 * 1000 + 11.0 * 2 * 32 * 128 * 250 + 34.0 * 6 * 64 * 128 * 128;
  EXPECT_DOUBLE_EQ(attention_flops(m, 1000), attn);
  EXPECT_DOUBLE_EQ(attn, 1678229504.0);
  EXPECT_DOUBLE_EQ(decode_flops(m, 1, 1000), 2.0 * 16742333246 + attn);
  EXPECT_DOUBLE_EQ(decode_flops(m, 3, 1000), 3 * (2.0 * 16742333246 + attn));

  // Prefill of 8192 tokens: matmuls 2 x (active - lm_head) per token, lm_head once;
  // MLA sum over p of min(p, 2048) = 2048*2049/2 + 6144*2048 = 14,681,088;
  // indexer sum of ceil(p / 4) = 4 * 2048*2049/2 = 8,392,704.
  const double lm_head = 634388480.0;
  const double expect = 2.0 * (16742333246.0 - lm_head) * 8192 + 2.0 * lm_head + 11.0 * 4 * 64 * 512 * 14681088.0 +
                        11.0 * 2 * 32 * 128 * 8392704.0 + 34.0 * 6 * 64 * 128 * 128 * 8192;
  EXPECT_NEAR(prefill_flops(m, 8192), expect, expect * 1e-12);
  // One token: the decode step's count (context 1) equals the prefill of 1.
  EXPECT_NEAR(prefill_flops(m, 1), decode_flops(m, 1, 1), 1.0);
  // Odd lengths: the sums by brute force.
  for (int64_t p : {1, 3, 5, 2047, 2048, 2049, 4099}) {
    double mla = 0, idx = 0;
    for (int64_t i = 1; i <= p; ++i) {
      mla += static_cast<double>(std::min<int64_t>(i, 2048));
      idx += static_cast<double>((i + 3) / 4);
    }
    const double want = 2.0 * (16742333246.0 - lm_head) * p + 2.0 * lm_head + 11.0 * 4 * 64 * 512 * mla +
                        11.0 * 2 * 32 * 128 * idx + 34.0 * 6 * 64 * 128 * 128 * p;
    EXPECT_NEAR(prefill_flops(m, p), want, want * 1e-12) << p;
  }
}

TEST(Roofline, DemoConfigCounts) {
  const Glm5Config cfg = demo_config();
  const RooflineModel m = apps::roofline_model(cfg.text);
  ASSERT_TRUE(m.validate().is_ok());
  // 8 layers: MLA at 3 and 7, the first layer dense.
  EXPECT_EQ(m.kda_layers, 6);
  EXPECT_EQ(m.mla_layers, 2);
  EXPECT_EQ(m.indexer_layers, 2);
  EXPECT_EQ(m.dense_layers, 1);
  EXPECT_EQ(m.moe_layers, 7);
  const int64_t v = cfg.text.vocab_size;
  const ModelWeights w = model_weights(m);
  // Hidden 256. KDA (4 heads x 64): q,k,v 3*256*256 + f_a 64*256 + f_b 256*64 + b 4*256 + g_a 64*256
  // + g_b 256*64 + o 256*256 = 328,704; f32 conv 3*256*4 + dt_bias 256 + A_log 4 + o_norm 64 = 3,396.
  // MLA (4 heads, q_lora 128, kv_lora 64, nope 64, v 64): q_a 128*256 + q_b 256*128 + kv_a 64*256
  // + kv_b 512*64 + o 256*256 = 180,224; norms 192 f32. Indexer (4 x 32): wq_b 128*128 + wk 32*256
  // + weights_proj 4*256 + gate 32*256 = 33,792; k_norm 64 + ape 4*32 = 192 f32. Dense 3*512*256 =
  // 393,216. MoE: shared 3*64*256 = 49,152, router 16*256 + 16 f32. mHC + norms: 2*(24*1024 + 27)
  // + 512 = 49,718 f32 per layer. lm_head 256 x vocab, final norm 256.
  EXPECT_EQ(w.non_routed.matrix, 6 * 328704 + 2 * 180224 + 2 * 33792 + 393216 + 7 * 49152 + 256 * v);
  EXPECT_EQ(w.non_routed.kept_f32, 6 * 3396 + 2 * 192 + 2 * 192 + 7 * 4112 + 8 * 49718 + 256);
  EXPECT_EQ(w.per_expert, 49152);
  EXPECT_EQ(w.routed_total, 49152 * 16 * 7);

  // Decode, 4 streams at 100 tokens, bf16 weights, fp8 cache.
  const DecodeTraffic t = decode_traffic(m, dtypes("bf16", "fp8"), 4, 100);
  EXPECT_DOUBLE_EQ(t.weights, 2.0 * (3137536 + 256 * v) + 4.0 * 447928);
  EXPECT_DOUBLE_EQ(t.experts_per_moe_layer, 10.9375);        // 16 * (1 - (12/16)^4)
  EXPECT_DOUBLE_EQ(t.routed_experts, 7 * 10.9375 * 49152 * 2);  // = 7,526,400
  EXPECT_DOUBLE_EQ(t.routed_experts, 7526400.0);
  // KDA: 4*64*64 state + 3*3*256 conv history, f32, read + written, 6 layers, 4 streams.
  EXPECT_DOUBLE_EQ(t.kda_state, 4.0 * 6 * (16384 + 2304) * 4 * 2);
  // min(100, top-k 16) latents x (64 + 4) bytes x 2 layers x 4 streams; ceil(100/4) pools x 32 x 4 bytes.
  EXPECT_DOUBLE_EQ(t.latents, 4.0 * 2 * 16 * 68);
  EXPECT_DOUBLE_EQ(t.indexer_keys, 4.0 * 2 * 25 * 32 * 4);
}

// The counts must agree with the tensor list the loader checks a checkpoint against.
void expect_matches_weight_spec(const Glm5Config& cfg) {
  const RooflineModel m = apps::roofline_model(cfg.text);
  const ModelWeights w = model_weights(m);
  WeightSpecOptions o;
  o.include_mtp = false;
  o.include_vision = false;
  int64_t total = 0, routed = 0, f32 = 0, embed = 0, quantized = 0;
  for (const WeightSpecEntry& e : glm5_weight_spec(cfg, o)) {
    const int64_t n = shape_numel(e.shape);
    total += n;
    if (dense_requantized(e.name)) quantized += n;
    if (e.name.find(".mlp.experts.") != std::string::npos) {
      routed += n;
    } else if (e.name.find("embed_tokens") != std::string::npos) {
      embed += n;
    } else if (kept_f32(e.name)) {
      f32 += n;
    }
  }
  EXPECT_EQ(w.total_params(), total);
  EXPECT_EQ(w.routed_total, routed);
  EXPECT_EQ(w.embedding, embed);
  EXPECT_EQ(w.non_routed.kept_f32, f32);
  EXPECT_EQ(w.non_routed.quantized, quantized);
  // Tied: the logits still read the table as lm_head, so the decode step counts it.
  const int64_t lm_head = cfg.text.tie_word_embeddings ? embed : 0;
  EXPECT_EQ(w.non_routed.total(), total - routed - embed + lm_head);
}

TEST(Roofline, CountsMatchTheWeightSpec) {
  expect_matches_weight_spec(demo_config());
  auto real = load_glm5_config(kData + "/glm53/config.json");
  ASSERT_TRUE(real.has_value());
  expect_matches_weight_spec(*real);
  // Shared indexers and tied embeddings change the list; the counts follow.
  Glm5Config odd = demo_config();
  odd.text.indexer_types[7] = IndexerKind::kShared;
  odd.text.tie_word_embeddings = true;
  const RooflineModel m = apps::roofline_model(odd.text);
  EXPECT_EQ(m.indexer_layers, 1);
  expect_matches_weight_spec(odd);
}

TEST(Roofline, DecodeAndPrefillObjects) {
  const RooflineModel m = real_model();
  RooflineHardware hw;
  hw.hbm_gbps = 4800;
  hw.tc_tflops = 790;
  hw.source = "flags";
  ASSERT_TRUE(hw.validate().is_ok());
  const RooflineDtypes d = dtypes("bf16", "fp8");
  // Batch 1 is memory-bound: step = bytes / bandwidth.
  nlohmann::json j = decode_roofline(m, d, hw, 1, 1000);
  const double step = 33974977752.0 / 4.8e12;
  EXPECT_NEAR(j["decode_tok_s"].get<double>(), 1.0 / step, 1e-6);
  EXPECT_NEAR(j["aggregate_tok_s"].get<double>(), 1.0 / step, 1e-6);
  EXPECT_EQ(j["detail"]["bound"], "memory");
  EXPECT_EQ(j["detail"]["batch"], 1);
  EXPECT_NE(j["summary"].get<std::string>().find("memory-bound"), std::string::npos);
  // A slow tensor core makes the same step compute-bound: step = FLOPs / rate.
  RooflineHardware slow = hw;
  slow.tc_tflops = 1.0;
  j = decode_roofline(m, d, slow, 4, 1000);
  EXPECT_EQ(j["detail"]["bound"], "compute");
  EXPECT_NEAR(j["aggregate_tok_s"].get<double>(), 4.0 / (decode_flops(m, 4, 1000) / 1e12), 1e-9);
  EXPECT_NEAR(j["decode_tok_s"].get<double>() * 4, j["aggregate_tok_s"].get<double>(), 1e-9);

  // Prefill of 8K: compute-bound, tok/s = tokens / (FLOPs / rate).
  j = prefill_roofline(m, d, hw, 8192);
  EXPECT_EQ(j["detail"]["bound"], "compute");
  EXPECT_NEAR(j["prefill_tok_s"].get<double>(), 8192.0 / (prefill_flops(m, 8192) / 790e12), 1e-6);
  const double share = j["detail"]["attention_share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 0.5);
  // Longer prompts spend more per token on attention.
  EXPECT_GT(prefill_roofline(m, d, hw, 131072)["detail"]["attention_share"].get<double>(), share);
}

TEST(Roofline, Refusals) {
  EXPECT_FALSE(roofline_dtypes("int4", "fp8").has_value());
  EXPECT_NE(roofline_dtypes("bf16", "q8").status().message().find("KV dtype"), std::string::npos);
  EXPECT_DOUBLE_EQ(dtypes("fp8", "f32").matrix, 1.0 + 4.0 / 16384);
  EXPECT_DOUBLE_EQ(dtypes("fp8", "f32").latent_scale, 0.0);
  RooflineHardware hw;
  EXPECT_NE(hw.validate().message().find("--hbm-gbps"), std::string::npos);
  hw.hbm_gbps = 1;
  EXPECT_NE(hw.validate().message().find("--tc-tflops"), std::string::npos);
  RooflineModel m = real_model();
  m.experts_per_token = 300;
  EXPECT_NE(m.validate().message().find("experts per token"), std::string::npos);
  m = real_model();
  m.dense_layers = 0;
  EXPECT_NE(m.validate().message().find("MLP"), std::string::npos);
  m = real_model();
  m.index_kpool = 0;
  EXPECT_FALSE(m.validate().is_ok());
}

}  // namespace
}  // namespace tf::bench
