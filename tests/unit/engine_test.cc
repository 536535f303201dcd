// The serving engine end to end on the CPU backend, over the built-in demo
// checkpoint: events, determinism, batch independence, cancellation, limits.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data_url_test_util.h"
#include "draft_oracle.h"
#include "engine/demo_checkpoint.h"
#include "engine/prompt_media.h"
#include "eventually.h"
#include "model/exl3_synthetic.h"
#include "model/safetensors.h"

namespace tf::engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::eventually;

// Collects one request's events; wait() returns once every choice finished or an error came.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::string> text;  // reasoning + content, per choice
  std::map<int, std::string> content;
  std::map<int, std::vector<TokenLogprob>> logprobs;
  std::map<int, std::vector<TokenLogprob>> prompt_logprobs;  // GenerationRequest::prompt_logprobs
  std::map<int, std::vector<double>> label_logprobs;         // GenerationRequest::label_tokens
  std::map<int, std::map<int, std::pair<std::string, std::string>>> calls;  // choice -> index -> name, arguments
  std::map<int, GenerationEvent> finish;
  int events = 0;
  int expected = 1;
  bool error = false;
  Status status;

  EventSink sink() {
    return [this](GenerationEvent ev) {
      std::lock_guard<std::mutex> lock(mu);
      ++events;
      if (ev.kind == GenerationEvent::Kind::kError) {
        error = true;
        status = ev.error;
      } else if (ev.kind == GenerationEvent::Kind::kFinish) {
        finish[ev.choice] = ev;
      } else {
        text[ev.choice] += ev.reasoning + ev.content;
        content[ev.choice] += ev.content;
        for (auto& l : ev.logprobs) logprobs[ev.choice].push_back(l);
        for (auto& l : ev.prompt_logprobs) prompt_logprobs[ev.choice].push_back(l);
        for (double l : ev.label_logprobs) label_logprobs[ev.choice].push_back(l);
        for (auto& d : ev.tool_calls) {
          auto& call = calls[ev.choice][d.index];
          call.first += d.name;
          call.second += d.arguments;
        }
      }
      cv.notify_all();
    };
  }
  bool wait(std::chrono::seconds limit = 120s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return error || static_cast<int>(finish.size()) == expected; });
  }
  bool started() {
    std::lock_guard<std::mutex> lock(mu);
    return events > 0;
  }
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path root = fs::temp_directory_path() / ("tf-engine-test-" + std::to_string(::getpid()));
    auto dir = ensure_demo_checkpoint(root);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    root_ = root;
    model_dir_ = dir->string();
    auto e = Engine::create(demo_options());
    ASSERT_TRUE(e.has_value()) << e.status().to_string();
    engine_ = e->release();
  }
  // The suite engine's options on the demo checkpoint (tests vary them for engines of their own).
  static EngineOptions demo_options() {
    EngineOptions o;
    o.model_dir = model_dir_;
    o.parallel = 3;
    o.context = 1024;
    o.kv = "bf16";
    // The demo's f32 weights: StopStringEndsTheReplyBeforeIt cuts a stop string out of the
    // middle of the greedy reply, which with DENSE=q4's reply falls inside a multi-byte
    // character and is refused at submit; the other tests pass with either.
    o.dense = "f32";
    o.max_waiting = 6;
    o.prefill_chunk = 32;
    o.memory_reserve_gib = 0;
    return o;
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static std::vector<int32_t> prompt(const std::string& text) {
    auto ids = engine_->tokenize(text, false);
    EXPECT_TRUE(ids.has_value());
    return *ids;
  }
  static GenerationRequest request(const std::string& id, const std::string& text, int64_t max_tokens,
                                   double temperature) {
    GenerationRequest g;
    g.request_id = id;
    g.prompt_tokens = prompt(text);
    g.sampling.max_tokens = max_tokens;
    g.sampling.temperature = temperature;
    g.sampling.ignore_eos = true;
    return g;
  }
  static std::string run(GenerationRequest g) {
    Collector c;
    c.expected = g.n;
    EXPECT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    return c.text[0];
  }
  static void wait_idle() {
    ASSERT_TRUE(eventually([] { return !engine_->health().busy; })) << "the engine never went idle";
  }

  static inline Engine* engine_ = nullptr;
  static inline fs::path root_;
  static inline std::string model_dir_;
};

TEST_F(EngineTest, GeneratesExactlyMaxTokensAndReportsLength) {
  Collector c;
  ASSERT_TRUE(engine_->submit(request("a", "Hello there, how are you?", 12, 0.0), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  ASSERT_FALSE(c.error) << c.status.to_string();
  EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.finish[0].completion_tokens, 12);
  EXPECT_FALSE(c.text[0].empty());
  const ModelInfo info = engine_->model_info();
  EXPECT_EQ(info.context_length, 1024);
}

TEST_F(EngineTest, SameRequestSameReplyWithoutSeedDifferentSeedsDiffer) {
  const std::string a = run(request("s1", "Tell me a story about a cat.", 24, 1.0));
  const std::string b = run(request("s2", "Tell me a story about a cat.", 24, 1.0));
  EXPECT_EQ(a, b);
  GenerationRequest g1 = request("s3", "Tell me a story about a cat.", 24, 1.0);
  g1.sampling.seed = 1;
  GenerationRequest g2 = request("s4", "Tell me a story about a cat.", 24, 1.0);
  g2.sampling.seed = 2;
  EXPECT_NE(run(std::move(g1)), run(std::move(g2)));
}

// A reply is the same whether its request ran alone or beside others (temperature 1,
// prompts longer than a prefill chunk, more requests than PARALLEL so some wait).
TEST_F(EngineTest, ConcurrentRepliesEqualSoloReplies) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) {
    std::string text = "Request number " + std::to_string(i) + ": ";
    for (int k = 0; k < 10 + 9 * i; ++k) text += "word" + std::to_string(k * (i + 1)) + " ";
    reqs.push_back(request("c" + std::to_string(i), text, 20, 1.0));
  }
  std::vector<std::string> solo;
  for (const auto& g : reqs) solo.push_back(run(g));
  std::vector<std::unique_ptr<Collector>> cs;
  for (auto& g : reqs) {
    cs.push_back(std::make_unique<Collector>());
    GenerationRequest copy = g;
    copy.request_id += "-together";
    ASSERT_TRUE(engine_->submit(std::move(copy), cs.back()->sink()).is_ok());
  }
  int max_running = 0;
  while (engine_->health().busy) {
    max_running = std::max<int>(max_running, static_cast<int>(engine_->health().requests_running));
    std::this_thread::sleep_for(1ms);
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    ASSERT_TRUE(cs[i]->wait());
    EXPECT_EQ(cs[i]->text[0], solo[i]) << "request " << i;
  }
  EXPECT_LE(max_running, 3);
}

TEST_F(EngineTest, CancelFreesThePool) {
  wait_idle();
  const EngineHealth idle = engine_->health();
  EXPECT_EQ(idle.pool_free_tokens, idle.pool_tokens);
  Collector c;
  ASSERT_TRUE(engine_->submit(request("x", "A long one.", 900, 1.0), c.sink()).is_ok());
  ASSERT_TRUE(eventually([&] { return c.started(); }));
  EXPECT_LT(engine_->health().pool_free_tokens, idle.pool_tokens);
  engine_->cancel("x");
  EXPECT_TRUE(eventually([&] { return engine_->health().pool_free_tokens == idle.pool_tokens; }));
  EXPECT_FALSE(engine_->health().busy);
  // Freed by the cancel, not by running its 900 tokens to the end (a cancelled request gets no finish).
  EXPECT_FALSE(c.wait(0s)) << "the request ran to its end";
}

TEST_F(EngineTest, StopStringEndsTheReplyBeforeIt) {
  const std::string full = run(request("f", "Write something.", 30, 0.0));
  ASSERT_GE(full.size(), 8u);
  // A stop string taken from the middle of the greedy reply: the reply ends just before its first occurrence.
  const std::string stop = full.substr(full.size() / 2, 3);
  GenerationRequest g = request("g", "Write something.", 30, 0.0);
  g.sampling.stop = {stop};
  Collector c;
  ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.text[0], full.substr(0, full.find(stop)));
  EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kStop);
}

TEST_F(EngineTest, NChoicesAndLogprobs) {
  GenerationRequest g = request("n", "Pick a number.", 10, 1.0);
  g.n = 2;
  g.sampling.logprobs = true;
  g.sampling.top_logprobs = 3;
  Collector c;
  c.expected = 2;
  ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  ASSERT_FALSE(c.error);
  EXPECT_NE(c.text[0], c.text[1]);
  for (int ch = 0; ch < 2; ++ch) {
    ASSERT_EQ(c.logprobs[ch].size(), 10u);
    for (const auto& lp : c.logprobs[ch]) {
      EXPECT_LE(lp.logprob, 0.0);
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
      EXPECT_GE(lp.top[0].logprob, lp.logprob);
    }
  }
}

// text_offset counts code points of the text before each token: a token that shows no
// text yet (half a character, a skipped special token) adds nothing, so with nothing held
// back (no stop strings) it equals the text of the events before the token's own.
TEST_F(EngineTest, LogprobTextOffsetsCountCodePointsOfTheTextBefore) {
  for (int64_t seed : {1, 2, 3}) {
    GenerationRequest g = request("offsets", "Once upon a time", 40, 1.0);
    g.sampling.seed = seed;
    g.sampling.logprobs = true;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int64_t chars = 0;
    std::vector<std::pair<int64_t, int64_t>> offsets;  // engine's, counted here
    auto code_points = [](const std::string& s) {
      return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
    };
    ASSERT_TRUE(engine_->submit(std::move(g), [&](GenerationEvent ev) {
      std::lock_guard<std::mutex> lock(mu);
      for (const TokenLogprob& lp : ev.logprobs) offsets.emplace_back(lp.text_offset, chars);
      chars += code_points(ev.content);
      if (ev.kind != GenerationEvent::Kind::kDelta) done = true;
      cv.notify_all();
    }).is_ok());
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 120s, [&] { return done; }));
    ASSERT_EQ(offsets.size(), 40u);
    for (size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets[i].first, offsets[i].second) << "seed " << seed << " token " << i;
  }
}

