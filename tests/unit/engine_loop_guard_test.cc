// Loops in a reply (sampling/repetition_detector.h) through the engine, on the CPU backend over
// the demo checkpoint: LOOP_GUARD closes a reasoning that fell into one and the model answers,
// the same with copy drafts verifying the loop (the guard fires inside a verify step); a
// request's repetition_detection ends its reply with "repetition"; neither touches a reply
// without a loop. The loops are made with a large logit_bias on one token (greedy: a 1-token
// block), so each step's outcome is known.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "engine/demo_checkpoint.h"
#include "engine/engine.h"

namespace tf::engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Reply {
  std::string reasoning, content;
  FinishReason finish = FinishReason::kAbort;
  int64_t tokens = 0, reasoning_tokens = 0;
  bool done = false, error = false;
  std::string error_text;
};

Reply run(Engine& e, GenerationRequest g) {
  auto reply = std::make_shared<Reply>();
  auto mu = std::make_shared<std::mutex>();
  auto cv = std::make_shared<std::condition_variable>();
  Status s = e.submit(std::move(g), [reply, mu, cv](GenerationEvent ev) {
    std::lock_guard<std::mutex> lock(*mu);
    if (ev.kind == GenerationEvent::Kind::kError) {
      reply->error = true;
      reply->error_text = ev.error.to_string();
      reply->done = true;
    } else if (ev.kind == GenerationEvent::Kind::kFinish) {
      reply->finish = ev.finish_reason;
      reply->tokens = ev.completion_tokens;
      reply->reasoning_tokens = ev.reasoning_tokens;
      reply->done = true;
    } else {
      reply->reasoning += ev.reasoning;
      reply->content += ev.content;
    }
    cv->notify_all();
  });
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  if (!s.is_ok()) return {};
  std::unique_lock<std::mutex> lock(*mu);
  EXPECT_TRUE(cv->wait_for(lock, 120s, [&] { return reply->done; }));
  return *reply;
}

class LoopGuardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("tf-loop-guard-test-" + std::to_string(::getpid()));
    auto dir = ensure_demo_checkpoint(root_);
    ASSERT_TRUE(dir.has_value()) << dir.status().to_string();
    model_dir_ = dir->string();
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static std::unique_ptr<Engine> engine(int64_t loop_guard, bool drafts) {
    EngineOptions o;
    o.model_dir = model_dir_;
    o.parallel = 2;
    o.context = 512;
    o.kv = "bf16";
    o.dense = "f32";
    o.prefill_chunk = 32;
    o.memory_reserve_gib = 0;
    o.loop_guard = loop_guard;
    o.copy_drafts = drafts;
    o.copy_match = 2;
    o.always_draft = drafts;  // every step of the loop verifies drafts
    o.draft_model = "none";
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << e.status().to_string();
    return e.has_value() ? std::move(*e) : nullptr;
  }
  static int32_t one_token(Engine& e, const std::string& text) {
    auto ids = e.tokenize(text, false);
    EXPECT_TRUE(ids.has_value() && ids->size() == 1u) << text;
    return ids.has_value() && !ids->empty() ? (*ids)[0] : 0;
  }
  // A chat whose prompt opens the reasoning (<think>), greedy, `loop` (when set) pushed to be
  // every token; 48 tokens at most.
  static GenerationRequest chat(Engine& e, const std::string& id, std::optional<int32_t> loop,
                                double temperature = 0.0) {
    ChatPrompt c;
    c.messages = nlohmann::json::array({{{"role", "user"}, {"content", "Think about the harbour."}}});
    auto ids = e.render_chat(c);
    EXPECT_TRUE(ids.has_value());
    GenerationRequest g;
    g.request_id = id;
    g.prompt_tokens = ids.has_value() ? *ids : std::vector<int32_t>{};
    g.sampling.max_tokens = 48;
    g.sampling.temperature = temperature;
    g.sampling.seed = 5;
    g.sampling.ignore_eos = true;
    if (loop) g.sampling.logit_bias[*loop] = 100.0;
    g.parse_reasoning = true;
    return g;
  }
  static std::string repeated(const std::string& piece, int times) {
    std::string s;
    for (int i = 0; i < times; ++i) s += piece;
    return s;
  }
  static inline fs::path root_;
  static inline std::string model_dir_;
};

