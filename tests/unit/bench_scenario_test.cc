// Offline bench scenarios (src/bench/bench_scenario.h): names, load shapes, the
// engine size they need, and the roofline each one carries.
#include <gtest/gtest.h>

#include "bench/bench_scenario.h"

namespace tf::bench {
namespace {

RooflineModel small_model() {
  RooflineModel m;
  m.hidden = 256;
  m.vocab = 1000;
  m.kda_layers = 3;
  m.mla_layers = 1;
  m.indexer_layers = 1;
  m.dense_layers = 1;
  m.moe_layers = 3;
  m.kda_heads = 4;
  m.kda_head_dim = 64;
  m.kda_conv_kernel = 4;
  m.mla_heads = 4;
  m.q_lora_rank = 128;
  m.kv_lora_rank = 64;
  m.qk_nope_head_dim = 64;
  m.v_head_dim = 64;
  m.index_heads = 4;
  m.index_head_dim = 32;
  m.index_kpool = 4;
  m.index_topk = 16;
  m.intermediate = 512;
  m.moe_intermediate = 64;
  m.shared_experts = 1;
  m.routed_experts = 16;
  m.experts_per_token = 4;
  return m;
}

TEST(BenchScenario, GpuSetInOrder) {
  auto s = parse_scenarios("gpu", 64);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  ASSERT_EQ(s->size(), 6u);
  const char* names[] = {"decode-1", "decode-4", "decode-16", "decode-64", "prefill-8k", "prefill-128k"};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ((*s)[i].name, names[i]);
  const BenchScenario& d1 = (*s)[0];
  EXPECT_EQ(d1.kind, BenchScenario::Kind::kDecode);
  EXPECT_EQ(d1.concurrency, 1);
  EXPECT_EQ(d1.requests, 3);
  EXPECT_EQ(d1.prompt_tokens, kDecodeScenarioPrompt);
  EXPECT_EQ(d1.output_tokens, 64);
  const BenchScenario& d64 = (*s)[3];
  EXPECT_EQ(d64.concurrency, 64);
  EXPECT_EQ(d64.requests, 64);  // one wave at batch 64
  const BenchScenario& p8 = (*s)[4];
  EXPECT_EQ(p8.kind, BenchScenario::Kind::kPrefill);
  EXPECT_EQ(p8.prompt_tokens, 8192);
  EXPECT_EQ(p8.output_tokens, 1);
  EXPECT_EQ(p8.requests, 2);
  const BenchScenario& p128 = (*s)[5];
  EXPECT_EQ(p128.prompt_tokens, 131072);
  EXPECT_EQ(p128.requests, 1);
  EXPECT_EQ(p128.warmup, 0);
  EXPECT_EQ(max_concurrency(*s), 64);
  EXPECT_EQ(max_window(*s), 131073);
}

TEST(BenchScenario, ListsAndSpellings) {
  auto s = parse_scenarios(" decode-2 ,prefill-1000,, prefill-2K", 8);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0].concurrency, 2);
  EXPECT_EQ((*s)[1].prompt_tokens, 1000);
  EXPECT_EQ((*s)[2].prompt_tokens, 2048);
  EXPECT_EQ(max_window(*s), 2049);
}

// decode-N@P: decode at a long context, one wave past 32K tokens (the prefill is the run's cost).
TEST(BenchScenario, DecodeAtAContext) {
  auto s = parse_scenarios("decode-1@128k,decode-4@8000", 256);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  const BenchScenario& d = (*s)[0];
  EXPECT_EQ(d.kind, BenchScenario::Kind::kDecode);
  EXPECT_EQ(d.name, "decode-1@128k");
  EXPECT_EQ(d.prompt_tokens, 131072);
  EXPECT_EQ(d.output_tokens, 256);
  EXPECT_EQ(d.requests, 1);
  EXPECT_EQ(d.warmup, 0);
  const BenchScenario& d4 = (*s)[1];
  EXPECT_EQ(d4.concurrency, 4);
  EXPECT_EQ(d4.prompt_tokens, 8000);
  EXPECT_EQ(d4.requests, 4);
  EXPECT_EQ(d4.warmup, 1);
  EXPECT_EQ(max_window(*s), 131072 + 256);
  for (const char* bad : {"decode-1@", "decode-1@0", "decode-@8k", "decode-1@x", "decode-1@99999999k"})
    EXPECT_FALSE(parse_scenarios(bad, 8).has_value()) << bad;
}

