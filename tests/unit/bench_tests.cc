// tensorfold bench (src/bench): report math on hand-made records, SSE and chunk
// parsing, prompt synthesis, the offline runner over a scripted FakeEngine, and the
// HTTP load generator against the real HttpServer over the same fake.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "bench/bench_report.h"
#include "bench/completion_stream.h"
#include "bench/http_load_generator.h"
#include "bench/offline_runner.h"
#include "bench/prompt_synthesis.h"
#include "bench/sse_parser.h"
#include "bench_test_util.h"

namespace tf::bench::testing {
namespace {

using Json = nlohmann::json;

// ---- report math ----

TEST(BenchReport, PercentileInterpolatesBetweenRanks) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.9), 3.7);  // numpy: 3.7
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.9), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
  Distribution d = distribution({10, 20, 30, 40, 50});
  EXPECT_EQ(d.count, 5);
  EXPECT_DOUBLE_EQ(d.median, 30);
  EXPECT_DOUBLE_EQ(d.p90, 46);
  EXPECT_DOUBLE_EQ(d.mean, 30);
  EXPECT_DOUBLE_EQ(d.min, 10);
  EXPECT_DOUBLE_EQ(d.max, 50);
  EXPECT_EQ(distribution({}).count, 0);
}

RequestRecord ok_record(int index, double start, double first, double end, int64_t prompt, int64_t output) {
  RequestRecord r;
  r.index = index;
  r.ok = true;
  r.start_s = start;
  r.first_token_s = first;
  r.end_s = end;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.output_tokens_from_usage = true;
  r.finish_reason = "length";
  r.token_times_s = {first, end};
  return r;
}

RequestRecord failed_record(int index, const std::string& error) {
  RequestRecord r;
  r.index = index;
  r.error = error;
  r.http_status = 429;
  r.start_s = 0.5;
  r.end_s = 0.6;
  return r;
}

BenchRun hand_made_run() {
  BenchRun run;
  run.mode = "http";
  run.model = "m";
  run.wall_s = 4.0;
  run.records = {ok_record(0, 0.0, 0.5, 2.5, 1000, 101),  // TTFT .5, decode 100/2 = 50, prefill 2000
                 ok_record(1, 1.0, 1.25, 3.25, 1000, 41),  // TTFT .25, decode 40/2 = 20, prefill 4000
                 failed_record(2, "HTTP 429: busy"), failed_record(3, "HTTP 429: busy"),
                 ok_record(4, 2.0, 2.1, 2.1, 1000, 1)};     // TTFT .1, one token: no decode rate
  return run;
}

TEST(BenchReport, SummaryOfHandMadeRecords) {
  BenchSummary s = summarize(hand_made_run());
  EXPECT_EQ(s.requests, 5);
  EXPECT_EQ(s.succeeded, 3);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.prompt_tokens, 3000);
  EXPECT_EQ(s.output_tokens, 143);
  EXPECT_EQ(s.ttft_s.count, 3);
  EXPECT_DOUBLE_EQ(s.ttft_s.median, 0.25);
  EXPECT_NEAR(s.ttft_s.mean, (0.5 + 0.25 + 0.1) / 3, 1e-12);
  EXPECT_EQ(s.decode_tok_s.count, 2);
  EXPECT_DOUBLE_EQ(s.decode_tok_s.median, 35.0);
  EXPECT_DOUBLE_EQ(s.decode_tok_s.p90, 47.0);
  EXPECT_DOUBLE_EQ(s.decode_tok_s.min, 20.0);
  EXPECT_EQ(s.prefill_tok_s.count, 3);
  EXPECT_NEAR(s.prefill_tok_s.median, 4000.0, 1e-9);
  EXPECT_NEAR(s.prefill_tok_s.max, 10000.0, 1e-6);
  EXPECT_DOUBLE_EQ(s.latency_s.median, 2.25);
  EXPECT_DOUBLE_EQ(s.aggregate_tok_s, 143.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 3.0 / 4.0);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors.at("HTTP 429: busy"), 2);
}

