// Smooth streaming: StreamPacer's timing rule over given times, and GenerationSession's
// pump spreading a fake engine's bursts over separate writes (or not, when off).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/generation_session.h"
#include "server/stream_pacer.h"
#include "server_fake_engine.h"

namespace tf::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(StreamPacer, OffLetsEverythingGoAtOnce) {
  StreamPacer p(0ms);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 4; ++i) p.arrived(t0);
  p.released(t0 + 5s);
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.due(t0), t0);
}

TEST(StreamPacer, SpacesABurstByTheMeanGap) {
  StreamPacer p(400ms);
  const Clock::time_point t0 = Clock::now();
  // Bursts of 5 tokens every 50 ms: a mean gap of 10 ms a token once the window spans bursts.
  for (int step = 0; step < 4; ++step)
    for (int i = 0; i < 5; ++i) p.arrived(t0 + step * 50ms);
  // The latest 17 arrivals are kept: they span 0..150 ms, 16 gaps.
  EXPECT_EQ(p.mean_gap(), Clock::duration(150ms) / 16);
  const Clock::time_point oldest = t0 + 150ms;
  p.released(oldest);
  // The next token of the burst waits one mean gap after the previous release.
  EXPECT_EQ(p.due(oldest), oldest + p.mean_gap());
  // A token that arrived long ago goes at once: never held past the limit.
  EXPECT_EQ(p.due(oldest - 1s), oldest - 1s + 400ms);
}

// A stall (or a slow first burst) leaves more tokens held than a burst brings: the gap
// shortens in proportion, so the backlog drains instead of keeping the stream behind.
TEST(StreamPacer, ABacklogDrainsFaster) {
  StreamPacer p(400ms);
  const Clock::time_point t0 = Clock::now();
  for (int step = 0; step < 4; ++step)
    for (int i = 0; i < 5; ++i) p.arrived(t0 + step * 50ms + i * 10us);
  // The latest 17 arrivals: 2 of the first burst, then three of 5.
  EXPECT_DOUBLE_EQ(p.mean_burst(), 17.0 / 4.0);
  const Clock::time_point now = t0 + 150ms;
  p.released(now);
  const Clock::duration gap = p.mean_gap();
  EXPECT_EQ(p.due(now, 4), now + gap) << "no more than a burst held: the mean gap";
  const Clock::time_point drained = p.due(now, 17);
  EXPECT_LT(drained, now + gap);
  EXPECT_NEAR(std::chrono::duration<double>(drained - now).count(),
              std::chrono::duration<double>(gap).count() * (17.0 / 4.0) / 17.0, 1e-6);
}

TEST(StreamPacer, TheFirstTokenIsNotHeld) {
  StreamPacer p(400ms);
  const Clock::time_point t0 = Clock::now();
  p.arrived(t0);
  EXPECT_EQ(p.mean_gap(), Clock::duration::zero());
  EXPECT_EQ(p.due(t0), t0);
}

TEST(StreamPacer, AStreamSlowerThanTheLimitIsHeldAtMostTheLimit) {
  StreamPacer p(100ms);
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < 5; ++i) p.arrived(t0 + i * 1s);  // one token a second
  p.released(t0 + 4s);
  EXPECT_EQ(p.due(t0 + 4s), t0 + 4s + 100ms);
}

// Records each write of a session's stream: when, and the text of the deltas in it.
struct Writes {
  std::vector<Clock::time_point> at;
  std::vector<std::string> text;
};

class ContentFormatter : public StreamFormatter {
 public:
  std::string start() override { return ""; }
  std::string on_event(const GenerationEvent& ev, const ChoiceState&) override { return ev.content; }
  std::string on_error(const Status& e) override { return "[error: " + e.message() + "]"; }
  std::string on_done(const std::vector<ChoiceState>&, const UsageTotals&) override { return "[done]"; }
};

