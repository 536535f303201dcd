// tensorfold bench drivers against a scripted FakeEngine: the offline runner
// directly, the HTTP load generator through the real HttpServer. Token counts
// are compared with what the fake emits; errors must be reported, not crash.
#include <gtest/gtest.h>

#include <httplib.h>

#include <mutex>
#include <set>
#include <thread>

#include "bench/bench_report.h"
#include "bench/http_load_generator.h"
#include "bench/offline_runner.h"
#include "bench_test_util.h"

namespace tf::bench::testing {
namespace {

using Json = nlohmann::json;

// "Hello world" in 3-byte deltas: 4 text events, finish with 11 completion tokens.
constexpr int64_t kFakeTokens = 11;
constexpr size_t kFakeDeltas = 4;

BenchSpec small_spec(int concurrency, int requests) {
  BenchSpec s;
  s.concurrency = concurrency;
  s.requests = requests;
  s.prompt_tokens = 64;
  s.output_tokens = 16;
  s.timeout_s = 30;
  return s;
}

void expect_all_ok(const BenchRun& run, size_t deltas, int64_t tokens) {
  for (const RequestRecord& r : run.records) {
    EXPECT_TRUE(r.ok) << r.index << ": " << r.error;
    EXPECT_EQ(r.output_tokens, tokens) << r.index;
    EXPECT_TRUE(r.output_tokens_from_usage) << r.index;
    EXPECT_EQ(r.token_times_s.size(), deltas) << r.index;
    EXPECT_GE(r.first_token_s, r.start_s) << r.index;
    EXPECT_GE(r.end_s, r.first_token_s) << r.index;
    for (size_t k = 1; k < r.token_times_s.size(); ++k) EXPECT_GE(r.token_times_s[k], r.token_times_s[k - 1]);
    EXPECT_LE(r.end_s, run.wall_s);
  }
}

// ---- offline ----

TEST(BenchOffline, ConcurrencyBoundAndCounts) {
  FakeEngine fake;
  fake.delay = std::chrono::milliseconds(5);
  CountingEngine engine(fake);
  BenchSpec spec = small_spec(3, 10);
  spec.warmup = 2;
  spec.temperature = 0.5;
  auto run = run_offline_bench(engine, spec);
  ASSERT_TRUE(run) << run.status().to_string();
  EXPECT_EQ(run->mode, "offline");
  EXPECT_EQ(run->model, "fake-model");
  ASSERT_EQ(run->records.size(), 10u);
  expect_all_ok(*run, kFakeDeltas, kFakeTokens);
  for (size_t i = 0; i < run->records.size(); ++i) {
    EXPECT_EQ(run->records[i].index, static_cast<int>(i));
    EXPECT_EQ(run->records[i].prompt_tokens, 64);
    EXPECT_EQ(run->records[i].finish_reason, "stop");
  }
  EXPECT_EQ(engine.max_in_flight(), 3);  // 5 ms per delta: the bound is reached and never passed
  EXPECT_EQ(engine.in_flight(), 0);
  ASSERT_EQ(fake.requests.size(), 12u);  // warmup included
  std::set<std::vector<int32_t>> prompts;
  for (const auto& g : fake.requests) {
    EXPECT_EQ(g.prompt_tokens.size(), 64u);
    EXPECT_EQ(g.sampling.max_tokens, 16);
    EXPECT_TRUE(g.sampling.ignore_eos);
    EXPECT_EQ(g.sampling.temperature, 0.5);
    prompts.insert(g.prompt_tokens);
  }
  EXPECT_EQ(prompts.size(), 12u) << "every prompt is distinct";
  BenchSummary s = summarize(*run);
  EXPECT_EQ(s.output_tokens, 10 * kFakeTokens);
  EXPECT_EQ(s.succeeded, 10);
  EXPECT_EQ(s.decode_tok_s.count, 10);
  EXPECT_GT(s.aggregate_tok_s, 0.0);
}

TEST(BenchOffline, RepeatPromptSendsOnePromptEveryTime) {
  FakeEngine fake;
  CountingEngine engine(fake);
  BenchSpec spec = small_spec(1, 3);
  spec.warmup = 1;
  spec.repeat_prompt = true;
  auto run = run_offline_bench(engine, spec);
  ASSERT_TRUE(run) << run.status().to_string();
  ASSERT_EQ(fake.requests.size(), 4u);
  for (const auto& g : fake.requests) {
    EXPECT_EQ(g.prompt_tokens.size(), 64u);
    EXPECT_EQ(g.prompt_tokens, fake.requests[0].prompt_tokens);
  }
}

// decode-N@P's priming: each measured prompt runs once first, alone and for one token, so the
// measured requests (the same prompts, in order) resume from their kept states.
TEST(BenchOffline, PrimedPromptsRunOnceFirstForOneToken) {
  FakeEngine fake;
  CountingEngine engine(fake);
  BenchSpec spec = small_spec(3, 3);
  spec.prime_prompts = true;
  auto run = run_offline_bench(engine, spec);
  ASSERT_TRUE(run) << run.status().to_string();
  ASSERT_EQ(fake.requests.size(), 6u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fake.requests[i].sampling.max_tokens, 1) << i;
    EXPECT_EQ(fake.requests[3 + i].sampling.max_tokens, 16) << i;
    EXPECT_EQ(fake.requests[i].prompt_tokens, fake.requests[3 + i].prompt_tokens) << i;
  }
  EXPECT_NE(fake.requests[0].prompt_tokens, fake.requests[1].prompt_tokens);
  ASSERT_EQ(run->records.size(), 3u);
  expect_all_ok(*run, kFakeDeltas, kFakeTokens);
  ASSERT_EQ(run->notes.size(), 1u);
  EXPECT_NE(run->notes[0].find("ran once before"), std::string::npos) << run->notes[0];
}

TEST(BenchOffline, ConcurrencyOneIsSerial) {
  FakeEngine fake;
  CountingEngine engine(fake);
  auto run = run_offline_bench(engine, small_spec(1, 5));
  ASSERT_TRUE(run);
  expect_all_ok(*run, kFakeDeltas, kFakeTokens);
  EXPECT_EQ(engine.max_in_flight(), 1);
  for (size_t i = 1; i < run->records.size(); ++i)
    EXPECT_GE(run->records[i].start_s, run->records[i - 1].end_s);
}

TEST(BenchOffline, RefusedAndFailedRequestsAreCounted) {
  FakeEngine fake;
  CountingEngine engine(fake);
  fake.queue_full = true;
  auto run = run_offline_bench(engine, small_spec(2, 4));
  ASSERT_TRUE(run);
  BenchSummary s = summarize(*run);
  EXPECT_EQ(s.failed, 4);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_NE(s.errors.begin()->first.find("submit refused"), std::string::npos);
  EXPECT_NE(s.errors.begin()->first.find("queue is full"), std::string::npos);

  fake.queue_full = false;
  fake.fail_after_first = true;
  run = run_offline_bench(engine, small_spec(2, 4));
  ASSERT_TRUE(run);
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("engine error"), std::string::npos) << r.error;
    EXPECT_EQ(r.token_times_s.size(), 1u);  // the one delta before the failure
  }
  EXPECT_TRUE(fake.wait_idle(std::chrono::seconds(10)));
}