TEST_F(EngineTest, LimitsAreCleanRefusals) {
  GenerationRequest too_long = request("l", "Hi", 2000, 0.0);
  Status s = engine_->submit(std::move(too_long), [](GenerationEvent) {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  GenerationRequest many = request("m", "Hi", 4, 0.0);
  many.n = 7;  // more choices than may ever wait (6): a 429 no retry could pass, so invalid
  s = engine_->submit(std::move(many), [](GenerationEvent) {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("MAX_QUEUED"), std::string::npos) << s.to_string();
  GenerationRequest bad = request("b", "Hi", 4, 0.0);
  bad.prompt_tokens.push_back(1 << 30);
  EXPECT_EQ(engine_->submit(std::move(bad), [](GenerationEvent) {}).code(), StatusCode::kInvalidArgument);
  // The engine still serves.
  EXPECT_FALSE(run(request("ok", "Still there?", 4, 0.0)).empty());
}

TEST_F(EngineTest, ChatRenderingAndReasoningSplit) {
  ChatPrompt chat;
  chat.messages = nlohmann::json::array({{{"role", "user"}, {"content", "Hi"}}});
  auto ids = engine_->render_chat(chat);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  auto text = engine_->detokenize(*ids);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");
  GenerationRequest g;
  g.request_id = "chat";
  g.prompt_tokens = *ids;
  g.sampling.max_tokens = 8;
  g.sampling.temperature = 0.0;
  g.sampling.ignore_eos = true;
  g.parse_reasoning = true;
  Collector c;
  ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  // The prompt opened <think>: everything until </think> is reasoning.
  EXPECT_GT(c.finish[0].reasoning_tokens, 0);
}

// Structured output: a request constrained by json_schema, choice or regex gets text of
// that form, sampled (several seeds) from the demo model's otherwise gibberish output.
// The languages are finite, so every reply must end by itself (an end token once complete).
class StructuredOutputTest : public EngineTest {
 protected:
  static std::string constrained(StructuredOutput so, int64_t seed, FinishReason* reason = nullptr) {
    GenerationRequest g = request("so" + std::to_string(seed), "Answer in the asked form:", 120, 1.0);
    g.sampling.ignore_eos = false;
    g.sampling.seed = seed;
    g.structured = std::move(so);
    Collector c;
    Status s = engine_->submit(std::move(g), c.sink());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    if (reason) *reason = c.finish[0].finish_reason;
    return c.content[0];
  }
};

TEST_F(StructuredOutputTest, JsonSchemaRepliesParseAndValidate) {
  StructuredOutput so;
  so.kind = StructuredOutput::Kind::kJsonSchema;
  so.schema = nlohmann::json::parse(R"({"type": "object",
      "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]},
                     "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
      "required": ["ok", "color"]})");
  for (int64_t seed : {1, 2, 3, 4}) {
    FinishReason reason = FinishReason::kLength;
    const std::string text = constrained(so, seed, &reason);
    EXPECT_EQ(reason, FinishReason::kStop) << text;
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << text;
    EXPECT_TRUE(j["ok"].is_boolean()) << text;
    EXPECT_TRUE(j["color"] == "red" || j["color"] == "green" || j["color"] == "blue") << text;
    for (auto& [k, v] : j.items()) EXPECT_TRUE(k == "ok" || k == "color" || k == "tags") << text;
    if (j.contains("tags")) {
      EXPECT_LE(j["tags"].size(), 2u) << text;
    }
  }
}

TEST_F(StructuredOutputTest, ChoiceAndRegex) {
  StructuredOutput choice;
  choice.kind = StructuredOutput::Kind::kChoice;
  choice.choices = {"alpha", "beta gamma", "béta", "alphabet"};
  std::set<std::string> seen;
  for (int64_t seed : {1, 2, 3, 4, 5}) {
    const std::string text = constrained(choice, seed);
    EXPECT_TRUE(std::count(choice.choices.begin(), choice.choices.end(), text)) << text;
    seen.insert(text);
  }
  StructuredOutput re;
  re.kind = StructuredOutput::Kind::kRegex;
  re.pattern = "[0-9]{3}-[a-z]{2}(!|\\?)";
  for (int64_t seed : {1, 2, 3}) {
    const std::string text = constrained(re, seed);
    EXPECT_TRUE(std::regex_match(text, std::regex(re.pattern))) << text;
  }
}

// The constraint starts when the reasoning ends: a reply forced to close its reasoning
// at once (a large bias on </think>, which the grammar never allows in the answer)
// still answers one of the choices.
TEST_F(StructuredOutputTest, AppliesAfterTheReasoning) {
  auto think_end = engine_->tokenize("</think>", false);
  ASSERT_TRUE(think_end.has_value());
  ASSERT_EQ(think_end->size(), 1u);
  ChatPrompt chat;
  chat.messages = nlohmann::json::array({{{"role", "user"}, {"content", "Pick one"}}});
  auto ids = engine_->render_chat(chat);
  ASSERT_TRUE(ids.has_value());
  GenerationRequest g;
  g.request_id = "so-think";
  g.prompt_tokens = *ids;  // ends with <think>
  g.sampling.max_tokens = 40;
  g.sampling.temperature = 1.0;
  g.sampling.seed = 9;
  g.sampling.logit_bias[(*think_end)[0]] = 100.0;
  g.parse_reasoning = true;
  g.structured.kind = StructuredOutput::Kind::kChoice;
  g.structured.choices = {"yes", "no"};
  Collector c;
  ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  ASSERT_FALSE(c.error) << c.status.to_string();
  EXPECT_TRUE(c.content[0] == "yes" || c.content[0] == "no") << c.content[0];
  EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kStop);
}

// tool_choice "required" / named: the demo model's random weights never call a tool by
// themselves, so every call below is the tool-call grammar's doing. Reasoning is closed at once
// (a bias on </think>), as in AppliesAfterTheReasoning. The parameters are enums: a random
// model would write a free string until max_tokens.
class ToolChoiceTest : public EngineTest {
 protected:
  static nlohmann::json tools() {
    return nlohmann::json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"enum": [1, 2, 3]}}}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])");
  }
  static GenerationRequest tool_request(const std::string& id, int64_t seed) {
    auto think_end = engine_->tokenize("</think>", false);
    EXPECT_TRUE(think_end.has_value() && think_end->size() == 1u);
    ChatPrompt chat;
    chat.messages = nlohmann::json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
    chat.tools = tools();
    auto ids = engine_->render_chat(chat);
    EXPECT_TRUE(ids.has_value());
    GenerationRequest g;
    g.request_id = id;
    g.prompt_tokens = *ids;
    g.sampling.max_tokens = 200;
    g.sampling.temperature = 1.0;
    g.sampling.seed = seed;
    g.sampling.logit_bias[(*think_end)[0]] = 100.0;
    g.parse_reasoning = true;
    g.tools = tools();
    return g;
  }
};

TEST_F(ToolChoiceTest, RequiredAlwaysCallsADeclaredFunction) {
  int finished_calls = 0;
  for (int64_t seed : {1, 2, 3, 4}) {
    GenerationRequest g = tool_request("required" + std::to_string(seed), seed);
    g.tool_choice = "required";
    Collector c;
    ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
    ASSERT_TRUE(c.wait());
    ASSERT_FALSE(c.error) << c.status.to_string();
    // No content: the answer is calls only (a call cut by max_tokens is no call at all).
    EXPECT_EQ(c.content[0], "") << seed;
    if (c.finish[0].finish_reason == FinishReason::kLength) continue;
    EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kToolCalls) << seed;
    ASSERT_FALSE(c.calls[0].empty()) << seed;
    for (const auto& [index, call] : c.calls[0]) {
      EXPECT_TRUE(call.first == "get_weather" || call.first == "get_time") << call.first;
      const nlohmann::json args = nlohmann::json::parse(call.second, nullptr, false);
      ASSERT_TRUE(args.is_object()) << call.second;
      for (const auto& [k, v] : args.items()) {
        EXPECT_EQ(call.first, "get_weather") << k;
        EXPECT_TRUE((k == "city" && (v == "Paris" || v == "Oslo")) || (k == "days" && v.is_number_integer()))
            << call.second;
      }
      ++finished_calls;
    }
  }
  EXPECT_GE(finished_calls, 2);
}

TEST_F(ToolChoiceTest, ANamedChoiceCallsThatFunctionOnceAndStops) {
  for (int64_t seed : {5, 6}) {
    GenerationRequest g = tool_request("named" + std::to_string(seed), seed);
    g.tool_choice = "get_time";
    g.named_tool_choice = true;
    g.sampling.ignore_eos = true;  // the closed call ends the answer by itself
    Collector c;
    ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
    ASSERT_TRUE(c.wait());
    ASSERT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kStop);  // OpenAI: "stop" for a named choice
    ASSERT_EQ(c.calls[0].size(), 1u);
    EXPECT_EQ(c.calls[0][0].first, "get_time");
    EXPECT_EQ(c.calls[0][0].second, "{}");
  }
}

TEST_F(ToolChoiceTest, AutoLeavesTheAnswerFree) {
  GenerationRequest g = tool_request("auto", 7);
  g.tool_choice = "auto";
  g.sampling.max_tokens = 24;
  Collector c;
  ASSERT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  EXPECT_TRUE(c.calls[0].empty());
  EXPECT_NE(c.content[0], "");
}

TEST_F(ToolChoiceTest, ANamedFunctionNotInToolsIsRefused) {
  GenerationRequest g = tool_request("missing", 1);
  g.tool_choice = "get_tide";
  g.named_tool_choice = true;
  Status s = engine_->submit(std::move(g), [](GenerationEvent) {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("get_tide"), std::string::npos) << s.message();
}

TEST_F(StructuredOutputTest, BadConstraintsAreRefusedAtSubmit) {
  auto refused = [](StructuredOutput so, const std::string& needle) {
    GenerationRequest g = request("bad", "Hi", 4, 0.0);
    g.structured = std::move(so);
    Status s = engine_->submit(std::move(g), [](GenerationEvent) {});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  StructuredOutput grammar;
  grammar.kind = StructuredOutput::Kind::kGrammar;
  grammar.pattern = "root ::= item\n";
  // More refusals than may wait (6): a refused request must not stay counted as waiting.
  for (int i = 0; i < 8; ++i) refused(grammar, "'item'");
  StructuredOutput schema;
  schema.kind = StructuredOutput::Kind::kJsonSchema;
  schema.schema = {{"type", "integer"}, {"multipleOf", 3}};
  refused(schema, "multipleOf");
  StructuredOutput re;
  re.kind = StructuredOutput::Kind::kRegex;
  re.pattern = "(a)\\1";
  refused(re, "regex");
  // The engine still serves.
  EXPECT_FALSE(run(request("ok2", "Still there?", 4, 0.0)).empty());
}

}  // namespace
// MAX_QUEUED: every waiting request holds an HTTP worker thread, so the queue is bounded.
TEST(EngineOptionsTest, MaxQueuedIsBounded) {
  EngineOptions o;
  for (int32_t v : {0, -1, EngineOptions::kMaxWaiting + 1}) {
    o.max_waiting = v;
    const Status s = o.validate();
    EXPECT_FALSE(s.is_ok()) << v;
    EXPECT_NE(s.message().find("MAX_QUEUED"), std::string::npos) << s.to_string();
  }
  for (int32_t v : {1, 64, EngineOptions::kMaxWaiting}) {
    o.max_waiting = v;
    EXPECT_TRUE(o.validate().is_ok()) << v;
  }
}

// LM_HEAD: unknown names are refused naming the setting; q4 serves (the demo's lm_head
// re-quantized at load) and a greedy reply is as long as asked.
TEST_F(EngineTest, LmHeadIsCheckedAndServes) {
  EngineOptions bad;
  for (const char* name : {"bf16", "q3", "Q4"}) {
    bad.lm_head = name;
    const Status s = bad.validate();
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_NE(s.message().find("LM_HEAD"), std::string::npos) << s.to_string();
  }
  for (const char* name : {"", "dense", "q4", "fp8"}) {
    bad.lm_head = name;
    EXPECT_TRUE(bad.validate().is_ok()) << name;
  }
  EngineOptions o = demo_options();
  o.parallel = 1;
  o.context = 256;
  o.lm_head = "q4";
  {
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value()) << e.status().to_string();
    Collector c;
    ASSERT_TRUE((*e)->submit(request("head", "The lighthouse keeper", 6, 0.0), c.sink()).is_ok());
    ASSERT_TRUE(c.wait());
    ASSERT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].finish_reason, FinishReason::kLength);
    EXPECT_EQ(c.finish[0].completion_tokens, 6);
  }
  o.lm_head = "q5";
  auto refused = Engine::create(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("LM_HEAD"), std::string::npos) << refused.status().to_string();
}