// Two streams decode together from 1.0 to 2.0 s (one started before, the other ends after):
// what each generated in that second counts, a stream's events scaled by its tokens per event.
TEST(BenchReport, DecodeWhileEveryStreamDecodes) {
  BenchRun run;
  run.mode = "offline";
  run.wall_s = 3.0;
  RequestRecord a = ok_record(0, 0.0, 0.25, 2.0, 100, 8);  // 8 events of one token
  a.token_times_s = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0};
  RequestRecord b = ok_record(1, 0.0, 1.0, 3.0, 100, 16);  // 8 events of two tokens
  b.token_times_s = {1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 2.75, 3.0};
  run.records = {a, b};
  BenchSummary s = summarize(run);
  EXPECT_DOUBLE_EQ(s.together_s, 1.0);
  // (1.0, 2.0]: a's events at 1.25 .. 2.0 (4 tokens), b's at 1.25 .. 2.0 (4 events, 8 tokens).
  EXPECT_DOUBLE_EQ(s.together_decode_tok_s, 12.0);
  const std::string table = format_table(BenchSpec{}, run, s);
  EXPECT_NE(table.find("decode tok/s, all 2 streams at once: 12.0 aggregate, 6.0 a stream (over 1.000 s)"),
            std::string::npos)
      << table;
  EXPECT_DOUBLE_EQ(summary_json(s)["together_decode_tok_s"].get<double>(), 12.0);
  // Streams that never decode at once (or a lone one) have no such figure.
  run.records[1] = ok_record(1, 2.0, 2.5, 3.0, 100, 4);
  s = summarize(run);
  EXPECT_EQ(s.together_s, 0.0);
  EXPECT_EQ(format_table(BenchSpec{}, run, s).find("streams at once"), std::string::npos);
  run.records.resize(1);
  EXPECT_EQ(summarize(run).together_s, 0.0);
}

TEST(BenchReport, NoSuccessfulRequestGivesEmptyFigures) {
  BenchRun run;
  run.mode = "offline";
  run.wall_s = 1.0;
  run.records = {failed_record(0, "x")};
  BenchSummary s = summarize(run);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.ttft_s.count, 0);
  EXPECT_EQ(s.aggregate_tok_s, 0.0);
  BenchSpec spec;
  std::string table = format_table(spec, run, s);
  EXPECT_NE(table.find("TTFT (ms)"), std::string::npos);
  EXPECT_NE(table.find("1 x x"), std::string::npos);
  // Zero wall time (nothing ran) must not divide by zero.
  run.wall_s = 0.0;
  EXPECT_EQ(summarize(run).aggregate_tok_s, 0.0);
}