TEST(BenchOffline, StuckRequestsTimeOutAndAreCancelled) {
  FakeEngine fake;
  fake.endless = true;
  CountingEngine engine(fake);
  BenchSpec spec = small_spec(2, 3);
  spec.timeout_s = 0.2;
  auto run = run_offline_bench(engine, spec);
  ASSERT_TRUE(run);
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("timed out after 0.2 s"), std::string::npos) << r.error;
  }
  EXPECT_TRUE(fake.wait_idle(std::chrono::seconds(10)));
  EXPECT_EQ(fake.cancelled.size(), 3u);
}

TEST(BenchOffline, BadSpecIsRefused) {
  FakeEngine fake;
  BenchSpec spec = small_spec(0, 3);
  auto run = run_offline_bench(fake, spec);
  ASSERT_FALSE(run);
  EXPECT_NE(run.status().message().find("concurrency"), std::string::npos);
}

// ---- HTTP ----

TEST(BenchHttp, CompletionsStreamedTokenCountsAndConcurrency) {
  BenchServer server;
  server.fake.delay = std::chrono::milliseconds(5);
  BenchSpec spec = small_spec(2, 6);
  spec.url = server.url();
  spec.warmup = 1;
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  EXPECT_EQ(run->mode, "http");
  EXPECT_EQ(run->model, "fake-model");
  ASSERT_EQ(run->records.size(), 6u);
  expect_all_ok(*run, kFakeDeltas, kFakeTokens);
  for (const RequestRecord& r : run->records) {
    EXPECT_EQ(r.http_status, 200);
    EXPECT_EQ(r.prompt_tokens, 64);  // the server's usage agrees with what was sent
    EXPECT_EQ(r.finish_reason, "stop");
  }
  EXPECT_EQ(server.counting.max_in_flight(), 2);
  ASSERT_EQ(server.fake.requests.size(), 7u);
  std::set<std::vector<int32_t>> prompts;
  for (const auto& g : server.fake.requests) {
    EXPECT_EQ(g.prompt_tokens.size(), 64u);
    EXPECT_EQ(g.sampling.max_tokens, 16);
    EXPECT_TRUE(g.sampling.ignore_eos);
    EXPECT_EQ(g.sampling.temperature, 0.0);
    prompts.insert(g.prompt_tokens);
  }
  EXPECT_EQ(prompts.size(), 7u);
  EXPECT_EQ(summarize(*run).output_tokens, 6 * kFakeTokens);
}

