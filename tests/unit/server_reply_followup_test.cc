// ReplyFollowUps (src/server/reply_followup.h) against a scripted engine: which finished
// replies are warmed up, what the warm-up asks for, and how it makes way for clients.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <limits>

#include "server/reply_followup.h"

namespace tf::server {
namespace {

using namespace std::chrono_literals;

// Renders a chat as 100 tokens per message (ids counting up), so a chat's tokens start with
// those of any chat it extends.
class ScriptedEngine : public EngineApi {
 public:
  ModelInfo model_info() const override { return {}; }
  EngineHealth health() const override {
    EngineHealth h;
    h.streams_decoding = busy ? 1 : 0;
    return h;
  }
  Expected<std::vector<int32_t>> tokenize(const std::string&, bool) const override {
    return std::vector<int32_t>{};
  }
  Expected<std::vector<int32_t>> render_chat(const ChatPrompt& chat) const override {
    std::vector<int32_t> ids(chat.messages.size() * 100);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    return ids;
  }
  Expected<std::string> detokenize(const std::vector<int32_t>&) const override { return std::string(); }
  Expected<std::vector<std::string>> token_strings(const std::vector<int32_t>&) const override {
    return std::vector<std::string>{};
  }
  Status submit(GenerationRequest request, EventSink sink) override {
    std::lock_guard<std::mutex> lock(mu);
    submitted.push_back(std::move(request));
    sinks.push_back(std::move(sink));
    return Status::ok();
  }
  void cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    cancelled.push_back(id);
  }
  void finish(size_t i) {
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kFinish;
    sinks.at(i)(ev);
  }

  std::atomic<bool> busy{false};
  std::mutex mu;
  std::vector<GenerationRequest> submitted;
  std::vector<EventSink> sinks;
  std::vector<std::string> cancelled;
};

// A chat of `messages` messages whose reply is the last one, its prompt the others.
FinishedChat finished(size_t messages, std::string salt = "s") {
  FinishedChat f;
  for (size_t i = 0; i + 1 < messages; ++i)
    f.chat.messages.push_back({{"role", "user"}, {"content", "q" + std::to_string(i)}});
  f.chat.messages.push_back({{"role", "assistant"}, {"content", "a"}, {"reasoning_content", "r"}});
  f.cache_salt = std::move(salt);
  f.prompt_tokens = static_cast<int64_t>(messages - 1) * 100 + 1;  // as rendered with its generation prompt
  return f;
}

TEST(ReplyFollowUps, AFinishedReplyIsWarmedUpOnAnIdleEngine) {
  ScriptedEngine engine;
  ReasoningMemory memory(1 << 20);
  ReplyFollowUps f(engine, &memory, 64);
  f.post([] { return finished(3, "alice"); });
  f.drain();
  ASSERT_EQ(engine.submitted.size(), 1u);
  const GenerationRequest& g = engine.submitted[0];
  EXPECT_EQ(g.prompt_tokens.size(), 300u);
  EXPECT_EQ(g.warm_from, 201);
  EXPECT_EQ(g.sampling.max_tokens, 0);
  EXPECT_EQ(g.priority, std::numeric_limits<int32_t>::max());
  EXPECT_EQ(g.cache_salt, "alice");
  EXPECT_EQ(memory.entries(), 1) << "the reply's reasoning is remembered";
  // One at a time: another finished reply waits for none and is not warmed up meanwhile.
  f.post([] { return finished(5); });
  f.drain();
  EXPECT_EQ(engine.submitted.size(), 1u);
  engine.finish(0);
  f.post([] { return finished(5); });
  f.drain();
  EXPECT_EQ(engine.submitted.size(), 2u);
}

TEST(ReplyFollowUps, NothingIsWarmedUpThatWouldKeepNothingOrCompete) {
  ScriptedEngine engine;
  ReplyFollowUps f(engine, nullptr, 64);
  engine.busy = true;  // a client's stream runs
  f.post([] { return finished(3); });
  f.drain();
  EXPECT_TRUE(engine.submitted.empty());
  engine.busy = false;
  f.post([] {
    FinishedChat c = finished(3);
    c.prompt_tokens = 280;  // the reply passes no point a state is kept at (256 either way)
    return c;
  });
  f.post([] {
    FinishedChat c = finished(3);
    c.warm = false;  // one of several choices
    return c;
  });
  f.post([]() -> std::optional<FinishedChat> { throw std::runtime_error("a reply the parser refuses"); });
  f.drain();
  EXPECT_TRUE(engine.submitted.empty());
  // A client's request that starts after the reply finished, before its follow-up ran: the
  // engine is about to be busy, so no warm-up (it would run beside the request).
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  f.post([released] {
    released.wait();
    return finished(3);
  });
  f.make_way(std::vector<int32_t>(500, 7));
  release.set_value();
  f.drain();
  EXPECT_TRUE(engine.submitted.empty());
  EXPECT_TRUE(engine.cancelled.empty());
  ReplyFollowUps off(engine, nullptr, 0);  // REPLY_WARMUP=0, no memory
  EXPECT_FALSE(off.active());
}

TEST(ReplyFollowUps, AnotherRequestCancelsTheWarmUpAndTheNextTurnWaitsForIt) {
  ScriptedEngine engine;
  ReplyFollowUps f(engine, nullptr, 64);
  f.post([] { return finished(3); });
  f.drain();
  ASSERT_EQ(engine.submitted.size(), 1u);
  std::vector<int32_t> other(500, 7);
  f.make_way(other);
  ASSERT_EQ(engine.cancelled.size(), 1u);
  EXPECT_EQ(engine.cancelled[0], engine.submitted[0].request_id);
  // Cancelled, it holds nothing back: the next reply is warmed up.
  f.post([] { return finished(3); });
  f.drain();
  ASSERT_EQ(engine.submitted.size(), 2u);
  // The chat's next turn starts with the warmed-up tokens: it waits until the warm-up ends.
  std::vector<int32_t> next(400);
  for (size_t i = 0; i < next.size(); ++i) next[i] = static_cast<int32_t>(i);
  auto waiting = std::async(std::launch::async, [&] { f.make_way(next); });
  EXPECT_EQ(waiting.wait_for(200ms), std::future_status::timeout);
  engine.finish(1);
  EXPECT_EQ(waiting.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(engine.cancelled.size(), 1u);
  // With nothing in flight, a request goes at once.
  f.make_way(other);
  EXPECT_EQ(engine.cancelled.size(), 1u);
}

}  // namespace
}  // namespace tf::server