TEST(BenchReport, TableIsAlignedAndShowsRoofline) {
  BenchSpec spec;
  spec.concurrency = 2;
  spec.prompt_tokens = 1000;
  BenchRun run = hand_made_run();
  BenchSummary s = summarize(run);
  Json roofline = {{"aggregate_tok_s", 71.5}, {"decode_tok_s", 70.0}, {"note", "H200 HBM bound"}};
  std::string table = format_table(spec, run, s, roofline);
  std::istringstream in(table);
  std::string line;
  std::vector<std::string> metric_rows;
  while (std::getline(in, line))
    for (const char* name : {"metric", "TTFT (ms)", "decode tok/s", "prefill tok/s", "latency (s)"})
      if (line.rfind(name, 0) == 0) metric_rows.push_back(line);
  ASSERT_EQ(metric_rows.size(), 5u) << table;
  for (const std::string& r : metric_rows) EXPECT_EQ(r.size(), metric_rows[0].size()) << table;
  EXPECT_NE(metric_rows[1].find("250.0"), std::string::npos) << metric_rows[1];  // median TTFT in ms
  EXPECT_NE(metric_rows[2].find("35.0"), std::string::npos) << metric_rows[2];
  EXPECT_NE(table.find("aggregate: 35.8 tok/s (143 tokens in 4.000 s)"), std::string::npos) << table;
  EXPECT_NE(table.find("3 ok, 2 failed"), std::string::npos) << table;
  EXPECT_NE(table.find("2 x HTTP 429: busy"), std::string::npos) << table;
  // Roofline rows: figure, measured, roofline tok/s, % of roofline.
  std::string aggregate_row, decode_row;
  std::istringstream rl(table.substr(table.find("roofline:")));
  while (std::getline(rl, line)) {
    if (line.rfind("  aggregate tok/s", 0) == 0) aggregate_row = line;
    if (line.rfind("  decode tok/s per request", 0) == 0) decode_row = line;
  }
  EXPECT_NE(table.find("% of roofline"), std::string::npos) << table;
  EXPECT_NE(aggregate_row.find("35.8"), std::string::npos) << table;  // aggregate vs 71.5
  EXPECT_NE(aggregate_row.find("71.5"), std::string::npos) << table;
  EXPECT_NE(aggregate_row.find("50.0%"), std::string::npos) << table;
  EXPECT_NE(decode_row.find("35.0"), std::string::npos) << table;  // median decode vs 70
  EXPECT_NE(decode_row.find("70.0"), std::string::npos) << table;
  EXPECT_NE(decode_row.find("50.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("  note: H200 HBM bound"), std::string::npos) << table;
}

TEST(BenchReport, RooflineSummaryLinesAndBoundsWithoutAMeasuredFigure) {
  BenchSpec spec;
  BenchRun run = hand_made_run();
  BenchSummary s = summarize(run);
  Json roofline = {{"summary", "decode, 2 streams: 1.00 GB/step\nprefill of 1000 tokens: compute-bound"},
                   {"prefill_tok_s", 4000.0},
                   {"bytes_per_step", 1e9},
                   {"detail", {{"bound", "memory"}}}};
  std::string table = format_table(spec, run, s, roofline);
  EXPECT_NE(table.find("roofline:\n  decode, 2 streams: 1.00 GB/step\n  prefill of 1000 tokens: compute-bound\n"),
            std::string::npos)
      << table;
  // A bound no measured figure is named after: its value, no share.
  std::istringstream in(table);
  std::string line, bytes_row;
  while (std::getline(in, line))
    if (line.rfind("  bytes_per_step", 0) == 0) bytes_row = line;
  EXPECT_NE(bytes_row.find("1000000000.0"), std::string::npos) << table;
  EXPECT_EQ(bytes_row.find('%'), std::string::npos) << table;
  EXPECT_NE(table.find("  prefill tok/s per request"), std::string::npos) << table;
  // Nested objects (details for the JSON) stay out of the table.
  EXPECT_EQ(table.find("detail"), std::string::npos) << table;
}

TEST(BenchReport, JsonCarriesSpecRecordsSummaryAndRoofline) {
  BenchSpec spec;
  spec.api_key = "secret";
  spec.requests = 5;
  BenchRun run = hand_made_run();
  run.notes = {"a caveat"};
  BenchSummary s = summarize(run);
  Json j = report_json(spec, run, s, Json{{"decode_tok_s", 100.0}});
  EXPECT_EQ(j["mode"], "http");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["spec"]["requests"], 5);
  EXPECT_EQ(j["spec"]["endpoint"], "/v1/completions");
  EXPECT_EQ(j.dump().find("secret"), std::string::npos) << "the API key must stay out of result files";
  EXPECT_EQ(j["summary"]["failed"], 2);
  EXPECT_DOUBLE_EQ(j["summary"]["decode_tok_s"]["median"].get<double>(), 35.0);
  EXPECT_EQ(j["summary"]["errors"][0]["count"], 2);
  ASSERT_EQ(j["requests"].size(), 5u);
  EXPECT_EQ(j["requests"][2]["ok"], false);
  EXPECT_EQ(j["requests"][2]["error"], "HTTP 429: busy");
  EXPECT_EQ(j["requests"][2]["http_status"], 429);
  EXPECT_TRUE(j["requests"][2]["first_token_s"].is_null());
  EXPECT_EQ(j["requests"][0]["token_times_s"].size(), 2u);
  EXPECT_EQ(j["roofline"]["decode_tok_s"], 100.0);
  EXPECT_EQ(j["notes"][0], "a caveat");
  EXPECT_FALSE(report_json(spec, run, s).contains("roofline"));

  std::string path = std::string(TF_BINARY_DIR) + "/bench_report_test.json";
  ASSERT_TRUE(write_report(path, j).is_ok());
  std::ifstream f(path);
  Json back = Json::parse(f);
  EXPECT_EQ(back, j);
  std::remove(path.c_str());
  Status bad = write_report("/nonexistent-dir/x/report.json", j);
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("/nonexistent-dir/x/report.json"), std::string::npos);
}

// ---- spec and URL ----

TEST(BenchSpec, ValidateNamesTheField) {
  BenchSpec s;
  EXPECT_TRUE(validate(s).is_ok());
  s.concurrency = 0;
  EXPECT_NE(validate(s).message().find("concurrency"), std::string::npos);
  s = BenchSpec();
  s.output_tokens = 0;
  EXPECT_NE(validate(s).message().find("output_tokens"), std::string::npos);
  s = BenchSpec();
  s.prompt_tokens = -3;
  EXPECT_NE(validate(s).message().find("prompt_tokens"), std::string::npos);
  s = BenchSpec();
  s.temperature = -1;
  EXPECT_NE(validate(s).message().find("temperature"), std::string::npos);
  s = BenchSpec();
  s.warmup = -1;
  EXPECT_FALSE(validate(s).is_ok());
}