TEST(BenchHttp, ChatCountsReasoningAndContent) {
  BenchServer server;
  server.fake.set_text_script("Let me think.", "Hello world", FinishReason::kStop);
  BenchSpec spec = small_spec(3, 3);
  spec.url = server.url() + "/v1";
  spec.chat = true;
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  // 13 reasoning bytes in 5 deltas + 11 content bytes in 4 deltas; usage says 24.
  expect_all_ok(*run, 9, 24);
  for (const auto& g : server.fake.requests) EXPECT_FALSE(g.thinking_enabled);
  // The fake renders "user: <text>\n", so usage.prompt_tokens is the 64 prompt bytes + 7.
  for (const RequestRecord& r : run->records) EXPECT_EQ(r.prompt_tokens, 64 + 7);
  EXPECT_FALSE(run->notes.empty());
}

TEST(BenchHttp, NotStreamed) {
  BenchServer server;
  BenchSpec spec = small_spec(2, 2);
  spec.url = server.url();
  spec.streaming = false;
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  for (const RequestRecord& r : run->records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, kFakeTokens);
    EXPECT_DOUBLE_EQ(r.first_token_s, r.end_s);
  }
  EXPECT_EQ(summarize(*run).decode_tok_s.count, 0);
}

TEST(BenchHttp, ServerDownIsAnErrorNotACrash) {
  std::string url;
  {
    BenchServer server;
    url = server.url();
  }
  BenchSpec spec = small_spec(2, 2);
  spec.url = url;
  auto run = run_http_bench(spec);
  ASSERT_FALSE(run);
  EXPECT_EQ(run.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(run.status().message().find(url), std::string::npos) << run.status().to_string();
  EXPECT_NE(run.status().message().find("connection refused"), std::string::npos) << run.status().to_string();
}

TEST(BenchHttp, ClientErrorsAreCountedPerRequest) {
  BenchServer server;
  BenchSpec spec = small_spec(2, 4);
  spec.url = server.url();
  spec.model = "no-such-model";  // 404 model_not_found on every request
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  BenchSummary s = summarize(*run);
  EXPECT_EQ(s.failed, 4);
  EXPECT_EQ(s.succeeded, 0);
  for (const RequestRecord& r : run->records) {
    EXPECT_EQ(r.http_status, 404);
    EXPECT_NE(r.error.find("HTTP 404"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("no-such-model"), std::string::npos) << r.error;
  }
  std::string table = format_table(spec, *run, s);
  EXPECT_NE(table.find("4 x HTTP 404"), std::string::npos) << table;

  server.fake.queue_full = true;  // 429 from the engine's queue
  spec.model.clear();
  run = run_http_bench(spec);
  ASSERT_TRUE(run);
  for (const RequestRecord& r : run->records) EXPECT_EQ(r.http_status, 429) << r.error;
}

TEST(BenchHttp, ErrorInsideTheStreamIsCounted) {
  BenchServer server;
  server.fake.fail_after_first = true;
  BenchSpec spec = small_spec(2, 3);
  spec.url = server.url();
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.http_status, 200);
    EXPECT_NE(r.error.find("error in stream"), std::string::npos) << r.error;
  }
}