TEST_F(LoopGuardTest, ClosesAReasoningLoopAndTheModelAnswers) {
  auto guarded = engine(20, false);
  auto off = engine(0, false);
  ASSERT_TRUE(guarded && off);
  const int32_t loop = one_token(*guarded, "la");
  auto text = guarded->detokenize({loop});
  ASSERT_TRUE(text.has_value());

  // Without the guard the reasoning runs to max_tokens.
  const Reply endless = run(*off, chat(*off, "off", loop));
  ASSERT_FALSE(endless.error) << endless.error_text;
  EXPECT_EQ(endless.reasoning, repeated(*text, 48));
  EXPECT_EQ(endless.content, "");
  EXPECT_EQ(off->health().loop_guard_closed_total, 0);

  // With it: 20 reasoning tokens (3+ copies of the 1-token block, 20 tokens in all), then
  // </think> (not shown), then the answer: the bias still picks the token.
  const Reply closed = run(*guarded, chat(*guarded, "guarded", loop));
  ASSERT_FALSE(closed.error) << closed.error_text;
  EXPECT_EQ(closed.reasoning, repeated(*text, 20));
  EXPECT_EQ(closed.reasoning_tokens, 21);  // usage counts </think> with the reasoning
  EXPECT_EQ(closed.content, repeated(*text, 48 - 21));
  EXPECT_EQ(closed.finish, FinishReason::kLength);
  EXPECT_EQ(closed.tokens, 48);
  EXPECT_EQ(guarded->health().loop_guard_closed_total, 1);

  // A reasoning without a loop (sampled) is the same with and without the guard.
  const Reply a = run(*guarded, chat(*guarded, "free-a", std::nullopt, 1.0));
  const Reply b = run(*off, chat(*off, "free-b", std::nullopt, 1.0));
  ASSERT_FALSE(a.error || b.error);
  EXPECT_EQ(a.reasoning + "|" + a.content, b.reasoning + "|" + b.content);
  EXPECT_EQ(guarded->health().loop_guard_closed_total, 1);
}

// Copy drafts verify the loop several tokens a step: the guard finds it inside a verify span,
// the rows after it are not kept, and the reply is the one without drafts.
TEST_F(LoopGuardTest, InsideAVerifyStepTheReplyIsTheSame) {
  for (int64_t guard : {17, 20, 23}) {
    auto serial = engine(guard, false);
    auto drafting = engine(guard, true);
    ASSERT_TRUE(serial && drafting);
    const int32_t loop = one_token(*serial, "la");
    const Reply want = run(*serial, chat(*serial, "serial", loop));
    const Reply got = run(*drafting, chat(*drafting, "drafting", loop));
    ASSERT_FALSE(want.error || got.error) << want.error_text << got.error_text;
    EXPECT_EQ(got.reasoning, want.reasoning) << guard;
    EXPECT_EQ(got.content, want.content) << guard;
    EXPECT_EQ(got.reasoning_tokens, guard + 1);
    EXPECT_EQ(got.tokens, want.tokens);
    const EngineHealth h = drafting->health();
    EXPECT_GT(h.spec_steps_total, 0) << guard;
    EXPECT_GT(h.accepted_tokens_total, 0) << guard;
    EXPECT_EQ(h.loop_guard_closed_total, 1) << guard;
  }
}

// allowed_token_ids leaves </think> to a reply that thinks: the guard can still close it.
TEST_F(LoopGuardTest, AllowedTokenIdsStillLetTheReasoningClose) {
  auto e = engine(20, false);
  ASSERT_TRUE(e);
  const int32_t loop = one_token(*e, "la");
  auto text = e->detokenize({loop});
  ASSERT_TRUE(text.has_value());
  GenerationRequest g = chat(*e, "allowed", loop);
  g.sampling.allowed_token_ids = {loop};  // without </think>: the engine adds it
  const Reply r = run(*e, std::move(g));
  ASSERT_FALSE(r.error) << r.error_text;
  EXPECT_EQ(r.reasoning, repeated(*text, 20));
  EXPECT_EQ(r.content, repeated(*text, 48 - 21));
}

TEST_F(LoopGuardTest, RepetitionDetectionEndsTheReply) {
  auto e = engine(0, false);
  ASSERT_TRUE(e);
  const int32_t loop = one_token(*e, "la");
  GenerationRequest g = chat(*e, "repetition", loop);
  g.sampling.repetition_detection = RepetitionRule{2, 4, 6, 0};  // 6 copies of a 2..4-token block
  const Reply r = run(*e, std::move(g));
  ASSERT_FALSE(r.error) << r.error_text;
  EXPECT_EQ(r.finish, FinishReason::kRepetition);
  EXPECT_EQ(r.tokens, 12);  // the first tail of six 2-token copies (counted in the reasoning too)
  EXPECT_EQ(e->health().repetition_stops_total, 1);
  EXPECT_STREQ(finish_reason_name(r.finish), "repetition");

  // A rule that cannot be checked is refused at submit.
  GenerationRequest bad = chat(*e, "bad", loop);
  bad.sampling.repetition_detection = RepetitionRule{1, 4, 1, 0};
  EXPECT_FALSE(e->submit(std::move(bad), [](GenerationEvent) {}).is_ok());
}

}  // namespace
}  // namespace tf::engine