TEST(BenchUrl, ParsesHostPortAndPrefix) {
  auto t = parse_bench_url("http://127.0.0.1:8888");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->base, "http://127.0.0.1:8888");
  EXPECT_EQ(t->prefix, "");
  t = parse_bench_url("http://host:9000/v1/");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->base, "http://host:9000");
  EXPECT_EQ(t->prefix, "");
  t = parse_bench_url("https://example.com/api/v1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->base, "https://example.com:443");
  EXPECT_EQ(t->prefix, "/api");
  t = parse_bench_url("http://[::1]:8000");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->base, "http://[::1]:8000");
  for (const char* bad : {"127.0.0.1:8888", "ftp://h:1", "http://:80", "http://h:0", "http://h:99999", "http://h:8x"})
    EXPECT_FALSE(parse_bench_url(bad)) << bad;
}

// ---- SSE and chunks ----

TEST(BenchSse, SplitAnywhereGivesTheSameEvents) {
  std::string body =
      "event: message\r\ndata: {\"a\":1}\r\n\r\n: comment\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
  std::vector<std::string> want = {"{\"a\":1}", "line1\nline2", "[DONE]"};
  SseParser whole;
  EXPECT_EQ(whole.feed(body), want);
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    SseParser p;
    auto got = p.feed(std::string_view(body).substr(0, cut));
    auto rest = p.feed(std::string_view(body).substr(cut));
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, want) << "cut at " << cut;
  }
  SseParser bytes;
  std::vector<std::string> got;
  for (char c : body)
    for (auto& e : bytes.feed(std::string_view(&c, 1))) got.push_back(e);
  EXPECT_EQ(got, want);
  SseParser tail;
  EXPECT_TRUE(tail.feed("data: last").empty());
  EXPECT_EQ(tail.finish(), std::vector<std::string>{"last"});
}

TEST(BenchStream, CompletionChunksUsageAndDone) {
  CompletionStreamReader r(false);
  r.on_payload(R"({"choices":[{"index":0,"text":"He","finish_reason":null}]})", 1.0);
  r.on_payload(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})", 1.5);  // no text: no token
  r.on_payload(R"({"choices":[{"index":0,"text":"llo","finish_reason":null}]})", 2.0);
  r.on_payload(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})", 2.1);
  r.on_payload(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}})", 2.2);
  r.on_payload("[DONE]", 2.3);
  RequestRecord rec;
  r.finish(rec, true);
  EXPECT_TRUE(rec.ok) << rec.error;
  EXPECT_DOUBLE_EQ(rec.first_token_s, 1.0);
  EXPECT_EQ(rec.token_times_s, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(rec.output_tokens, 5);
  EXPECT_TRUE(rec.output_tokens_from_usage);
  EXPECT_EQ(rec.prompt_tokens, 7);
  EXPECT_EQ(rec.finish_reason, "length");
}

TEST(BenchStream, ChatCountsReasoningAndToolCallsWithoutUsage) {
  CompletionStreamReader r(true);
  r.on_payload(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})", 0.5);
  r.on_payload(R"({"choices":[{"index":0,"delta":{"reasoning_content":"Hm","reasoning":"Hm"}}]})", 1.0);
  r.on_payload(R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})", 2.0);
  r.on_payload(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]})", 3.0);
  r.on_payload(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", 3.5);
  r.on_payload("[DONE]", 4.0);
  RequestRecord rec;
  rec.prompt_tokens = 11;
  r.finish(rec, true);
  EXPECT_TRUE(rec.ok);
  EXPECT_DOUBLE_EQ(rec.first_token_s, 1.0);
  EXPECT_EQ(rec.output_tokens, 3);  // counted chunks
  EXPECT_FALSE(rec.output_tokens_from_usage);
  EXPECT_EQ(rec.prompt_tokens, 11);  // kept: no usage
  EXPECT_EQ(rec.finish_reason, "stop");
}