// TF_RELEASE_MODEL_PAGES=1 (what a GPU sharing the host's memory gets by itself): every view
// of the checkpoint gives its file pages back when the loader is done with it; the engine
// loads and serves the same greedy reply as with the pages kept (DENSE=q4: weights converted
// at load, so the views are let go during it).
TEST_F(EngineTest, ReleasingCheckpointPagesServesTheSameReply) {
  EngineOptions o = demo_options();
  o.parallel = 1;
  o.context = 256;
  o.dense = "q4";
  std::vector<std::string> replies;
  for (const char* release : {"0", "1"}) {
    setenv("TF_RELEASE_MODEL_PAGES", release, 1);
    auto e = Engine::create(o);
    unsetenv("TF_RELEASE_MODEL_PAGES");
    EXPECT_EQ(release_checkpoint_pages(), std::string(release) == "1");
    ASSERT_TRUE(e.has_value()) << e.status().to_string();
    Collector c;
    ASSERT_TRUE((*e)->submit(request("pages", "The lighthouse keeper", 12, 0.0), c.sink()).is_ok());
    ASSERT_TRUE(c.wait());
    ASSERT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].completion_tokens, 12);
    replies.push_back(c.text[0]);
  }
  set_release_checkpoint_pages(false);
  EXPECT_EQ(replies[0], replies[1]);
  EXPECT_FALSE(replies[0].empty());
}

// An exllamav3-style conversion of the demo checkpoint (every linear outside the routed
// experts and routers stored EXL3, lm_head included; quantization_config without a scope)
// serves the same greedy reply as its twin holding those linears dequantized: the engine
// opens, plans memory for and loads it like any checkpoint.
TEST_F(EngineTest, Exl3ConversionServesLikeItsDequantizedTwin) {
  const fs::path exl3_dir = root_ / "exl3-all", twin_dir = root_ / "exl3-twin";
  for (const fs::path& d : {exl3_dir, twin_dir}) {
    fs::create_directories(d);
    for (const auto& f : fs::directory_iterator(model_dir_))
      if (f.path().extension() != ".safetensors" && f.path().filename() != "config.json")
        fs::copy_file(f.path(), d / f.path().filename(), fs::copy_options::overwrite_existing);
  }
  auto ckpt = Checkpoint::open(model_dir_);
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  std::vector<std::pair<std::string, Tensor>> dequantized;
  auto exl3 = synthetic_exl3_conversion(**ckpt, Exl3SyntheticOptions(), {4}, &dequantized);
  ASSERT_TRUE(exl3.has_value()) << exl3.status().to_string();
  std::map<std::string, Tensor> replaced(dequantized.begin(), dequantized.end());
  std::vector<std::pair<std::string, Tensor>> twin;
  for (const std::string& n : (*ckpt)->names())
    twin.emplace_back(n, replaced.count(n) ? replaced.at(n) : *(*ckpt)->tensor(n));
  const size_t converted = dequantized.size();
  ASSERT_GT(converted, 10u);
  ASSERT_TRUE(write_safetensors((exl3_dir / "model.safetensors").string(), *exl3).is_ok());
  ASSERT_TRUE(write_safetensors((twin_dir / "model.safetensors").string(), twin).is_ok());
  std::ifstream in(fs::path(model_dir_) / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  std::ofstream(twin_dir / "config.json") << cfg.dump(1);
  cfg["quantization_config"] = {{"quant_method", "exl3"}, {"version", "0.0.43"}, {"bits", 4.0}, {"codebook", "mcg"}};
  std::ofstream(exl3_dir / "config.json") << cfg.dump(1);

  std::string replies[2];
  for (int i = 0; i < 2; ++i) {
    EngineOptions o = demo_options();
    o.model_dir = (i == 0 ? exl3_dir : twin_dir).string();
    o.parallel = 1;
    o.context = 256;
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value()) << o.model_dir << ": " << e.status().to_string();
    Collector c;
    ASSERT_TRUE((*e)->submit(request("x", "The lighthouse keeper", 8, 0.0), c.sink()).is_ok());
    ASSERT_TRUE(c.wait());
    ASSERT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].completion_tokens, 8);
    replies[i] = c.text[0];
  }
  EXPECT_EQ(replies[0], replies[1]);
  EXPECT_NE(replies[0], run(request("y", "The lighthouse keeper", 8, 0.0)));  // the linears were replaced
}

}  // namespace tf::engine

namespace tf::engine {
namespace {

using test::data_url_of;

// A chat with two images and a video, rendered with its media.
Expected<RenderedPrompt> media_prompt(const EngineApi& engine) {
  const fs::path data(TF_TEST_DATA_DIR);
  const fs::path images = data / "model" / "tiny-vision" / "images";
  ChatPrompt chat;
  chat.reasoning_effort = "none";
  chat.messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content",
         {{{"type", "text"}, {"text", "Compare these."}},
          {{"type", "image_url"}, {"image_url", {{"url", data_url_of(images / "b_pad_130x90.png", "image/png")}}}},
          {{"type", "video_url"},
           {"video_url", {{"url", data_url_of(data / "media" / "clip_64x48_12f_6fps.mp4", "video/mp4")}}}},
          {{"type", "image_url"}, {"image_url", {{"url", data_url_of(images / "f_photo_100x75.jpg", "image/jpeg")}}}}}}}});
  return engine.render_chat_media(chat);
}