TEST(BenchHttp, ApiKey) {
  server::ServerOptions opts;
  opts.api_key = "secret";
  BenchServer server(opts);
  BenchSpec spec = small_spec(1, 1);
  spec.url = server.url();
  auto refused = run_http_bench(spec);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("401"), std::string::npos) << refused.status().to_string();
  spec.api_key = "secret";
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  EXPECT_TRUE(run->records[0].ok) << run->records[0].error;
}

TEST(BenchHttp, TimeoutIsReported) {
  BenchServer server;
  server.fake.endless = true;
  BenchSpec spec = small_spec(1, 1);
  spec.url = server.url();
  spec.timeout_s = 0.3;
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  ASSERT_EQ(run->records.size(), 1u);
  EXPECT_FALSE(run->records[0].ok);
  EXPECT_NE(run->records[0].error.find("timed out after 0.3 s"), std::string::npos) << run->records[0].error;
  EXPECT_TRUE(server.fake.wait_cancelled(std::chrono::seconds(10)));
}

// A hand-written server unlike ours: no /tokenize, no usage in the stream, chunks
// 300 ms apart, and a 500 with an HTML body on the chat route.
struct RawServer {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  std::atomic<int> completions{0};
  RawServer() {
    http.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"raw-model"}]})", "application/json");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++completions;
      Json body = Json::parse(req.body);
      std::lock_guard<std::mutex> lock(mu);
      last_prompt = body["prompt"].get<std::vector<int32_t>>();
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        for (const char* text : {"a", "b", "c"}) {
          std::string chunk = std::string("data: {\"choices\":[{\"index\":0,\"text\":\"") + text + "\"}]}\n\n";
          sink.write(chunk.data(), chunk.size());
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
    });
    http.Post("/v1/chat/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content("<html>Internal Server Error</html>", "text/html");
    });
    // Without it Nagle's algorithm holds small chunks back until the client ACKs
    // (up to 40 ms with delayed ACKs), which is what this test must not measure.
    http.set_tcp_nodelay(true);
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    for (int i = 0; i < 500 && !http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~RawServer() {
    http.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  std::mutex mu;
  std::vector<int32_t> last_prompt;
};

TEST(BenchHttp, ForeignServerWithoutTokenizeOrUsage) {
  RawServer server;
  BenchSpec spec = small_spec(1, 2);
  spec.url = server.url();
  auto run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  EXPECT_EQ(run->model, "raw-model");
  EXPECT_EQ(server.completions.load(), 2);
  {
    std::lock_guard<std::mutex> lock(server.mu);
    ASSERT_EQ(server.last_prompt.size(), 64u);  // fallback ids, still exactly prompt_tokens
    for (int32_t id : server.last_prompt) EXPECT_GE(id, 1000);
  }
  ASSERT_FALSE(run->notes.empty());
  EXPECT_NE(run->notes[0].find("no /tokenize"), std::string::npos) << run->notes[0];
  for (const RequestRecord& r : run->records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, 3);  // counted chunks: no usage
    EXPECT_FALSE(r.output_tokens_from_usage);
    ASSERT_EQ(r.token_times_s.size(), 3u);
    // Each chunk is timestamped when it arrives, not when the response ends. The server sends
    // chunk k after k x 300 ms, so chunk k cannot arrive earlier; gaps between arrivals are not
    // asserted one by one (on a loaded machine two chunks can arrive in one read: a 10 ms gap
    // was seen in CI).
    EXPECT_LE(r.token_times_s[0], r.token_times_s[1]);
    EXPECT_LE(r.token_times_s[1], r.token_times_s[2]);
    EXPECT_GE(r.token_times_s[1] - r.start_s, 0.3);
    EXPECT_GE(r.token_times_s[2] - r.start_s, 0.6);
    // The response ends >= 900 ms after the first chunk was sent: 0.5 s allows its read to
    // come 400 ms late on a loaded machine; timestamps taken at the end would give ~0.
    EXPECT_GE(r.end_s - r.first_token_s, 0.5);
  }
  BenchSummary s = summarize(*run);
  ASSERT_EQ(s.decode_tok_s.count, 2);
  EXPECT_LT(s.decode_tok_s.max, 2.0 / 0.5);  // (3 - 1) tokens over >= 0.5 s

  spec.chat = true;
  run = run_http_bench(spec);
  ASSERT_TRUE(run) << run.status().to_string();
  for (const RequestRecord& r : run->records) {
    EXPECT_EQ(r.http_status, 500);
    EXPECT_NE(r.error.find("HTTP 500: <html>Internal Server Error"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace tf::bench::testing