TEST(BenchStream, ErrorsBecomeRecordErrors) {
  struct Case {
    std::vector<std::string> payloads;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{R"({"choices":[{"index":0,"text":"a"}]})", R"({"error":{"message":"engine died","code":500}})", "[DONE]"},
       "error in stream: engine died"},
      {{R"({"choices":[{"index":0,"text":"a"}]})"}, "stream ended without [DONE]"},
      {{"{not json"}, "malformed SSE chunk"},
      {{"[1,2]"}, "malformed SSE chunk"},
      {{"[DONE]", R"({"choices":[]})"}, "data after [DONE]"},
      {{R"({"choices":[{"index":0,"text":7,"delta":5}],"usage":"x"})", "[DONE]"}, ""},  // odd types: ignored
  };
  for (const Case& c : cases) {
    CompletionStreamReader r(false);
    for (const auto& p : c.payloads) r.on_payload(p, 1.0);
    RequestRecord rec;
    r.finish(rec, true);
    if (c.expect.empty()) {
      EXPECT_TRUE(rec.ok) << rec.error;
      EXPECT_EQ(rec.output_tokens, 0);
    } else {
      EXPECT_FALSE(rec.ok);
      EXPECT_NE(rec.error.find(c.expect), std::string::npos) << rec.error;
    }
  }
  CompletionStreamReader body(true);
  body.on_body(R"({"choices":[{"index":0,"message":{"content":"Hello"},"finish_reason":"stop"}],"usage":{"completion_tokens":2}})", 3.0);
  RequestRecord rec;
  body.finish(rec, false);
  EXPECT_TRUE(rec.ok);
  EXPECT_EQ(rec.output_tokens, 2);
  EXPECT_DOUBLE_EQ(rec.first_token_s, 3.0);
  CompletionStreamReader bad(true);
  bad.on_body("<html>", 1.0);
  bad.finish(rec, false);
  EXPECT_FALSE(rec.ok);
}

// ---- prompt synthesis ----

TEST(BenchPrompts, ExactLengthDeterministicAndUnique) {
  FakeEngine engine;  // tokenizes by bytes
  TokenizeFn tok = [&](const std::string& t) { return engine.tokenize(t, false); };
  for (int64_t n : {1, 7, 64, 512, 5000}) {
    auto p = synthesize_prompt(tok, 3, 0, n);
    ASSERT_TRUE(p) << p.status().to_string();
    EXPECT_EQ(static_cast<int64_t>(p->size()), n);
  }
  auto a = synthesize_prompts(tok, 3, 0, 4, 256);
  auto b = synthesize_prompts(tok, 3, 0, 4, 256);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  std::set<std::vector<int32_t>> distinct(a->begin(), a->end());
  EXPECT_EQ(distinct.size(), 4u);
  // Different from the first token group on: no shared prefix beyond "Request ".
  EXPECT_NE(std::vector<int32_t>((*a)[0].begin(), (*a)[0].begin() + 10),
            std::vector<int32_t>((*a)[1].begin(), (*a)[1].begin() + 10));
  auto other_seed = synthesize_prompts(tok, 4, 0, 1, 256);
  ASSERT_TRUE(other_seed);
  EXPECT_NE((*other_seed)[0], (*a)[0]);
  // A tokenizer giving fewer tokens than words (2 words per token) still reaches N.
  TokenizeFn coarse = [](const std::string& t) {
    return Expected<std::vector<int32_t>>(std::vector<int32_t>(t.size() / 12 + 1, 5));
  };
  auto c = synthesize_prompt(coarse, 0, 0, 1000);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(c->size(), 1000u);
}

TEST(BenchPrompts, TokenizerFailuresAreReported) {
  TokenizeFn failing = [](const std::string&) -> Expected<std::vector<int32_t>> { return unavailable("no tokenizer"); };
  auto r = synthesize_prompt(failing, 0, 0, 10);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("no tokenizer"), std::string::npos);
  EXPECT_NE(r.status().message().find("prompt synthesis"), std::string::npos);
  TokenizeFn empty = [](const std::string&) { return Expected<std::vector<int32_t>>(std::vector<int32_t>{}); };
  EXPECT_FALSE(synthesize_prompt(empty, 0, 0, 10));
  EXPECT_FALSE(synthesize_prompt(empty, 0, 0, 0));
  auto ids = fallback_prompt_ids(1, 2, 300, 1000, 1010);
  ASSERT_EQ(ids.size(), 300u);
  for (int32_t id : ids) {
    EXPECT_GE(id, 1000);
    EXPECT_LT(id, 1010);
  }
  EXPECT_EQ(ids, fallback_prompt_ids(1, 2, 300, 1000, 1010));
  EXPECT_NE(ids, fallback_prompt_ids(1, 3, 300, 1000, 1010));
}

}  // namespace
}  // namespace tf::bench::testing