TEST_F(EngineTest, MediaEncodedAFewPatchesPerStepGiveTheSameReply) {
  auto rendered = media_prompt(*engine_);
#if !TF_HAVE_VIDEO
  // A build without FFmpeg refuses the video, saying why; the rest needs one.
  ASSERT_FALSE(rendered.has_value());
  EXPECT_EQ(rendered.status().code(), StatusCode::kUnimplemented) << rendered.status().to_string();
  EXPECT_NE(rendered.status().message().find("without FFmpeg"), std::string::npos) << rendered.status().to_string();
  return;
#endif
  ASSERT_TRUE(rendered.has_value()) << rendered.status().to_string();
  ASSERT_NE(rendered->media, nullptr);
  auto greedy = [&](EngineApi& engine, const std::string& id) {
    GenerationRequest g;
    g.request_id = id;
    g.prompt_tokens = rendered->tokens;
    g.media = rendered->media;
    g.sampling.max_tokens = 8;
    g.sampling.temperature = 0;
    g.sampling.ignore_eos = true;
    Collector c;
    EXPECT_TRUE(engine.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    return c.text[0];
  };
  const std::string whole = greedy(*engine_, "media-whole");
  EXPECT_FALSE(whole.empty());
  // 16 patches per step: each image (80 patches) in a step of its own, the video's temporal
  // groups (48 patches each) one per step; the features are the same bits.
  EngineOptions o = demo_options();
  o.media_patches_per_step = 16;
  auto stepped = Engine::create(o);
  ASSERT_TRUE(stepped.has_value()) << stepped.status().to_string();
  EXPECT_EQ(greedy(**stepped, "media-stepped"), whole);

  // A request cancelled while its media wait to be encoded leaves nothing behind: the engine
  // goes on, and the queue count comes back to zero.
  GenerationRequest g;
  g.request_id = "media-cancelled";
  g.prompt_tokens = rendered->tokens;
  g.media = rendered->media;
  g.sampling.max_tokens = 4;
  Collector ignored;
  ASSERT_TRUE((*stepped)->submit(std::move(g), ignored.sink()).is_ok());
  (*stepped)->cancel("media-cancelled");
  EXPECT_EQ(greedy(**stepped, "media-after-cancel"), whole);
  EXPECT_TRUE(eventually([&] { return !(*stepped)->health().busy; }));
  EXPECT_EQ((*stepped)->health().requests_waiting, 0);
}

// VISION=0: the tower is not loaded; a media part is a clean refusal that says why, text is served.
TEST_F(EngineTest, VisionOffRefusesMediaSayingSo) {
  EngineOptions o = demo_options();
  o.vision = false;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  ChatPrompt chat;
  const std::string url = data_url_of(fs::path(TF_TEST_DATA_DIR) / "model" / "tiny-vision" / "images" / "a_tiny_20x30.png", "image/png");
  chat.messages = nlohmann::json::array(
      {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "look"}}, {{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}});
  auto r = (*e)->render_chat_media(chat);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("VISION=0"), std::string::npos) << r.status().to_string();
  auto with_tower = engine_->render_chat_media(chat);
  EXPECT_TRUE(with_tower.has_value()) << with_tower.status().to_string();
  GenerationRequest g = request("vision-off-text", "Just text.", 4, 0.0);
  Collector c;
  ASSERT_TRUE((*e)->submit(std::move(g), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  EXPECT_FALSE(c.error) << c.status.to_string();
}

TEST_F(EngineTest, UndecodableMediaAreRefusedNamingThePart) {
  ChatPrompt chat;
  chat.messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content", {{{"type", "text"}, {"text", "look"}}, {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}}}}});
  auto r = engine_->render_chat_media(chat);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("messages[0].content[1]"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace tf::engine

namespace tf::engine {
namespace {

// Prompt reuse (engine_prompt_reuse.cc) on the demo checkpoint: prefill chunks of 32 and
// pages of 64, so states are kept at multiples of 64 tokens.
class PromptReuseTest : public EngineTest {
 protected:
  struct Reply {
    std::string text;
    std::vector<double> logprobs;
    int64_t cached = -1;
  };
  static std::string long_text(const std::string& topic, int words) {
    std::string s = topic + ":";
    for (int k = 0; k < words; ++k) s += " " + topic.substr(0, 3) + std::to_string(k * 7 % 101);
    return s;
  }
  static GenerationRequest sampled(const std::string& id, std::vector<int32_t> tokens, int64_t max_tokens) {
    GenerationRequest g;
    g.request_id = id;
    g.prompt_tokens = std::move(tokens);
    g.sampling.max_tokens = max_tokens;
    g.sampling.temperature = 1.0;  // no seed: the prompt's own
    g.sampling.ignore_eos = true;
    g.sampling.logprobs = true;
    return g;
  }
  // A rendered chat as the server submits it: its tokens, media and system block.
  static GenerationRequest rendered_request(const std::string& id, const RenderedPrompt& p, int64_t max_tokens) {
    GenerationRequest g = sampled(id, p.tokens, max_tokens);
    g.media = p.media;
    g.shared_prefix_tokens = p.system_tokens;
    return g;
  }
  static Reply run_on(Engine& e, GenerationRequest g) {
    Collector c;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    Reply r{c.text[0], {}, c.finish[0].cached_prompt_tokens};
    for (const auto& l : c.logprobs[0]) r.logprobs.push_back(l.logprob);
    return r;
  }
  // PARALLEL 1, a 1,024-token window and 2 kept prompts: a pool of two windows (32 pages).
  static std::unique_ptr<Engine> small_engine() {
    EngineOptions o = demo_options();
    o.parallel = 1;
    o.context = 1024;
    o.kept_prompts = 2;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return e.has_value() ? std::move(*e) : nullptr;
  }
  // The same checkpoint without prompt reuse: what every reply must equal, bit for bit.
  static Engine& fresh_engine() {
    if (!fresh_) {
      EngineOptions o = demo_options();
      o.kept_prompts = 0;
      auto e = Engine::create(o);
      EXPECT_TRUE(e.has_value()) << e.status().to_string();
      fresh_ = std::move(*e);
    }
    return *fresh_;
  }
  static void TearDownTestSuite() {
    fresh_.reset();
    EngineTest::TearDownTestSuite();
  }
  static inline std::unique_ptr<Engine> fresh_;
};

TEST_F(PromptReuseTest, RepeatedPromptResumesWithTheSameReply) {
  const std::vector<int32_t> p = prompt(long_text("repeated", 90));
  const auto n = static_cast<int64_t>(p.size());
  ASSERT_GT(n, 130);
  const Reply first = run_on(*engine_, sampled("r1", p, 16));
  EXPECT_EQ(first.cached, 0);
  wait_idle();
  const EngineHealth h = engine_->health();
  EXPECT_GE(h.kept_prompts, 1);
  EXPECT_GE(h.kept_prompt_tokens, (n - 1) / 64 * 64);
  EXPECT_EQ(h.pool_free_tokens, h.pool_tokens) << "kept prompts' pages count as free";
  EXPECT_GE(h.kept_mix.prompt_end, 1);
  EXPECT_EQ(h.kept_mix.prompt_end + h.kept_mix.system_block + h.kept_mix.shared_prefix + h.kept_mix.restored,
            h.kept_prompts);
  EXPECT_GT(h.iteration_s, 0.0);
  EXPECT_GT(h.iteration_s_mean, 0.0);
  const Reply second = run_on(*engine_, sampled("r2", p, 16));
  EXPECT_EQ(second.cached, (n - 1) / 64 * 64);
  EXPECT_EQ(engine_->health().prompts_resumed_total, h.prompts_resumed_total + 1);
  EXPECT_EQ(engine_->health().chats_continued_total, h.chats_continued_total) << "a repeat continues no chat";
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.logprobs, first.logprobs);  // bit for bit
  const Reply fresh = run_on(fresh_engine(), sampled("r3", p, 16));
  EXPECT_EQ(fresh.cached, 0);
  EXPECT_EQ(fresh.text, first.text);
  EXPECT_EQ(fresh.logprobs, first.logprobs);
  EXPECT_GE(engine_->health().cached_tokens_total, second.cached);
}

// The next turn of a conversation starts with the previous prompt: it resumes from it.
TEST_F(PromptReuseTest, NextTurnResumesFromThePreviousPrompt) {
  std::vector<int32_t> p = prompt(long_text("conversation", 80));
  const Reply turn1 = run_on(*engine_, sampled("t1", p, 12));
  const int64_t kept = (static_cast<int64_t>(p.size()) - 1) / 64 * 64;
  std::vector<int32_t> more = prompt(turn1.text + long_text(" and then", 40));
  p.insert(p.end(), more.begin(), more.end());
  const int64_t continued_before = engine_->health().chats_continued_total;
  const Reply turn2 = run_on(*engine_, sampled("t2", p, 12));
  EXPECT_GE(turn2.cached, kept);
  EXPECT_GT(turn2.cached, 0);
  EXPECT_EQ(engine_->health().chats_continued_total, continued_before + 1);
  const Reply fresh = run_on(fresh_engine(), sampled("t3", p, 12));
  EXPECT_EQ(turn2.text, fresh.text);
  EXPECT_EQ(turn2.logprobs, fresh.logprobs);
}

// A reply's warm-up (GenerationRequest::warm_from): the chat with its reply runs as a prompt
// from the state its own prompt kept, keeps the state after the reply, and the next turn
// resumes there with a fresh run's reply. One without such a state, or that would keep
// nothing new, ends at once.
TEST_F(PromptReuseTest, AReplyWarmUpKeepsTheStateAfterTheReply) {
  std::vector<int32_t> p = prompt(long_text("warming", 70));
  const auto n = static_cast<int64_t>(p.size());
  const Reply turn1 = run_on(*engine_, sampled("w1", p, 150));
  std::vector<int32_t> chat = p;
  const std::vector<int32_t> reply = prompt(turn1.text);
  chat.insert(chat.end(), reply.begin(), reply.end());
  ASSERT_GT(static_cast<int64_t>(chat.size()) / 64, (n - 1) / 64)
      << "the reply passes a point states are kept at";
  auto warm_up = [](std::string id, std::vector<int32_t> tokens, int64_t from) {
    GenerationRequest g;
    g.request_id = std::move(id);
    g.prompt_tokens = std::move(tokens);
    g.sampling.max_tokens = 0;
    g.warm_from = from;
    g.priority = 1000;
    Collector c;
    EXPECT_TRUE(engine_->submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].completion_tokens, 0);
    EXPECT_TRUE(c.text[0].empty());
  };
  const EngineHealth before = engine_->health();
  warm_up("warm1", chat, n);
  wait_idle();
  const EngineHealth after = engine_->health();
  EXPECT_EQ(after.reply_warmups_total, before.reply_warmups_total + 1);
  EXPECT_EQ(after.reply_warmup_tokens_total - before.reply_warmup_tokens_total,
            static_cast<int64_t>(chat.size()) - (n - 1) / 64 * 64)
      << "it ran from its prompt's kept state";
  EXPECT_EQ(after.requests_total, before.requests_total) << "not a client's request";
  EXPECT_EQ(after.prompts_resumed_total, before.prompts_resumed_total);
  // The same warm-up again would keep nothing new; a chat never seen has no state to start from.
  warm_up("warm2", chat, n);
  warm_up("warm3", prompt(long_text("unseen", 90)), 10);
  EXPECT_EQ(engine_->health().reply_warmups_total, after.reply_warmups_total);
  // The next turn resumes after the reply, with the reply of a fresh run.
  std::vector<int32_t> turn2_prompt = chat;
  const std::vector<int32_t> more = prompt(long_text(" and next", 20));
  turn2_prompt.insert(turn2_prompt.end(), more.begin(), more.end());
  const Reply turn2 = run_on(*engine_, sampled("w4", turn2_prompt, 12));
  EXPECT_EQ(turn2.cached, (static_cast<int64_t>(chat.size()) - 1) / 64 * 64);
  EXPECT_GT(turn2.cached, n);
  const Reply fresh = run_on(fresh_engine(), sampled("w5", turn2_prompt, 12));
  EXPECT_EQ(turn2.text, fresh.text);
  EXPECT_EQ(turn2.logprobs, fresh.logprobs);
  // Refused: a warm-up generates nothing and has one choice.
  GenerationRequest bad;
  bad.request_id = "warm-bad";
  bad.prompt_tokens = p;
  bad.sampling.max_tokens = 4;
  bad.warm_from = 1;
  Collector c;
  EXPECT_EQ(engine_->submit(std::move(bad), c.sink()).code(), StatusCode::kInvalidArgument);
}

// Prompts that share a long beginning (a system prompt) and then part: the second keeps its
// state where it parts from the first, and the third resumes from there.
TEST_F(PromptReuseTest, SharedBeginningIsKeptWhereTwoPromptsPart) {
  const std::vector<int32_t> system = prompt(long_text("system", 70));
  auto with = [&](const std::string& q) {
    std::vector<int32_t> p = system;
    std::vector<int32_t> tail = prompt(long_text(q, 60));
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const int64_t shared = static_cast<int64_t>(system.size()) / 64 * 64;
  ASSERT_GT(shared, 0);
  EXPECT_EQ(run_on(*engine_, sampled("s1", with("alpha"), 4)).cached, 0);
  EXPECT_EQ(run_on(*engine_, sampled("s2", with("bravo"), 4)).cached, 0);
  const std::vector<int32_t> third = with("charlie");
  const Reply resumed = run_on(*engine_, sampled("s3", third, 8));
  EXPECT_GE(resumed.cached, shared);
  const Reply fresh = run_on(fresh_engine(), sampled("s4", third, 8));
  EXPECT_EQ(resumed.text, fresh.text);
  EXPECT_EQ(resumed.logprobs, fresh.logprobs);
}

// Chats with the same system prompt: the first keeps a state at the end of its system block
// (render_chat_media's system_tokens), so the second already resumes from it.
TEST_F(PromptReuseTest, SecondChatWithTheSameSystemPromptResumes) {
  auto chat_with = [&](const std::string& question) {
    ChatPrompt chat;
    chat.messages = nlohmann::json::array({{{"role", "system"}, {"content", long_text("instructions", 90)}},
                                           {{"role", "user"}, {"content", long_text(question, 30)}}});
    auto r = engine_->render_chat_media(chat);
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    return *r;
  };
  const RenderedPrompt a = chat_with("first question"), b = chat_with("second question");
  {
    // Asked not to (/tokenize), the system block is not rendered: no mark, the same tokens.
    ChatPrompt counting;
    counting.messages = nlohmann::json::array({{{"role", "system"}, {"content", long_text("instructions", 90)}},
                                               {{"role", "user"}, {"content", long_text("first question", 30)}}});
    counting.find_system_block = false;
    auto c = engine_->render_chat_media(counting);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->system_tokens, 0);
    EXPECT_EQ(c->tokens, a.tokens);
  }
  ASSERT_GE(a.system_tokens, 128);
  EXPECT_EQ(a.system_tokens, b.system_tokens);
  ASSERT_LT(a.system_tokens, static_cast<int64_t>(a.tokens.size()));
  EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.begin() + a.system_tokens, b.tokens.begin()));
  EXPECT_EQ(run_on(*engine_, rendered_request("sys1", a, 8)).cached, 0);
  wait_idle();
  EXPECT_GE(engine_->health().kept_mix.system_block, 1);
  const int64_t continued_before = engine_->health().chats_continued_total;
  const Reply second = run_on(*engine_, rendered_request("sys2", b, 8));
  EXPECT_EQ(second.cached, b.system_tokens / 64 * 64);
  EXPECT_EQ(engine_->health().chats_continued_total, continued_before)
      << "another chat, not this one's next turn";
  const Reply fresh = run_on(fresh_engine(), rendered_request("sys3", b, 8));
  EXPECT_EQ(second.text, fresh.text);
  EXPECT_EQ(second.logprobs, fresh.logprobs);
  // A chat without a system message has no block to keep.
  ChatPrompt plain;
  plain.messages = nlohmann::json::array({{{"role", "user"}, {"content", "hello"}}});
  auto p = engine_->render_chat_media(plain);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->system_tokens, 0);
}

// Through an image: a chat with the same picture resumes past it; with another picture of the
// same size (the same placeholder tokens) it resumes no further than before the picture.
// A user turn with a picture between two texts, rendered by `e`.
RenderedPrompt image_chat(const Engine& e, const std::string& file) {
  const fs::path images = fs::path(TF_TEST_DATA_DIR) / "model" / "tiny-vision" / "images";
  ChatPrompt chat;
  chat.reasoning_effort = "none";
  chat.messages = nlohmann::json::array(
      {{{"role", "user"},
        {"content",
         {{{"type", "text"}, {"text", "look here: " + std::string(120, 'x')}},
          {{"type", "image_url"}, {"image_url", {{"url", data_url_of(images / file, "image/png")}}}},
          {{"type", "text"}, {"text", "and describe: " + std::string(180, 'y')}}}}}});
  auto r = e.render_chat_media(chat);
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  return r.has_value() ? *r : RenderedPrompt{};
}

// The patches of a rendered prompt's pictures (what the vision tower encodes for them).
int64_t patches_of(const RenderedPrompt& p) {
  int64_t n = 0;
  for (const PromptMediaItem& item : p.media->items) n += item.patches.grid_t * item.patches.grid_h * item.patches.grid_w;
  return n;
}