Writes stream_through(testing::FakeEngine& engine, std::chrono::milliseconds smooth, Clock::duration* took) {
  ServerMetrics metrics("fake-model");
  GenerationRequest g;
  g.request_id = "paced";
  g.prompt_tokens = {1, 2, 3};
  g.sampling.max_tokens = 64;
  GenerationSession session(engine, metrics, g, 3, Clock::now());
  session.set_smoothing(smooth);
  Writes w;
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(session.submit().is_ok());
  ContentFormatter fmt;
  auto write = [&](const std::string& s) {
    if (!s.empty() && s.rfind(": keep-alive", 0) != 0) {
      w.at.push_back(Clock::now());
      w.text.push_back(s);
    }
    return true;
  };
  for (int i = 0; i < 1000; ++i) {
    const GenerationSession::Pump p = session.pump(fmt, write);
    if (p != GenerationSession::Pump::kMore) break;
  }
  *took = Clock::now() - t0;
  return w;
}

std::string joined(const Writes& w) {
  std::string s;
  for (const std::string& t : w.text) s += t;
  return s;
}

// 24 one-letter tokens in 4 bursts of 6, 80 ms apart.
void bursty(testing::FakeEngine& engine) {
  engine.set_text_script("", std::string("abcdefghijklmnopqrstuvwx"), FinishReason::kStop);
  // set_text_script groups 3 bytes a delta: one letter a delta here.
  engine.script.clear();
  for (char ch = 'a'; ch <= 'x'; ++ch) {
    GenerationEvent ev;
    ev.content = std::string(1, ch);
    engine.script.push_back(ev);
  }
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.completion_tokens = 24;
  engine.script.push_back(fin);
  engine.burst = 6;
  engine.delay = 80ms;
}

TEST(StreamSmoothing, BurstsGoOutAsSeparateEvenWrites) {
  testing::FakeEngine engine;
  bursty(engine);
  Clock::duration plain_took{}, smooth_took{};
  const Writes plain = stream_through(engine, 0ms, &plain_took);
  const Writes smooth = stream_through(engine, 400ms, &smooth_took);
  EXPECT_EQ(joined(plain), "abcdefghijklmnopqrstuvwx[done]");
  EXPECT_EQ(joined(smooth), joined(plain)) << "the same text, in the same order";
  // Unpaced, each burst goes in one write (a few more should the engine thread be slow).
  EXPECT_LE(plain.text.size(), 12u);
  // Paced, the tokens of a burst go one by one.
  EXPECT_GE(smooth.text.size(), 18u);
  // Pacing never delays the end: held tokens go with the finish (some scheduling slack).
  EXPECT_LE(smooth_took, plain_took + 150ms);
}

// A reply that ends right after a burst: its tokens go with the finish, not paced out after it.
TEST(StreamSmoothing, TheFinishReleasesWhatIsHeld) {
  testing::FakeEngine engine;
  bursty(engine);
  engine.burst = 5;  // 24 tokens and the finish in bursts of 5: the last is u v w x and the finish
  Clock::duration took{};
  const Writes w = stream_through(engine, 400ms, &took);
  ASSERT_FALSE(w.text.empty());
  EXPECT_EQ(joined(w), "abcdefghijklmnopqrstuvwx[done]");
  // Paced, the earlier bursts' tokens went one by one; the last burst's went at once with the
  // finish (at most its first, already due, before it).
  EXPECT_GE(w.text.size(), 12u);
  EXPECT_TRUE(w.text.back() == "uvwx[done]" || w.text.back() == "vwx[done]") << w.text.back();
}

TEST(StreamSmoothing, AnErrorFlushesWhatIsHeld) {
  testing::FakeEngine engine;
  bursty(engine);
  engine.fail_after_first = true;
  Clock::duration took{};
  const Writes w = stream_through(engine, 400ms, &took);
  EXPECT_EQ(joined(w), "a[error: fake engine failure]");
}

}  // namespace
}  // namespace tf::server
