// `tensorfold tui`'s figures: summarize_health over two /health snapshots (rates from the
// counters' differences) and the text it renders.
#include <gtest/gtest.h>

#include "bench/health_view.h"

namespace tf::bench {
namespace {

using Json = nlohmann::json;

Json snapshot(int64_t completion, int64_t prompt, int64_t cached) {
  return {{"ok", true},
          {"status", "ok"},
          {"model", "GLM-5.3-Flash"},
          {"requests_running", 2},
          {"requests_waiting", 1},
          {"completion_tokens_total", completion},
          {"prompt_tokens_total", prompt},
          {"cached_tokens_total", cached},
          {"streams", {{"decoding", 2}, {"prefilling", 0}, {"max", 4}}},
          {"context_length", 1048576},
          {"pool_tokens", 1000},
          {"pool_free_tokens", 250},
          {"kept_prompts", 3},
          {"kept_mix", {{"prompt_end", 2}, {"system_block", 1}, {"shared_prefix", 0}, {"restored", 0}}},
          {"chats_continued", 5},
          {"iteration_s", 0.0125},
          {"iteration_s_mean", 0.01},
          {"speculation", {{"drafted_tokens_total", 40}, {"accepted_tokens_total", 30}}},
          {"device_memory", {{"in_use_bytes", int64_t{3} << 30}}},
          {"loops", {{"reasoning_closed_total", 1}}}};
}

TEST(HealthView, RatesFromTwoSnapshotsAndFiguresFromTheLatest) {
  const Json before = snapshot(100, 5000, 1000), after = snapshot(400, 9000, 3000);
  const HealthView v = summarize_health(&before, after, 2.0);
  ASSERT_TRUE(v.decode_tps && v.prefill_tps);
  EXPECT_DOUBLE_EQ(*v.decode_tps, 150.0);    // 300 tokens in 2 s
  EXPECT_DOUBLE_EQ(*v.prefill_tps, 1000.0);  // (9000-3000) - (5000-1000) computed in 2 s
  EXPECT_DOUBLE_EQ(v.pool_used, 0.75);
  EXPECT_DOUBLE_EQ(v.cached_share, 3000.0 / 9000.0);
  EXPECT_EQ(v.kept_prompt_end, 2);
  EXPECT_EQ(v.kept_system_block, 1);
  EXPECT_EQ(v.chats_continued, 5);
  ASSERT_TRUE(v.draft_acceptance);
  EXPECT_DOUBLE_EQ(*v.draft_acceptance, 0.75);
  EXPECT_DOUBLE_EQ(v.iteration_ms, 12.5);
  EXPECT_DOUBLE_EQ(v.device_gib, 3.0);
  const std::string text = render_health_view(v, 200);
  EXPECT_NE(text.find("tensorfold  GLM-5.3-Flash  [ok]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("decode       150.0 tok/s"), std::string::npos) << text;
  EXPECT_NE(text.find("75.0 %  of 1000 tokens, window 1048576"), std::string::npos) << text;
  EXPECT_NE(text.find("3 prompts: 2 prompt ends, 1 system blocks, 0 shared prefixes, 0 restored"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("drafts   75.0 % kept"), std::string::npos) << text;
}

TEST(HealthView, OneSnapshotHasNoRatesAndMissingFieldsReadAsZero) {
  const Json old_server = {{"ok", true}, {"completion_tokens_total", 10}};
  const HealthView v = summarize_health(nullptr, old_server, 1.0);
  EXPECT_FALSE(v.decode_tps);
  EXPECT_FALSE(v.draft_acceptance);
  EXPECT_EQ(v.status, "ok");
  EXPECT_EQ(v.kept_prompts, 0);
  const std::string text = render_health_view(v, 40);
  EXPECT_NE(text.find("decode           - tok/s"), std::string::npos) << text;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    EXPECT_LE(end - start, 40u) << "lines fit the width";
  // Not an object at all: no crash, nothing known.
  EXPECT_EQ(summarize_health(nullptr, Json::array(), 1.0).status, "?");
}

}  // namespace
}  // namespace tf::bench