TEST_F(PromptReuseTest, ImagesMatchByTheirPixels) {
  const RenderedPrompt a = image_chat(*engine_, "b_pad_130x90.png"), same = image_chat(*engine_, "b_pad_130x90.png");
  const RenderedPrompt other = image_chat(*engine_, "c_down_300x400.png");
  ASSERT_NE(a.media, nullptr);
  const int64_t first = a.media->positions.front(), last = a.media->positions.back();
  ASSERT_GT(static_cast<int64_t>(a.tokens.size()) - 1, (last / 64 + 1) * 64) << "text after the picture";
  const EngineHealth h0 = engine_->health();
  EXPECT_EQ(run_on(*engine_, rendered_request("img1", a, 6)).cached, 0);
  EXPECT_EQ(engine_->health().vision_patches_total - h0.vision_patches_total, patches_of(a));
  const Reply again = run_on(*engine_, rendered_request("img2", same, 6));
  EXPECT_GT(again.cached, last) << "resumed past the picture";
  // ... so its picture was not encoded again.
  EXPECT_EQ(engine_->health().vision_patches_total - h0.vision_patches_total, patches_of(a));
  EXPECT_EQ(engine_->health().vision_patches_skipped_total - h0.vision_patches_skipped_total, patches_of(a));
  const Reply fresh = run_on(fresh_engine(), rendered_request("img3", same, 6));
  EXPECT_EQ(again.text, fresh.text);
  EXPECT_EQ(again.logprobs, fresh.logprobs);
  const Reply differs = run_on(*engine_, rendered_request("img4", other, 6));
  EXPECT_LE(differs.cached, first) << "never past a different picture";
  EXPECT_EQ(engine_->health().vision_patches_total - h0.vision_patches_total, patches_of(a) + patches_of(other));
  const Reply differs_fresh = run_on(fresh_engine(), rendered_request("img5", other, 6));
  EXPECT_EQ(differs.text, differs_fresh.text);
  EXPECT_EQ(differs.logprobs, differs_fresh.logprobs);
}

// A picture skipped because its prompt was to resume past it is encoded after all when the
// kept state is gone by the time the request is admitted. PARALLEL 1, a pool of 32 pages:
// a 1,000-token request queued before the repeat keeps its own state (15 pages) beside its
// 16 and so evicts the picture prompt's, while the repeat waits with its picture skipped.
TEST_F(PromptReuseTest, SkippedPicturesAreEncodedWhenTheResumeIsLost) {
  const std::unique_ptr<Engine> small = small_engine();
  ASSERT_NE(small, nullptr);
  Engine& e = *small;
  const RenderedPrompt a = image_chat(e, "b_pad_130x90.png");
  ASSERT_NE(a.media, nullptr);
  EXPECT_EQ(run_on(e, rendered_request("pic1", a, 4)).cached, 0);
  ASSERT_EQ(e.health().kept_prompts, 1);
  std::vector<int32_t> big = prompt(long_text("big one", 400));
  ASSERT_GE(big.size(), 1000u);
  big.resize(1000);
  Collector first, second;
  ASSERT_TRUE(e.submit(sampled("big", big, 8), first.sink()).is_ok());
  ASSERT_TRUE(e.submit(rendered_request("pic2", a, 6), second.sink()).is_ok());
  ASSERT_TRUE(first.wait());
  ASSERT_TRUE(second.wait());
  ASSERT_FALSE(first.error) << first.status.to_string();
  ASSERT_FALSE(second.error) << second.status.to_string();
  EXPECT_EQ(second.finish[0].cached_prompt_tokens, 0) << "its kept state gave way to the big request's";
  const EngineHealth h = e.health();
  EXPECT_EQ(h.vision_patches_total, 2 * patches_of(a)) << "skipped at first, then encoded for the prefill";
  EXPECT_EQ(h.vision_patches_skipped_total, 0);
  const Reply fresh = run_on(fresh_engine(), rendered_request("pic3", a, 6));
  std::vector<double> logprobs;
  for (const auto& l : second.logprobs[0]) logprobs.push_back(l.logprob);
  EXPECT_EQ(second.text[0], fresh.text);
  EXPECT_EQ(logprobs, fresh.logprobs);
}

TEST_F(PromptReuseTest, KeptPromptsOffReusesNothing) {
  const std::vector<int32_t> p = prompt(long_text("never", 90));
  EXPECT_EQ(run_on(fresh_engine(), sampled("o1", p, 4)).cached, 0);
  EXPECT_EQ(run_on(fresh_engine(), sampled("o2", p, 4)).cached, 0);
  EXPECT_EQ(fresh_engine().health().kept_prompts, 0);
}

// Kept prompts never keep a request out, and at most KEPT_PROMPTS are held. PARALLEL 1 and a
// 1,024-token window: a pool of two windows (32 pages). Prompts of 300 tokens are kept at 256
// (4 pages), prompts of 1,000 at 960 (15 pages).
TEST_F(PromptReuseTest, KeptPromptsAreCappedAndGiveWay) {
  const std::unique_ptr<Engine> small = small_engine();
  ASSERT_NE(small, nullptr);
  Engine& e = *small;
  ASSERT_EQ(e.health().pool_tokens, 2048);
  auto text_of = [&](const std::string& topic, size_t tokens) {
    std::vector<int32_t> p = prompt(long_text(topic, 400));
    EXPECT_GE(p.size(), tokens);
    p.resize(tokens);
    return p;
  };
  for (const char* topic : {"first", "second", "third"}) run_on(e, sampled(topic, text_of(topic, 300), 4));
  EXPECT_EQ(e.health().kept_prompts, 2) << "KEPT_PROMPTS caps them";
  run_on(e, sampled("big1", text_of("big one", 1000), 24));
  run_on(e, sampled("fourth", text_of("fourth", 300), 4));
  EngineHealth h = e.health();
  EXPECT_EQ(h.kept_prompts, 2);
  EXPECT_EQ(h.kept_prompt_tokens, 960 + 256);  // 19 pages kept, 13 unreserved
  // A request needing 16 pages: the least recently used kept prompt (big one's) gives way.
  const Reply r = run_on(e, sampled("big2", text_of("big two", 1000), 24));
  EXPECT_EQ(r.cached, 0);
  EXPECT_EQ(r.logprobs.size(), 24u);
  h = e.health();
  EXPECT_EQ(h.kept_prompts, 1);
  EXPECT_EQ(h.kept_prompt_tokens, 960) << "big two's own state, kept in place of the others";
  EXPECT_EQ(h.pool_free_tokens, h.pool_tokens);
  EXPECT_EQ(run_on(e, sampled("big2-again", text_of("big two", 1000), 4)).cached, 960);
  EXPECT_EQ(run_on(e, sampled("big1-again", text_of("big one", 1000), 4)).cached, 0) << "it was evicted";
}

// PROMPT_STORE (prompt_store.h): kept states are written to files, read back by the next
// engine on the same checkpoint and settings (a restart), and by the same engine after a
// state left the device; every resumed reply is the fresh run's bit for bit. A file that
// fails its checks is deleted and not used; another fingerprint's files are not read.
class PromptStoreTest : public PromptReuseTest {
 protected:
  static EngineOptions store_options(const fs::path& dir) {
    EngineOptions o = demo_options();
    o.prompt_store = dir.string();
    o.prompt_store_block_tokens = 64;  // the grain: every kept state's rows lie in blocks
    return o;
  }
  static std::unique_ptr<Engine> engine_at(const EngineOptions& o) {
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return e.has_value() ? std::move(*e) : nullptr;
  }
  static void wait_written(Engine& e, int64_t n) {
    eventually([&] { return e.health().prompt_store_written_total >= n; });  // written in the background
    EXPECT_GE(e.health().prompt_store_written_total, n);
  }
  // A prompt of exactly `tokens` tokens (kept at the same length, so stored in files of one size).
  static std::vector<int32_t> of_length(const std::string& topic, size_t tokens) {
    std::vector<int32_t> p = prompt(long_text(topic, 200));
    EXPECT_GE(p.size(), tokens);
    p.resize(tokens);
    return p;
  }
  // The files under the store's root (one fingerprint folder each) with this extension.
  static std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext = ".tfstate") {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path());
    return out;
  }
  void SetUp() override {
    dir_ = root_ / ("store-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PromptStoreTest, StatesSurviveARestart) {
  const std::vector<int32_t> p = prompt(long_text("restarted", 90));
  const auto n = static_cast<int64_t>(p.size());
  Reply first;
  {
    auto a = engine_at(store_options(dir_));
    ASSERT_NE(a, nullptr);
    first = run_on(*a, sampled("s1", p, 16));
    EXPECT_EQ(first.cached, 0);
    const EngineHealth h = a->health();
    EXPECT_TRUE(h.prompt_store);
  }  // the engine's stop writes what is queued
  const std::vector<fs::path> files = files_in(dir_);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::status(files[0]).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  const std::vector<fs::path> blocks = files_in(dir_, ".tfblock");
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), (n - 1) / 64);
  EXPECT_EQ(fs::status(blocks[0]).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  auto b = engine_at(store_options(dir_));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->health().prompt_store_files, 1);
  const Reply second = run_on(*b, sampled("s2", p, 16));
  EXPECT_EQ(second.cached, (n - 1) / 64 * 64);
  EXPECT_EQ(second.text, first.text);
  EXPECT_EQ(second.logprobs, first.logprobs);  // bit for bit
  const Reply fresh = run_on(fresh_engine(), sampled("s3", p, 16));
  EXPECT_EQ(fresh.logprobs, first.logprobs);
  EXPECT_EQ(b->health().prompt_store_restored_total, 1);
  EXPECT_EQ(b->health().prompt_store_read_ahead_total, 1) << "read while the request waited";
  EXPECT_EQ(b->health().kept_prompts, 1) << "the stored state became a kept prompt";
  EXPECT_EQ(b->health().kept_mix.restored, 1);
  EXPECT_EQ(run_on(*b, sampled("s4", p, 16)).cached, second.cached);
  EXPECT_EQ(b->health().prompt_store_restored_total, 1) << "the second resume is from the device";
}

TEST_F(PromptStoreTest, ACorruptFileIsDeletedAndNotUsed) {
  const std::vector<int32_t> p = prompt(long_text("corrupted", 90));
  Reply first;
  {
    auto a = engine_at(store_options(dir_));
    ASSERT_NE(a, nullptr);
    first = run_on(*a, sampled("c1", p, 8));
  }
  std::vector<fs::path> files = files_in(dir_);
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(-100, std::ios::end);
    f.write(&c, 1);
  }
  auto b = engine_at(store_options(dir_));
  ASSERT_NE(b, nullptr);
  const Reply second = run_on(*b, sampled("c2", p, 8));
  EXPECT_EQ(second.cached, 0);
  EXPECT_EQ(second.logprobs, first.logprobs);
  EXPECT_EQ(b->health().prompt_store_failed_reads_total, 1);
  EXPECT_EQ(b->health().prompt_store_restored_total, 0);
  wait_written(*b, 1);  // deleted, then written again by the run in full
  b.reset();
  auto again = engine_at(store_options(dir_));
  ASSERT_NE(again, nullptr);
  const Reply third = run_on(*again, sampled("c3", p, 8));
  EXPECT_GT(third.cached, 0);
  EXPECT_EQ(third.logprobs, first.logprobs);
  // Another prefill chunk (states at other multiples, other bits): another folder, nothing read.
  EngineOptions other = store_options(dir_);
  other.prefill_chunk = 64;
  auto c = engine_at(other);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->health().prompt_store_files, 0);
}

