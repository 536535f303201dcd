// Smooth streaming: StreamPacer's timing rule over given times, and GenerationSession's
// pump spreading a fake engine's bursts over separate writes (or not, when off).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
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

// The fake engine, noting when it sent a finish (before the session can see it).
class TimedEngine : public testing::FakeEngine {
 public:
  std::atomic<Clock::time_point> finish_sent{};
  Status submit(GenerationRequest request, EventSink sink) override {
    return FakeEngine::submit(std::move(request), [this, sink = std::move(sink)](GenerationEvent ev) {
      if (ev.kind == GenerationEvent::Kind::kFinish) finish_sent = Clock::now();
      sink(std::move(ev));
    });
  }
};

// `slow_first_write`: the client takes that long over the first write (events queue meanwhile).
Writes stream_through(testing::FakeEngine& engine, std::chrono::milliseconds smooth, Clock::duration* took,
                      Clock::duration slow_first_write = {}) {
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
      if (w.text.size() == 1) std::this_thread::sleep_for(slow_first_write);
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

// Paced with a limit no token reaches here, even on a loaded machine: each write then carries
// at most one token (the next is due a gap after it), but for the finish's write, which carries
// whatever is still held. Counting writes instead depends on how the engine, the pump and the
// load interleave (a stalled pump's backlog goes with the finish).
constexpr auto kLongHold = 5000ms;

void expect_one_token_a_write_but_the_last(const Writes& w) {
  for (size_t i = 0; i + 1 < w.text.size(); ++i) EXPECT_EQ(w.text[i].size(), 1u) << i << ": " << w.text[i];
}

TEST(StreamSmoothing, BurstsGoOutAsSeparateEvenWrites) {
  TimedEngine engine;
  bursty(engine);
  Clock::duration plain_took{}, smooth_took{};
  // Unpaced, the client is slow over the first write (bursts 2 to 4 come meanwhile).
  const Writes plain = stream_through(engine, 0ms, &plain_took, /*slow_first_write=*/300ms);
  const Writes smooth = stream_through(engine, kLongHold, &smooth_took);
  EXPECT_EQ(joined(plain), "abcdefghijklmnopqrstuvwx[done]");
  EXPECT_EQ(joined(smooth), joined(plain)) << "the same text, in the same order";
  // Unpaced, what arrived goes at once: the next write carries all that queued behind the slow
  // one (paced, it would carry one token). Counting writes would depend on how the engine and
  // the pump interleave: on a loaded machine most tokens went in writes of their own (19).
  ASSERT_GE(plain.text.size(), 2u);
  EXPECT_GE(plain.text[1].size(), 2u) << plain.text[1];
  // Paced, the tokens of a burst go one by one.
  expect_one_token_a_write_but_the_last(smooth);
  // Pacing never delays the end: held tokens go with the finish as soon as it arrives (some
  // scheduling slack). Measured from the engine's finish, not against the unpaced run's end:
  // two runs' ends differed by 430 ms on a loaded machine.
  EXPECT_LE(smooth.at.back() - engine.finish_sent.load(), 150ms);
}

// A reply that ends right after a burst: its tokens go with the finish, not paced out after it.
TEST(StreamSmoothing, TheFinishReleasesWhatIsHeld) {
  testing::FakeEngine engine;
  bursty(engine);
  engine.burst = 5;  // 24 tokens and the finish in bursts of 5: the last is u v w x and the finish
  // Bursts 200 ms apart: a mean gap of ~40 ms, so that the engine would have to stall for two
  // gaps while sending the last burst for its w to go out before the finish arrives.
  engine.delay = 200ms;
  Clock::duration took{};
  const Writes w = stream_through(engine, kLongHold, &took);
  ASSERT_FALSE(w.text.empty());
  EXPECT_EQ(joined(w), "abcdefghijklmnopqrstuvwx[done]");
  // Paced, the earlier bursts' tokens went one by one; the last burst's went at once with the
  // finish (at most its first, already due, and its second, had the engine stalled a gap, before
  // it; earlier ones too, had a loaded machine left them held). Not flushed, the finish would go
  // with x alone, after w.
  expect_one_token_a_write_but_the_last(w);
  EXPECT_TRUE(w.text.back().ends_with("wx[done]")) << w.text.back();
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