TEST(BenchScenario, ReuseSendsOnePromptThreeTimes) {
  auto s = parse_scenarios("reuse-64k", 8);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  const BenchScenario& r = (*s)[0];
  EXPECT_EQ(r.kind, BenchScenario::Kind::kPrefill);
  EXPECT_EQ(r.prompt_tokens, 65536);
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.warmup, 0);
  EXPECT_TRUE(r.repeat_prompt);
  const BenchSpec spec = scenario_spec(BenchSpec{}, r);
  EXPECT_TRUE(spec.repeat_prompt);
  EXPECT_EQ(spec.concurrency, 1);
  EXPECT_FALSE(scenario_spec(BenchSpec{}, (*parse_scenarios("prefill-64k", 8))[0]).repeat_prompt);
  EXPECT_FALSE(parse_scenarios("reuse-", 8).has_value());
}

TEST(BenchScenario, SeveralLongContextStreamsArePrimed) {
  auto s = parse_scenarios("decode-4@64k,decode-1@64k,decode-4", 8);
  ASSERT_TRUE(s.has_value()) << s.status().to_string();
  EXPECT_TRUE((*s)[0].prime_prompts);
  EXPECT_TRUE(scenario_spec(BenchSpec{}, (*s)[0]).prime_prompts);
  EXPECT_FALSE((*s)[1].prime_prompts);  // one stream: TTFT stays a whole prefill's
  EXPECT_FALSE((*s)[2].prime_prompts);
  EXPECT_FALSE(scenario_spec(BenchSpec{}, (*s)[2]).prime_prompts);
}

TEST(BenchScenario, RefusalsNameTheEntry) {
  for (const char* bad : {"decode-0", "decode-x", "decode-", "prefill-k", "prefill--1", "warmup", "decode-99999",
                          "prefill-99999999k"}) {
    auto s = parse_scenarios(std::string("decode-1,") + bad, 16);
    ASSERT_FALSE(s.has_value()) << bad;
    EXPECT_NE(s.status().message().find(std::string("'") + bad + "'"), std::string::npos) << s.status().message();
  }
  EXPECT_FALSE(parse_scenarios(" , ", 16).has_value());
  // Decode tok/s needs two tokens.
  EXPECT_NE(parse_scenarios("decode-1", 1).status().message().find("--output-tokens"), std::string::npos);
}

TEST(BenchScenario, SpecTakesTheLoadShape) {
  BenchSpec base;
  base.temperature = 0.5;
  base.ignore_eos = false;
  base.timeout_s = 42;
  auto s = parse_scenarios("decode-16", 32);
  ASSERT_TRUE(s.has_value());
  BenchSpec spec = scenario_spec(base, (*s)[0]);
  EXPECT_EQ(spec.concurrency, 16);
  EXPECT_EQ(spec.requests, 16);
  EXPECT_EQ(spec.warmup, 1);
  EXPECT_EQ(spec.prompt_tokens, kDecodeScenarioPrompt);
  EXPECT_EQ(spec.output_tokens, 32);
  EXPECT_TRUE(spec.ignore_eos);
  EXPECT_EQ(spec.temperature, 0.5);
  EXPECT_EQ(spec.timeout_s, 42);
  EXPECT_TRUE(validate(spec).is_ok());
}

TEST(BenchScenario, RooflinePerKind) {
  const RooflineModel m = small_model();
  ASSERT_TRUE(m.validate().is_ok()) << m.validate().to_string();
  RooflineHardware hw{1000, 100, "flags"};
  auto d = roofline_dtypes("bf16", "fp8");
  ASSERT_TRUE(d.has_value());
  auto s = parse_scenarios("decode-4,prefill-4k", 64);
  ASSERT_TRUE(s.has_value());
  // Decode at 4 streams, mean context 32 + 64/2.
  nlohmann::json j = scenario_roofline(m, *d, hw, (*s)[0]);
  EXPECT_EQ(j["scenario"], "decode-4");
  EXPECT_EQ(j["detail"]["batch"], 4);
  EXPECT_EQ(j["detail"]["context"], 64);
  EXPECT_EQ(j["decode_tok_s"], decode_roofline(m, *d, hw, 4, 64)["decode_tok_s"]);
  EXPECT_FALSE(j.contains("prefill_tok_s"));
  j = scenario_roofline(m, *d, hw, (*s)[1]);
  EXPECT_EQ(j["scenario"], "prefill-4k");
  EXPECT_EQ(j["prefill_tok_s"], prefill_roofline(m, *d, hw, 4096)["prefill_tok_s"]);
  EXPECT_FALSE(j.contains("decode_tok_s"));
  // A plain run carries both, and both summaries.
  BenchSpec spec;
  spec.concurrency = 2;
  spec.prompt_tokens = 100;
  spec.output_tokens = 20;
  j = run_roofline(m, *d, hw, spec);
  EXPECT_EQ(j["decode_tok_s"], decode_roofline(m, *d, hw, 2, 110)["decode_tok_s"]);
  EXPECT_EQ(j["prefill_tok_s"], prefill_roofline(m, *d, hw, 100)["prefill_tok_s"]);
  EXPECT_NE(j["summary"].get<std::string>().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace tf::bench