TEST_F(PromptStoreTest, AnEvictedStateResumesFromTheFile) {
  EngineOptions o = store_options(dir_);
  o.parallel = 1;
  o.kept_prompts = 2;  // the third prompt evicts the first from the device
  auto e = engine_at(o);
  ASSERT_NE(e, nullptr);
  std::map<std::string, Reply> first;
  std::map<std::string, std::vector<int32_t>> prompts;
  for (const char* topic : {"first", "second", "third"}) {
    prompts[topic] = prompt(long_text(topic, 90));
    first[topic] = run_on(*e, sampled(topic, prompts[topic], 8));
  }
  wait_written(*e, 3);
  EXPECT_EQ(e->health().kept_prompts, 2);
  EXPECT_EQ(e->health().prompt_store_files, 3);
  const Reply again = run_on(*e, sampled("first-again", prompts["first"], 8));
  EXPECT_EQ(again.cached, (static_cast<int64_t>(prompts["first"].size()) - 1) / 64 * 64);
  EXPECT_EQ(again.logprobs, first["first"].logprobs);
  EXPECT_EQ(e->health().prompt_store_restored_total, 1);
  EXPECT_EQ(e->health().prompt_store_read_ahead_total, 1);
  EXPECT_EQ(e->health().prompt_store_written_total, 3) << "a restored state is not written again";
}

TEST_F(PromptStoreTest, TheFolderStaysWithinItsBound) {
  EngineOptions o = store_options(dir_);
  auto probe = engine_at(o);
  ASSERT_NE(probe, nullptr);
  run_on(*probe, sampled("b0", of_length("bounded", 200), 4));
  wait_written(*probe, 1);
  const int64_t one = probe->health().prompt_store_bytes;
  ASSERT_GT(one, 0);
  probe.reset();
  fs::remove_all(dir_);
  o.prompt_store_gib = (2.5 * static_cast<double>(one)) / 1073741824.0;  // room for two such files
  auto e = engine_at(o);
  ASSERT_NE(e, nullptr);
  int64_t written = 0;
  for (const char* topic : {"bound one", "bound two", "bound three", "bound four"}) {
    run_on(*e, sampled(topic, of_length(topic, 200), 4));
    wait_written(*e, ++written);
  }
  const EngineHealth h = e->health();
  EXPECT_EQ(h.prompt_store_written_total, 4);
  EXPECT_EQ(h.prompt_store_files, 2);
  EXPECT_LE(h.prompt_store_bytes, static_cast<int64_t>(2.5 * static_cast<double>(one)));
  EXPECT_EQ(files_in(dir_).size(), 2u);
  EXPECT_EQ(static_cast<int64_t>(files_in(dir_, ".tfblock").size()), h.prompt_store_blocks)
      << "the evicted states' blocks went with them";
}

// A chat's next turn starts with the last turn's prompt: its state writes only the blocks the
// new tokens complete, and after a restart it resumes from the blocks the turns share.
TEST_F(PromptStoreTest, AChatsNextTurnWritesOnlyItsNewBlocks) {
  const std::vector<int32_t> turn1 = prompt(long_text("turns", 90));
  std::vector<int32_t> turn2 = turn1;
  const std::vector<int32_t> more = prompt(long_text("and then", 60));
  turn2.insert(turn2.end(), more.begin(), more.end());
  const auto n1 = static_cast<int64_t>(turn1.size()), n2 = static_cast<int64_t>(turn2.size());
  Reply second;
  {
    auto a = engine_at(store_options(dir_));
    ASSERT_NE(a, nullptr);
    run_on(*a, sampled("t1", turn1, 4));
    wait_written(*a, 1);
    const int64_t first_bytes = a->health().prompt_store_written_bytes_total;
    EXPECT_EQ(a->health().prompt_store_blocks, (n1 - 1) / 64);
    const std::vector<fs::path> blocks1 = files_in(dir_, ".tfblock"), states1 = files_in(dir_);
    second = run_on(*a, sampled("t2", turn2, 8));
    EXPECT_EQ(second.cached, (n1 - 1) / 64 * 64) << "from the device";
    wait_written(*a, 2);
    const EngineHealth h = a->health();
    EXPECT_EQ(h.prompt_store_blocks, (n2 - 1) / 64) << "the first turn's blocks are shared";
    // What the second turn wrote: the blocks that were not there, and its state file.
    int64_t expected = 0;
    for (const fs::path& f : files_in(dir_, ".tfblock"))
      if (std::find(blocks1.begin(), blocks1.end(), f) == blocks1.end()) expected += fs::file_size(f);
    for (const fs::path& f : files_in(dir_))
      if (std::find(states1.begin(), states1.end(), f) == states1.end()) expected += fs::file_size(f);
    EXPECT_EQ(h.prompt_store_written_bytes_total - first_bytes, expected);
    EXPECT_EQ(h.prompt_store_bytes, first_bytes + expected);
  }
  // A restarted engine resumes the second turn from the stored blocks, bit for bit.
  auto b = engine_at(store_options(dir_));
  ASSERT_NE(b, nullptr);
  const Reply again = run_on(*b, sampled("t2-again", turn2, 8));
  EXPECT_EQ(again.cached, (n2 - 1) / 64 * 64);
  EXPECT_EQ(again.logprobs, second.logprobs);
  EXPECT_EQ(b->health().prompt_store_restored_total, 1);
  const Reply fresh = run_on(fresh_engine(), sampled("t2-fresh", turn2, 8));
  EXPECT_EQ(fresh.logprobs, second.logprobs);
}

}  // namespace
}  // namespace tf::engine

namespace tf::engine {
namespace {

// Speculative decoding against the same checkpoint without it (COPY=0): every reply, its
// logprobs, finish reason and token count are the same. The demo's random weights never
// repeat their context, so copy drafts would rarely fire; the drafts come from a recorder
// (a first run notes each choice's prompt + reply) replayed as an oracle, right at every
// row, or wrong at one row that moves from step to step (every position rejected in turn).
class SpeculationTest : public EngineTest {
 protected:
  struct Reply {
    std::string text;
    std::vector<float> logprobs;
    FinishReason finish = FinishReason::kStop;
    int64_t tokens = 0;
    bool operator==(const Reply&) const = default;
  };
  static Reply reply(Engine& e, GenerationRequest g) {
    Collector c;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    Reply r{c.text[0], {}, c.finish[0].finish_reason, c.finish[0].completion_tokens};
    for (const auto& l : c.logprobs[0]) r.logprobs.push_back(l.logprob);
    return r;
  }
  static std::unique_ptr<Engine> engine_with(DraftOracle& o) {
    EngineOptions opts = demo_options();
    opts.draft_model = "none";  // only the oracle's drafts
    opts.drafter = [&o](std::span<const int32_t> t, int max) { return o.drafts(t, max); };
    auto e = Engine::create(opts);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return e.has_value() ? std::move(*e) : nullptr;
  }
  static Engine& serial_engine() {
    if (!serial_) {
      EngineOptions o = demo_options();
      o.copy_drafts = false;
      o.draft_model = "none";
      auto e = Engine::create(o);
      EXPECT_TRUE(e.has_value()) << e.status().to_string();
      serial_ = std::move(*e);
    }
    return *serial_;
  }
  static void TearDownTestSuite() {
    serial_.reset();
    EngineTest::TearDownTestSuite();
  }
  // The demo's random weights never repeat themselves; a logit bias that leaves them three
  // tokens to choose from makes their reply repeat bigrams, so drafts find matches (the bias
  // applies to every verified row exactly as to a serial step). With logprobs.
  static GenerationRequest few_token_request(const std::string& id, const std::string& text, int max_tokens,
                                             double temperature) {
    GenerationRequest g = request(id, text, max_tokens, temperature);
    const std::vector<int32_t> few = prompt(" harbour light sea");
    EXPECT_GE(few.size(), 2u);
    for (int32_t t : few) g.sampling.logit_bias[t] = 30.0;
    g.sampling.logprobs = true;
    return g;
  }
  static std::vector<GenerationRequest> requests() {
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 3; ++i) {
      for (double temperature : {0.0, 1.0}) {
        GenerationRequest g = request("spec" + std::to_string(i) + "-" + std::to_string(temperature),
                                      "Request " + std::to_string(i) + ": tell me about the sea.", 40, temperature);
        g.sampling.logprobs = true;
        g.sampling.top_logprobs = 2;
        if (i == 1) g.sampling.seed = 42;
        if (i == 2) g.sampling.repetition_penalty = 1.3;  // penalties count the drafts before each row
        reqs.push_back(std::move(g));
      }
    }
    return reqs;
  }
  static inline std::unique_ptr<Engine> serial_;
};

TEST_F(SpeculationTest, RepliesEqualSerialDecodingWhateverTheDrafts) {
  const std::vector<GenerationRequest> reqs = requests();
  std::vector<Reply> serial;
  for (const GenerationRequest& g : reqs) serial.push_back(reply(serial_engine(), g));
  EXPECT_EQ(serial_engine().health().spec_steps_total, 0);  // COPY=0 verifies nothing
  for (int wrong_at : {-1, 0, 3}) {
    DraftOracle oracle;
    oracle.wrong_at = wrong_at;
    auto e = engine_with(oracle);
    ASSERT_TRUE(e);
    for (const GenerationRequest& g : reqs) EXPECT_EQ(reply(*e, g), serial[&g - reqs.data()]) << g.request_id;
    EXPECT_EQ(e->health().spec_steps_total, 0);  // nothing drafted while recording
    oracle.recording = false;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Reply r = reply(*e, reqs[i]);
      EXPECT_EQ(r.text, serial[i].text) << reqs[i].request_id << " wrong at " << wrong_at;
      EXPECT_EQ(r.logprobs, serial[i].logprobs) << reqs[i].request_id << " wrong at " << wrong_at;
      EXPECT_EQ(r.finish, serial[i].finish) << reqs[i].request_id;
      EXPECT_EQ(r.tokens, serial[i].tokens) << reqs[i].request_id;
    }
    const EngineHealth h = e->health();
    std::printf("[drafts wrong at %d] %lld verify steps, %lld drafts, %lld kept, %lld model steps\n", wrong_at,
                static_cast<long long>(h.spec_steps_total), static_cast<long long>(h.drafted_tokens_total),
                static_cast<long long>(h.accepted_tokens_total), static_cast<long long>(h.model_steps));
    EXPECT_GT(h.spec_steps_total, 0);
    if (wrong_at != 0) {
      EXPECT_GT(h.accepted_tokens_total, 0);  // wrong at 0: every first draft is rejected
    }
    EXPECT_LE(h.accepted_tokens_total, h.drafted_tokens_total);
    // A right oracle keeps every draft; a wrong one loses some.
    if (wrong_at < 0) {
      EXPECT_EQ(h.accepted_tokens_total, h.drafted_tokens_total);
    } else {
      EXPECT_LT(h.accepted_tokens_total, h.drafted_tokens_total);
    }
  }
}

// Engine::step_seconds (WATCHDOG_S's reading): how long the step in flight has run, 0 between
// steps. A drafter that takes 300 ms makes each decode step at least that long.
TEST_F(SpeculationTest, StepSecondsTimesTheStepInFlight) {
  EngineOptions o = demo_options();
  o.draft_model = "none";
  o.drafter = [](std::span<const int32_t>, int) {
    std::this_thread::sleep_for(300ms);
    return std::vector<int32_t>{};
  };
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  EXPECT_EQ((*e)->step_seconds(), 0.0) << "idle";
  Collector c;
  ASSERT_TRUE((*e)->submit(request("slow", "Slow steps:", 3, 0.0), c.sink()).is_ok());
  double most = 0.0;
  while (!c.wait(std::chrono::seconds(0))) {
    most = std::max(most, (*e)->step_seconds());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(c.error) << c.status.to_string();
  EXPECT_GE(most, 0.2) << "a 300 ms step was seen in flight";
  EXPECT_LT(most, 30.0);
  eventually([&] { return (*e)->step_seconds() == 0.0; });
  EXPECT_EQ((*e)->step_seconds(), 0.0) << "idle again";
}

// `draft: false` (GenerationRequest::drafts): the request is decoded serially on an engine that
// drafts every step, and gives the reply it gives with drafts.
TEST_F(SpeculationTest, ADraftFalseRequestVerifiesNoDrafts) {
  EngineOptions o = demo_options();
  o.always_draft = true;
  o.mtp_max = 3;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  // Read as each reply finishes: a verify step's drafts are counted before its tokens are taken.
  auto drafted_total = [&] { return (*e)->health().drafted_tokens_total; };
  for (double temperature : {0.0, 1.0}) {
    GenerationRequest g =
        few_token_request("nodraft" + std::to_string(temperature), "Harbour light again:", 32, temperature);
    const int64_t before = drafted_total();
    const Reply drafted = reply(**e, g);
    const int64_t mid = drafted_total();
    EXPECT_GT(mid, before) << "this engine drafts";
    g.drafts = false;
    EXPECT_EQ(reply(**e, g), drafted) << temperature;
    EXPECT_EQ(drafted_total(), mid) << "no drafts for draft: false";
    EXPECT_EQ(reply(serial_engine(), g), drafted);
  }
}

// The copy drafter itself (no oracle), made eager with 2-token matches on prompts that repeat
// themselves: whatever it proposes and the policy lets through, replies are the serial ones.
TEST_F(SpeculationTest, CopyDraftsGiveTheSerialReplies) {
  EngineOptions o = demo_options();
  o.copy_match = 2;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  for (int i = 0; i < 4; ++i) {
    const GenerationRequest g = few_token_request(
        "copy" + std::to_string(i), "Say it again, harbour light " + std::to_string(i) + ":", 48, i % 2 == 0 ? 0.0 : 1.0);
    EXPECT_EQ(reply(**e, g), reply(serial_engine(), g)) << g.request_id;
  }
  const EngineHealth h = (*e)->health();
  std::printf("[copy drafts, 2-token matches] %lld verify steps, %lld drafts, %lld kept\n",
              static_cast<long long>(h.spec_steps_total), static_cast<long long>(h.drafted_tokens_total),
              static_cast<long long>(h.accepted_tokens_total));
  EXPECT_GT(h.spec_steps_total, 0);
}

// The MTP layer's drafts (DRAFTER=mtp, made inside the model step), made every step whatever
// the policy would say: the demo's random layer is mostly wrong, some rows are kept, and the
// replies, logprobs and finish reasons are the serial ones.
TEST_F(SpeculationTest, MtpDraftsGiveTheSerialReplies) {
  EngineOptions o = demo_options();
  o.copy_drafts = false;
  o.always_draft = true;
  o.mtp_max = 3;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  for (const GenerationRequest& g : requests()) EXPECT_EQ(reply(**e, g), reply(serial_engine(), g)) << g.request_id;
  // The same with a bias that leaves three tokens to choose from (some drafts are then right).
  for (int i = 0; i < 2; ++i) {
    const GenerationRequest g =
        few_token_request("mtp-few" + std::to_string(i), "Harbour light " + std::to_string(i) + ":", 40, i == 0 ? 0.0 : 1.0);
    EXPECT_EQ(reply(**e, g), reply(serial_engine(), g)) << g.request_id;
  }
  const EngineHealth h = (*e)->health();
  std::printf("[MTP drafts every step] %lld verify steps, %lld drafts, %lld kept, %lld model steps\n",
              static_cast<long long>(h.spec_steps_total), static_cast<long long>(h.mtp_drafted_tokens_total),
              static_cast<long long>(h.mtp_accepted_tokens_total), static_cast<long long>(h.model_steps));
  EXPECT_GT(h.spec_steps_total, 20);
  EXPECT_EQ(h.mtp_drafted_tokens_total, h.drafted_tokens_total);  // COPY=0: every draft is the layer's
  EXPECT_GT(h.mtp_drafted_tokens_total, 2 * h.spec_steps_total);
  EXPECT_LE(h.mtp_accepted_tokens_total, h.mtp_drafted_tokens_total);
}

// The default policy where the layer's drafts do not pay (the demo's random MTP layer; on the
// CPU backend every verify row costs as much as a step): streams draft less as their drafts
// fail or cost, and soon new requests stop running the layer at all (its per-step pass only
// costs); the replies stay the serial ones throughout.
TEST_F(SpeculationTest, AnMtpLayerThatDoesNotPayIsGivenUp) {
  EngineOptions o = demo_options();
  o.copy_drafts = false;
  auto e = Engine::create(o);
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  int64_t last = -1, quiet = 0;
  int requests = 0;
  for (; requests < 40 && quiet < 3; ++requests) {
    GenerationRequest g = request("giveup" + std::to_string(requests), "Tell me about ships " + std::to_string(requests),
                                  24, 0.0);
    EXPECT_EQ(reply(**e, g), reply(serial_engine(), g)) << g.request_id;
    const int64_t streams = (*e)->health().mtp_streams_total;
    quiet = streams == last ? quiet + 1 : 0;
    last = streams;
  }
  const EngineHealth h = (*e)->health();
  std::printf("[MTP policy, drafts that do not pay] %d requests, %lld ran the layer, %lld drafts, %lld kept\n",
              requests, static_cast<long long>(h.mtp_streams_total), static_cast<long long>(h.mtp_drafted_tokens_total),
              static_cast<long long>(h.mtp_accepted_tokens_total));
  EXPECT_EQ(quiet, 3) << "new requests still run the layer after " << requests << " requests";
  EXPECT_GE(h.mtp_streams_total, 1);
  EXPECT_LT(h.mtp_streams_total, 30);
}

// Stops inside a verified run (a stop string, max_tokens) and n > 1 with several streams
// verifying at once end exactly where serial decoding ends.
TEST_F(SpeculationTest, StopsInsideAVerifiedRunAndConcurrentStreams) {
  DraftOracle oracle;
  auto e = engine_with(oracle);
  ASSERT_TRUE(e);
  GenerationRequest g = request("spec-len", "Which way to the harbour?", 37, 0.0);
  const Reply serial = reply(serial_engine(), g);
  ASSERT_GT(serial.text.size(), 40u);
  GenerationRequest s = request("spec-stop", "Which way to the harbour?", 37, 0.0);
  s.sampling.stop = {serial.text.substr(30, 6)};
  const Reply serial_stop = reply(serial_engine(), s);
  EXPECT_EQ(serial_stop.finish, FinishReason::kStop);
  std::vector<GenerationRequest> many;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r = request("spec-many" + std::to_string(i), "Port " + std::to_string(i) + " of call?", 48, 1.0);
    r.n = 2;
    many.push_back(r);
  }
  auto run_all = [&](Engine& eng) {
    std::vector<std::map<int, std::string>> out;
    std::vector<std::unique_ptr<Collector>> cs;
    for (auto& r : many) {
      cs.push_back(std::make_unique<Collector>());
      cs.back()->expected = 2;
      EXPECT_TRUE(eng.submit(r, cs.back()->sink()).is_ok());
    }
    for (auto& c : cs) {
      EXPECT_TRUE(c->wait());
      out.push_back(c->text);
    }
    return out;
  };
  const auto serial_many = run_all(serial_engine());
  // Record (every request once), then replay.
  (void)reply(*e, g);
  (void)run_all(*e);
  oracle.recording = false;
  EXPECT_EQ(reply(*e, g), serial);
  EXPECT_EQ(reply(*e, s), serial_stop);
  EXPECT_EQ(run_all(*e), serial_many);
  EXPECT_GT(e->health().accepted_tokens_total, 0);
}

}  // namespace
}  // namespace tf::engine

namespace tf::engine {
namespace {

// Prompt logprobs (engine_prompt_logprobs.cc): a prompt that repeats a greedy reply scores the
// reply's tokens as the reply reported them, whatever its chunks and kept prompts.
class PromptLogprobsTest : public PromptReuseTest {
 protected:
  struct Greedy {
    std::vector<int32_t> tokens;  // the prompt, then the reply
    std::vector<TokenLogprob> reply;
    std::string text;
  };
  // A greedy reply of k tokens with logprobs (top 2), appended to the prompt.
  static Greedy greedy(Engine& e, const std::string& id, const std::vector<int32_t>& p, int64_t k) {
    GenerationRequest g = sampled(id, p, k);
    g.sampling.temperature = 0.0;
    g.sampling.top_logprobs = 2;
    Collector c;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    Greedy out{p, c.logprobs[0], c.text[0]};
    for (const TokenLogprob& l : out.reply) out.tokens.push_back(l.token_id);
    return out;
  }
  // The prompt's entries (max_tokens 0: nothing generated), each choice's.
  static std::map<int, std::vector<TokenLogprob>> scored(Engine& e, const std::string& id, const std::vector<int32_t>& p,
                                                         int n = 1, int64_t* cached = nullptr) {
    GenerationRequest g = sampled(id, p, 0);
    g.sampling.logprobs = false;
    g.prompt_logprobs = 2;
    g.n = n;
    Collector c;
    c.expected = n;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(c.finish[i].finish_reason, FinishReason::kLength);
      EXPECT_EQ(c.finish[i].completion_tokens, 0);
      EXPECT_TRUE(c.content[i].empty());
      if (cached) *cached = c.finish[i].cached_prompt_tokens;
    }
    return c.prompt_logprobs;
  }
  // The entries of the reply's positions equal the reply's logprobs (tokens exactly).
  static void expect_reply_scored(const Greedy& g, const std::vector<TokenLogprob>& entries) {
    ASSERT_EQ(entries.size(), g.tokens.size());
    EXPECT_EQ(entries[0].token_id, g.tokens[0]);
    EXPECT_TRUE(entries[0].top.empty()) << "the first token has nothing before it";
    const size_t first = g.tokens.size() - g.reply.size();
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_EQ(entries[i].token_id, g.tokens[i]) << i;
      if (i == 0) continue;
      EXPECT_LE(entries[i].logprob, 0.0) << i;
      EXPECT_GE(entries[i].top.size(), 2u) << i;
      EXPECT_LE(entries[i].top.size(), 3u) << i;
    }
    for (size_t j = 0; j < g.reply.size(); ++j) {
      const TokenLogprob& want = g.reply[j];
      const TokenLogprob& got = entries[first + j];
      EXPECT_EQ(got.token, want.token) << "reply token " << j;
      EXPECT_NEAR(got.logprob, want.logprob, 1e-4) << "reply token " << j;
      ASSERT_GE(got.top.size(), 2u);
      for (size_t t = 0; t < 2; ++t) {
        EXPECT_EQ(got.top[t].token, want.top[t].token) << "reply token " << j << " top " << t;
        EXPECT_NEAR(got.top[t].logprob, want.top[t].logprob, 1e-4) << "reply token " << j << " top " << t;
      }
    }
    // Offsets: code points of the decoded tokens before each, never going back.
    EXPECT_EQ(entries[0].text_offset, 0);
    for (size_t i = 1; i < entries.size(); ++i) EXPECT_GE(entries[i].text_offset, entries[i - 1].text_offset) << i;
  }
};

TEST_F(PromptLogprobsTest, AShortPromptScoresItsRepeatedReply) {
  const Greedy g = greedy(fresh_engine(), "pl1", prompt("Once upon a time"), 10);
  ASSERT_EQ(g.reply.size(), 10u);
  ASSERT_LT(g.tokens.size(), 32u) << "one chunk";
  expect_reply_scored(g, scored(fresh_engine(), "pl2", g.tokens)[0]);
}

TEST_F(PromptLogprobsTest, APromptOfSeveralChunksScoresItsRepeatedReply) {
  const Greedy g = greedy(fresh_engine(), "pl3", prompt(long_text("chunks", 40)), 12);
  ASSERT_GT(g.tokens.size(), 3 * 32u) << "several chunks";
  expect_reply_scored(g, scored(fresh_engine(), "pl4", g.tokens)[0]);
}

// The suite engine keeps prompts: a scored prompt that starts with a kept one runs every row anyway.
TEST_F(PromptLogprobsTest, AKeptPrefixIsRunAgain) {
  const std::vector<int32_t> p = prompt(long_text("kept", 90));
  const Greedy g = greedy(*engine_, "pl5", p, 8);
  wait_idle();
  ASSERT_GE(engine_->health().kept_prompts, 1);
  ASSERT_EQ(run_on(*engine_, sampled("pl6", p, 2)).cached, (static_cast<int64_t>(p.size()) - 1) / 64 * 64)
      << "the prompt is kept";
  int64_t cached = -1;
  const auto entries = scored(*engine_, "pl7", g.tokens, 1, &cached);
  EXPECT_EQ(cached, 0);
  expect_reply_scored(g, entries.at(0));
}

// Every choice scores the prompt; a choice that also generates gives the reply it gives without.
TEST_F(PromptLogprobsTest, ChoicesScoreThePromptAndGenerateAsBefore) {
  const Greedy g = greedy(fresh_engine(), "pl8", prompt(long_text("twice", 30)), 6);
  const auto two = scored(fresh_engine(), "pl9", g.tokens, 2);
  ASSERT_EQ(two.size(), 2u);
  expect_reply_scored(g, two.at(0));
  ASSERT_EQ(two.at(1).size(), two.at(0).size());
  for (size_t i = 0; i < two.at(0).size(); ++i) EXPECT_EQ(two.at(1)[i].logprob, two.at(0)[i].logprob) << i;

  // With max_tokens: the prompt's entries come first, then the same reply as without them
  // (the first token is sampled from the prompt's last row).
  const std::vector<int32_t> p(g.tokens.begin(), g.tokens.end() - static_cast<std::ptrdiff_t>(g.reply.size()));
  GenerationRequest both = sampled("pl10", p, 6);
  both.sampling.temperature = 0.0;
  both.sampling.top_logprobs = 2;
  both.prompt_logprobs = 1;
  Collector c;
  ASSERT_TRUE(fresh_engine().submit(std::move(both), c.sink()).is_ok());
  ASSERT_TRUE(c.wait());
  ASSERT_FALSE(c.error) << c.status.to_string();
  EXPECT_EQ(c.text[0], g.text);
  ASSERT_EQ(c.logprobs[0].size(), g.reply.size());
  for (size_t j = 0; j < g.reply.size(); ++j) {
    EXPECT_EQ(c.logprobs[0][j].token_id, g.reply[j].token_id) << j;
    EXPECT_EQ(c.logprobs[0][j].logprob, g.reply[j].logprob) << j;
  }
  ASSERT_EQ(c.prompt_logprobs[0].size(), p.size());
  for (size_t i = 1; i < p.size(); ++i) EXPECT_LE(c.prompt_logprobs[0][i].top.size(), 2u) << "top 1, and the token";
}

// Label scoring (engine_label_scores.cc): the logprobs of given tokens at the prompt's end
// are the ones the sampler reports for the same tokens as the first reply token's
// alternatives, fresh or resumed from a kept prompt.
class LabelScoresTest : public PromptReuseTest {
 protected:
  struct Scores {
    std::vector<double> logprobs;
    int64_t cached = -1;
  };
  static Scores labels(Engine& e, const std::string& id, const std::vector<int32_t>& p,
                       std::vector<int32_t> ids) {
    GenerationRequest g = sampled(id, p, 0);
    g.sampling.logprobs = false;
    g.label_tokens = std::move(ids);
    Collector c;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.finish[0].completion_tokens, 0);
    EXPECT_TRUE(c.text[0].empty());
    return {c.label_logprobs[0], c.finish[0].cached_prompt_tokens};
  }
  // The first greedy token's top 5 alternatives (the sampler's raw logprobs).
  static std::vector<TopLogprob> first_top(Engine& e, const std::string& id, const std::vector<int32_t>& p) {
    GenerationRequest g = sampled(id, p, 1);
    g.sampling.temperature = 0.0;
    g.sampling.top_logprobs = 5;
    Collector c;
    EXPECT_TRUE(e.submit(std::move(g), c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(c.logprobs[0].size(), 1u);
    return c.logprobs[0].empty() ? std::vector<TopLogprob>{} : c.logprobs[0][0].top;
  }
};

TEST_F(LabelScoresTest, LabelsScoreAsTheFirstTokensAlternatives) {
  const std::vector<int32_t> p = prompt(long_text("labels", 50));
  const std::vector<TopLogprob> top = first_top(fresh_engine(), "lb1", p);
  ASSERT_EQ(top.size(), 5u);
  std::vector<int32_t> ids;
  for (auto it = top.rbegin(); it != top.rend(); ++it) {  // reversed: the request's order is kept
    ASSERT_GE(it->token_id, 0) << it->token;
    ids.push_back(it->token_id);
  }
  const Scores s = labels(fresh_engine(), "lb2", p, ids);
  ASSERT_EQ(s.logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(s.logprobs[i], top[4 - i].logprob, 2e-5) << i;
  for (size_t i = 1; i < 5; ++i) EXPECT_LE(s.logprobs[i - 1], s.logprobs[i]) << "ascending, as asked";
}

// Prompt reuse: a label request resumes from a kept prompt and keeps its own; the scores are
// the fresh run's bit for bit (the same rows run from the same state).
TEST_F(LabelScoresTest, AResumedPromptScoresAsAFreshOne) {
  const std::vector<int32_t> p = prompt(long_text("decide", 90));
  const std::vector<int32_t> ids = {p[3], p[5], p[7]};
  const Scores fresh = labels(fresh_engine(), "lb3", p, ids);
  const Scores first = labels(*engine_, "lb4", p, ids);
  wait_idle();
  const Scores again = labels(*engine_, "lb5", p, ids);
  EXPECT_EQ(first.logprobs, fresh.logprobs);
  EXPECT_GT(again.cached, 0) << "the first label request kept its prompt";
  EXPECT_EQ(again.logprobs, fresh.logprobs);
}

TEST_F(LabelScoresTest, RefusedRequests) {
  const std::vector<int32_t> p = prompt("Is it true?");
  auto refused = [&](GenerationRequest g, const std::string& words) {
    Collector c;
    const Status s = engine_->submit(std::move(g), c.sink());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  GenerationRequest g = sampled("lb6", p, 1);
  g.label_tokens = {1};
  refused(g, "max_tokens must be 0");
  g.sampling.max_tokens = 0;
  g.label_tokens = {1, -1};
  refused(g, "label token id -1 is out of range");
  g.label_tokens = std::vector<int32_t>(kMaxLabelTokens + 1, 1);
  refused(g, "label tokens are scored");
  g.label_tokens = {1};
  g.prompt_logprobs = 0;
  refused(g, "does not score the prompt");
}

// Embeddings (GenerationRequest::embed, engine_embedding.cc): the prompt's last row's final
// hidden state, checked against the checkpoint's own lm_head: its logits through that matrix,
// log-softmaxed over the text vocabulary, are the logprobs label scoring reports there.
class EmbeddingTest : public LabelScoresTest {
 protected:
  struct Embedded {
    std::vector<float> vector;
    int64_t cached = -1;
  };
  static Embedded embed(Engine& e, const std::string& id, const std::vector<int32_t>& p) {
    GenerationRequest g = sampled(id, p, 0);
    g.sampling.logprobs = false;
    g.embed = true;
    std::vector<float> got;
    int events = 0;
    Collector c;
    EventSink inner = c.sink();
    EXPECT_TRUE(e.submit(std::move(g), [&](GenerationEvent ev) {
                   if (!ev.embedding.empty()) {
                     got = ev.embedding;
                     ++events;
                   }
                   inner(std::move(ev));
                 }).is_ok());
    EXPECT_TRUE(c.wait());
    EXPECT_FALSE(c.error) << c.status.to_string();
    EXPECT_EQ(events, 1);
    EXPECT_EQ(c.finish[0].completion_tokens, 0);
    return {got, c.finish[0].cached_prompt_tokens};
  }
};

TEST_F(EmbeddingTest, TheHiddenStateTheLmHeadReads) {
  const std::vector<int32_t> p = prompt(long_text("embedding", 40));
  const Embedded h = embed(fresh_engine(), "em1", p);
  const ModelInfo info = fresh_engine().model_info();
  ASSERT_EQ(static_cast<int64_t>(h.vector.size()), info.hidden_size);
  auto ckpt = Checkpoint::open(model_dir_);
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  auto head = (*ckpt)->tensor("lm_head.weight");
  ASSERT_TRUE(head.has_value()) << head.status().to_string();
  const std::vector<float> w = head->to_vector();
  const int64_t width = head->size(1), vocab = std::min<int64_t>(head->size(0), info.vocab_size);
  ASSERT_EQ(width, info.hidden_size);
  std::vector<double> logits(static_cast<size_t>(vocab));
  double peak = -1e300;
  for (int64_t t = 0; t < vocab; ++t) {
    double dot = 0.0;
    for (int64_t j = 0; j < width; ++j) dot += static_cast<double>(w[t * width + j]) * h.vector[j];
    logits[t] = dot;
    peak = std::max(peak, dot);
  }
  double sum = 0.0;
  for (double x : logits) sum += std::exp(x - peak);
  const double log_total = peak + std::log(sum);
  const std::vector<int32_t> ids = {p[1], p[4], p[9], 0, static_cast<int32_t>(vocab - 1)};
  const Scores s = labels(fresh_engine(), "em2", p, ids);
  ASSERT_EQ(s.logprobs.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_NEAR(logits[ids[i]] - log_total, s.logprobs[i], 1e-3) << ids[i];
}

TEST_F(EmbeddingTest, AResumedPromptEmbedsAsAFreshOneAndOthersDiffer) {
  const std::vector<int32_t> p = prompt(long_text("vectors", 90));
  const Embedded fresh = embed(fresh_engine(), "em3", p);
  const Embedded first = embed(*engine_, "em4", p);
  wait_idle();
  const Embedded again = embed(*engine_, "em5", p);
  EXPECT_EQ(first.vector, fresh.vector);
  EXPECT_GT(again.cached, 0) << "the first embedding kept its prompt";
  EXPECT_EQ(again.vector, fresh.vector) << "bit for bit";
  EXPECT_NE(embed(fresh_engine(), "em6", prompt(long_text("other", 20))).vector, fresh.vector);
}

TEST_F(EmbeddingTest, RefusedRequests) {
  GenerationRequest g = sampled("em7", prompt("Embed me"), 1);
  g.embed = true;
  Collector c;
  Status s = engine_->submit(g, c.sink());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_tokens must be 0"), std::string::npos) << s.message();
  g.sampling.max_tokens = 0;
  g.label_tokens = {1};
  s = engine_->submit(g, c.sink());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "labels and an embedding at once";
}

}  // namespace
}  // namespace tf::engine
