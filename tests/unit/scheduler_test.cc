// Scheduler timelines with a fake model: which requests run at each step and
// how many tokens each advances. Requests are named by letters; a step prints
// as "A:P8 B:D1" (P = prefill chunk, D = decode; "!" marks the prefill chunk
// that completes the prompt and yields the first token).
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/cache_budget.h"
#include "engine/scheduler.h"

namespace tf {
namespace {

RequestId id(char name) { return static_cast<RequestId>(name); }

std::string render(const StepPlan& plan) {
  std::string s;
  for (const Advance& a : plan.advances) {
    if (!s.empty()) s += ' ';
    s += static_cast<char>(a.id);
    s += a.kind == AdvanceKind::kPrefill ? ":P" : ":D";
    s += std::to_string(a.tokens);
    if (a.kind == AdvanceKind::kPrefill && a.samples) s += '!';
  }
  return s;
}

// The fake model: counts the tokens each request samples and, like an EOS,
// finishes a request after eos_after[id] samples.
struct Harness {
  Harness(SchedulerConfig cfg, int64_t cache_tokens) : cache(cache_tokens), sched(cfg, cache) {
    EXPECT_TRUE(cfg.validate().is_ok());
  }

  SubmitResult submit(char name, int64_t prompt, int64_t max_new, int eos_after = 0) {
    if (eos_after > 0) eos_after_[id(name)] = eos_after;
    return sched.submit({id(name), prompt, max_new});
  }

  std::string step() {
    last = sched.schedule();
    for (const Advance& a : last.advances) {
      if (!a.samples) continue;
      const int n = ++sampled[a.id];
      auto it = eos_after_.find(a.id);
      if (it != eos_after_.end() && n == it->second) {
        EXPECT_TRUE(sched.finish(a.id));
      }
    }
    return render(last);
  }

  CountingCacheBudget cache;
  Scheduler sched;
  StepPlan last;
  std::map<RequestId, int> sampled;

 private:
  std::map<RequestId, int> eos_after_;
};

SchedulerConfig config(int32_t parallel, int32_t budget, int32_t max_waiting = 16, int32_t chunk = 0) {
  return {parallel, budget, max_waiting, chunk};
}

TEST(SchedulerTimeline, ThreeArrivalsBudget8Parallel2) {
  Harness h(config(2, 8), 1000);
  ASSERT_EQ(h.submit('A', 10, 3), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P8");
  EXPECT_EQ(h.last.admitted, std::vector<RequestId>{id('A')});
  ASSERT_EQ(h.submit('B', 4, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P2! B:P4!");
  ASSERT_EQ(h.submit('C', 3, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:D1 B:D1");  // C waits: both streams are busy
  EXPECT_EQ(h.sched.stats().waiting, 1);
  EXPECT_EQ(h.step(), "A:D1 C:P3!");  // B hit max_new_tokens (2) and left
  EXPECT_EQ(h.last.finished_by_length, std::vector<RequestId>{id('B')});
  EXPECT_EQ(h.step(), "C:D1");
  EXPECT_EQ(h.last.finished_by_length, std::vector<RequestId>{id('A')});
  EXPECT_EQ(h.step(), "");
  EXPECT_FALSE(h.sched.has_work());
  EXPECT_EQ(h.cache.free_tokens(), 1000);
  EXPECT_EQ(h.cache.live_reservations(), 0u);
  EXPECT_EQ(h.sampled[id('A')], 3);
  EXPECT_EQ(h.sampled[id('B')], 2);
  EXPECT_EQ(h.sampled[id('C')], 2);
}

TEST(SchedulerTimeline, WaitsForCacheUntilAnotherFinishes) {
  Harness h(config(4, 16), 20);
  ASSERT_EQ(h.submit('A', 8, 4, /*eos_after=*/2), SubmitResult::kQueued);  // needs 12
  ASSERT_EQ(h.submit('B', 6, 4), SubmitResult::kQueued);                   // needs 10: does not fit beside A
  ASSERT_EQ(h.submit('C', 1, 1), SubmitResult::kQueued);                   // fits, but never overtakes B
  EXPECT_EQ(h.step(), "A:P8!");
  EXPECT_EQ(h.cache.free_tokens(), 8);
  EXPECT_EQ(h.sched.stats().waiting, 2);
  EXPECT_EQ(h.step(), "A:D1");  // A's 2nd sample: the fake model's EOS, finish() frees 12
  EXPECT_EQ(h.cache.free_tokens(), 20);
  EXPECT_EQ(h.step(), "B:P6! C:P1!");
  EXPECT_EQ(h.last.admitted, (std::vector<RequestId>{id('B'), id('C')}));
  EXPECT_EQ(h.cache.free_tokens(), 20 - 10 - 2);
}

TEST(SchedulerTimeline, LowerPriorityValuesLeaveTheQueueFirstTiesInArrivalOrder) {
  Harness h(config(1, 8), 1000);
  auto submit = [&](char name, int32_t priority) {
    RequestSpec s{id(name), 2, 1};
    s.priority = priority;
    return h.sched.submit(s);
  };
  ASSERT_EQ(submit('A', 5), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P2!");  // running: never stopped for a later arrival
  ASSERT_EQ(submit('B', 0), SubmitResult::kQueued);
  ASSERT_EQ(submit('C', -3), SubmitResult::kQueued);
  ASSERT_EQ(submit('D', 0), SubmitResult::kQueued);
  ASSERT_EQ(submit('E', 7), SubmitResult::kQueued);
  ASSERT_EQ(submit('F', -3), SubmitResult::kQueued);
  std::string order;
  for (int i = 0; i < 6 && h.sched.has_work(); ++i) {
    h.step();
    for (RequestId r : h.last.admitted) order += static_cast<char>(r);
  }
  EXPECT_EQ(order, "CFBDE");
}

TEST(SchedulerTimeline, QueueFullIsRejectedAndFreesUpAfterAdmission) {
  Harness h(config(1, 8, /*max_waiting=*/2), 1000);
  EXPECT_EQ(h.submit('A', 4, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.submit('B', 4, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.submit('C', 4, 2), SubmitResult::kQueueFull);
  EXPECT_STREQ(submit_result_name(SubmitResult::kQueueFull), "queue_full");
  EXPECT_EQ(h.step(), "A:P4!");
  EXPECT_EQ(h.submit('C', 4, 2), SubmitResult::kQueued);  // A left the queue
  EXPECT_EQ(h.submit('D', 4, 2), SubmitResult::kQueueFull);
}

TEST(SchedulerTimeline, TooLargeAndInvalidAreRejectedAtOnce) {
  Harness h(config(2, 8), 10);
  EXPECT_EQ(h.submit('A', 8, 4), SubmitResult::kTooLarge);
  EXPECT_EQ(h.submit('B', 0, 4), SubmitResult::kInvalid);
  EXPECT_EQ(h.submit('B', 4, 0), SubmitResult::kInvalid);
  EXPECT_EQ(h.submit('B', 4, 6), SubmitResult::kQueued);  // exactly the pool
  EXPECT_EQ(h.submit('B', 1, 1), SubmitResult::kInvalid);  // duplicate id while waiting
  EXPECT_EQ(h.step(), "B:P4!");
  EXPECT_EQ(h.submit('B', 1, 1), SubmitResult::kInvalid);  // duplicate id while running
}

TEST(SchedulerTimeline, CancelMidPrefillFreesItsBudgetAtTheNextStep) {
  Harness h(config(2, 8), 30);
  ASSERT_EQ(h.submit('A', 20, 5), SubmitResult::kQueued);  // 25 of 30
  ASSERT_EQ(h.submit('B', 6, 4), SubmitResult::kQueued);   // 10: waits for A
  EXPECT_EQ(h.step(), "A:P8");
  EXPECT_EQ(h.cache.free_tokens(), 5);
  h.sched.cancel(id('A'));  // client disconnect, e.g. from an HTTP thread
  EXPECT_EQ(h.cache.free_tokens(), 5);  // nothing moves until the next step
  EXPECT_EQ(h.step(), "B:P6!");
  EXPECT_EQ(h.last.cancelled, std::vector<RequestId>{id('A')});
  EXPECT_EQ(h.cache.free_tokens(), 20);
  h.sched.cancel(id('A'));  // twice, or after it left: ignored
  h.sched.cancel(id('Z'));
  EXPECT_EQ(h.step(), "B:D1");
  EXPECT_TRUE(h.last.cancelled.empty());
}

TEST(SchedulerTimeline, CancelWhileWaitingLeavesTheQueue) {
  Harness h(config(1, 8), 1000);
  ASSERT_EQ(h.submit('A', 4, 8), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('B', 4, 8), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('C', 4, 8), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P4!");
  h.sched.cancel(id('B'));
  h.sched.cancel(id('A'));
  EXPECT_EQ(h.step(), "C:P4!");
  EXPECT_EQ(h.last.cancelled, (std::vector<RequestId>{id('B'), id('A')}));
  EXPECT_EQ(h.sched.stats().waiting, 0);
  EXPECT_EQ(h.cache.free_tokens(), 1000 - 12);
}

TEST(SchedulerTimeline, LongPrefillDoesNotStarveDecodes) {
  Harness h(config(2, 8), 1000);
  ASSERT_EQ(h.submit('A', 3, 100), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P3!");
  ASSERT_EQ(h.submit('B', 30, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:D1 B:P7");
  EXPECT_EQ(h.step(), "A:D1 B:P7");
  EXPECT_EQ(h.step(), "A:D1 B:P7");
  EXPECT_EQ(h.step(), "A:D1 B:P7");
  EXPECT_EQ(h.step(), "A:D1 B:P2!");
  EXPECT_EQ(h.step(), "A:D1 B:D1");
  const auto s = h.sched.stats();
  // B reached max_new_tokens; it keeps its slot until the next schedule() releases it.
  EXPECT_EQ(s.decoding, 2);
  EXPECT_EQ(s.prefilling, 0);
  EXPECT_EQ(s.running, 2);
  EXPECT_EQ(h.step(), "A:D1");
}

TEST(SchedulerTimeline, OldestPrefillFirstAndChunkCap) {
  Harness plain(config(3, 8), 1000);
  ASSERT_EQ(plain.submit('A', 6, 1), SubmitResult::kQueued);
  ASSERT_EQ(plain.submit('B', 6, 1), SubmitResult::kQueued);
  ASSERT_EQ(plain.submit('C', 6, 1), SubmitResult::kQueued);
  EXPECT_EQ(plain.step(), "A:P6! B:P2");
  EXPECT_EQ(plain.step(), "B:P4! C:P4");  // A (1 token) is done; budget all to prefill
  EXPECT_EQ(plain.step(), "C:P2!");

  Harness capped(config(3, 8, 16, /*chunk=*/3), 1000);
  ASSERT_EQ(capped.submit('A', 5, 1), SubmitResult::kQueued);
  ASSERT_EQ(capped.submit('B', 5, 1), SubmitResult::kQueued);
  ASSERT_EQ(capped.submit('C', 5, 1), SubmitResult::kQueued);
  EXPECT_EQ(capped.step(), "A:P3 B:P3 C:P2");
  EXPECT_EQ(capped.step(), "A:P2! B:P2! C:P3!");
}

TEST(SchedulerTimeline, NoAdmissionWithoutTokensLeftThisStep) {
  Harness h(config(2, 8), 1000);
  ASSERT_EQ(h.submit('A', 20, 1), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('B', 2, 1), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P8");  // B would get 0 tokens: it stays queued and holds no cache
  EXPECT_TRUE(h.last.admitted.size() == 1);
  EXPECT_EQ(h.cache.free_tokens(), 1000 - 21);
  EXPECT_EQ(h.step(), "A:P8");
  EXPECT_EQ(h.step(), "A:P4! B:P2!");
}

TEST(SchedulerTimeline, PrefixHitIsJustFewerPrefillTokens) {
  Harness h(config(2, 8), 1000);
  ASSERT_EQ(h.sched.submit({id('A'), 20, 2, /*cached_prompt_tokens=*/17}), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P3!");
  EXPECT_EQ(h.cache.free_tokens(), 1000 - 22);
  EXPECT_EQ(h.step(), "A:D1");
  EXPECT_EQ(h.sched.submit({id('B'), 5, 1, 5}), SubmitResult::kInvalid);  // nothing left to run
  EXPECT_EQ(h.sched.submit({id('B'), 5, 1, -1}), SubmitResult::kInvalid);
}

// The engine's prompt reuse decides the cached tokens at admission (after the cache is
// reserved): the hook's answer replaces the spec's, clamped so the last token still runs.
TEST(SchedulerTimeline, PrefixHitHookDecidesAtAdmission) {
  Harness h(config(2, 8, 16, 4), 1000);
  std::vector<RequestId> asked;
  std::vector<int64_t> free_then;
  h.sched.set_prefix_hit([&](const RequestSpec& spec) -> int64_t {
    asked.push_back(spec.id);
    free_then.push_back(h.cache.free_tokens());
    return spec.id == id('A') ? 8 : 100;
  });
  ASSERT_EQ(h.submit('A', 10, 2), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P2!");
  ASSERT_EQ(h.submit('B', 6, 1), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:D1 B:P1!");  // clamped to 5 of 6
  EXPECT_EQ(asked, (std::vector<RequestId>{id('A'), id('B')}));
  EXPECT_EQ(free_then, (std::vector<int64_t>{1000 - 12, 1000 - 12 - 7}));  // each asked once reserved
}

TEST(SchedulerTimeline, DestructorReturnsReservations) {
  CountingCacheBudget cache(100);
  {
    Scheduler s(config(2, 8), cache);
    ASSERT_EQ(s.submit({1, 4, 4}), SubmitResult::kQueued);
    ASSERT_FALSE(s.schedule().idle());
    EXPECT_EQ(cache.free_tokens(), 92);
  }
  EXPECT_EQ(cache.free_tokens(), 100);
}

TEST(SchedulerTimeline, CancelFromAnotherThread) {
  Harness h(config(4, 64), 100000);
  for (char c = 'A'; c < 'A' + 8; ++c) ASSERT_EQ(h.submit(c, 10, 1000), SubmitResult::kQueued);
  std::thread t([&] {
    for (char c = 'A'; c < 'A' + 8; ++c) h.sched.cancel(id(c));
  });
  for (int i = 0; i < 50; ++i) h.step();
  t.join();
  h.step();
  EXPECT_FALSE(h.sched.has_work());
  EXPECT_EQ(h.cache.free_tokens(), 100000);
}

// Random arrivals, EOS and cancels; the invariants hold at every step.
TEST(SchedulerTimeline, RandomTimelineKeepsInvariants) {
  std::mt19937 rng(5);
  const SchedulerConfig cfg = config(3, 12, 5);
  const int64_t capacity = 200;
  CountingCacheBudget cache(capacity);
  Scheduler sched(cfg, cache);
  std::deque<RequestSpec> queued;            // our mirror of the FIFO
  std::map<RequestId, RequestSpec> running;  // admitted, not released
  std::map<RequestId, int64_t> prefilled, sampled;
  RequestId next = 1000;
  int rejected = 0, admitted = 0, eos = 0, cancelled = 0;
  auto forget = [&](RequestId r) {
    running.erase(r);
    std::erase_if(queued, [&](const RequestSpec& q) { return q.id == r; });
  };
  for (int step = 0; step < 3000; ++step) {
    if (rng() % 3 == 0) {
      const RequestSpec spec{next++, 1 + static_cast<int64_t>(rng() % 40), 1 + static_cast<int64_t>(rng() % 30)};
      if (sched.submit(spec) == SubmitResult::kQueued) {
        queued.push_back(spec);
      } else {
        ++rejected;
      }
    }
    if (rng() % 12 == 0 && next > 1000) sched.cancel(1000 + rng() % (next - 1000));

    std::set<RequestId> decoding_before;
    for (const auto& [r, spec] : running) {
      if (prefilled[r] == spec.prompt_tokens && sampled[r] < spec.max_new_tokens) decoding_before.insert(r);
    }
    const StepPlan p = sched.schedule();
    for (RequestId r : p.cancelled) {
      forget(r);
      decoding_before.erase(r);
      ++cancelled;
    }
    for (RequestId r : p.finished_by_length) {
      ASSERT_EQ(sampled[r], running[r].max_new_tokens);
      forget(r);
    }
    for (RequestId r : p.admitted) {
      ASSERT_FALSE(queued.empty());
      ASSERT_EQ(queued.front().id, r) << "admission is FIFO";
      running[r] = queued.front();
      queued.pop_front();
      ++admitted;
    }
    ASSERT_LE(p.total_tokens(), cfg.step_token_budget);
    ASSERT_LE(static_cast<int>(running.size()), cfg.max_running);
    std::set<RequestId> decoded;
    for (const Advance& a : p.advances) {
      ASSERT_TRUE(running.count(a.id));
      ASSERT_GT(a.tokens, 0);
      if (a.kind == AdvanceKind::kDecode) {
        ASSERT_EQ(a.tokens, 1);
        decoded.insert(a.id);
      } else {
        prefilled[a.id] += a.tokens;
        ASSERT_LE(prefilled[a.id], running[a.id].prompt_tokens);
      }
      if (a.samples) ++sampled[a.id];
    }
    ASSERT_EQ(decoded, decoding_before) << "every decoding stream advances by one, every step";
    // Work-conserving: spare tokens and a free slot mean the head does not fit.
    if (p.total_tokens() < cfg.step_token_budget && static_cast<int>(running.size()) < cfg.max_running &&
        !queued.empty()) {
      ASSERT_LT(cache.free_tokens(), queued.front().cache_tokens());
    }
    int64_t reserved = 0;
    for (const auto& [r, spec] : running) reserved += spec.cache_tokens();
    ASSERT_EQ(capacity - cache.free_tokens(), reserved);
    // The fake model's EOS.
    for (const Advance& a : p.advances) {
      if (a.samples && rng() % 15 == 0 && sampled[a.id] < running[a.id].max_new_tokens) {
        ASSERT_TRUE(sched.finish(a.id));
        forget(a.id);
        ++eos;
      }
    }
  }
  for (RequestId r = 1000; r < next; ++r) sched.cancel(r);
  (void)sched.schedule();
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(cache.free_tokens(), capacity);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(admitted, 100);
  EXPECT_GT(eos, 10);
  EXPECT_GT(cancelled, 10);
}

TEST(SchedulerPolicies, StepTokenPolicyDecodeFirst) {
  const StepTokenPolicy policy{10, 0};
  const std::vector<RunningView> views{{50}, {0}, {3}, {0}};
  EXPECT_EQ(policy(views), (std::vector<int32_t>{8, 1, 0, 1}));
  const StepTokenPolicy capped{10, 4};
  EXPECT_EQ(capped(views), (std::vector<int32_t>{4, 1, 3, 1}));
  const StepTokenPolicy tight{2, 0};
  EXPECT_EQ(tight(views), (std::vector<int32_t>{0, 1, 0, 1}));
}

TEST(SchedulerPolicies, AlignedChunksEndOnMultiplesAndAreNeverCut) {
  const StepTokenPolicy aligned{12, 8, true};
  // 50 left after 3 done: the chunk ends at 8 (5 tokens); the next one would need 8 but only 6 are left
  // after the decode, so it waits rather than being cut.
  const std::vector<RunningView> views{{50, 3}, {0, 0}, {20, 0}};
  EXPECT_EQ(aligned(views), (std::vector<int32_t>{5, 1, 0}));
  const std::vector<RunningView> tail{{2, 16}, {9, 8}};
  EXPECT_EQ(aligned(tail), (std::vector<int32_t>{2, 8}));
}

// With aligned chunks a request's prefill chunks are the same alone and beside others.
TEST(SchedulerTimeline, AlignedChunksDoNotDependOnBatchMates) {
  auto chunks_of = [](bool with_others) {
    SchedulerConfig cfg{4, 20, 16, 8, true};
    Harness h(cfg, 10000);
    if (with_others) {
      EXPECT_EQ(h.submit('B', 13, 5), SubmitResult::kQueued);
      EXPECT_EQ(h.submit('C', 3, 5), SubmitResult::kQueued);
    }
    EXPECT_EQ(h.submit('A', 30, 2), SubmitResult::kQueued);
    std::vector<int32_t> a_chunks;
    for (int i = 0; i < 20; ++i) {
      h.step();
      for (const Advance& adv : h.last.advances) {
        if (adv.id == id('A') && adv.kind == AdvanceKind::kPrefill) a_chunks.push_back(adv.tokens);
      }
    }
    return a_chunks;
  };
  EXPECT_EQ(chunks_of(false), (std::vector<int32_t>{8, 8, 8, 6}));
  EXPECT_EQ(chunks_of(true), (std::vector<int32_t>{8, 8, 8, 6}));
  SchedulerConfig bad{4, 10, 16, 8, true};
  EXPECT_FALSE(bad.validate().is_ok());
}

// Batch-invariant steps: within invariant_rows rows, or one prompt chunk alone; decodes and a
// chunk too large to join them take turns.
TEST(SchedulerPolicies, BatchInvariantStepsKeepWithinTheRowsOrRunAChunkAlone) {
  const StepTokenPolicy p{20, 8, true, 8};
  const std::vector<RunningView> views{{0, 0}, {0, 0}, {30, 0}};
  EXPECT_EQ(p(views, true), (std::vector<int32_t>{0, 0, 8}));   // the chunk's turn: alone
  EXPECT_EQ(p(views, false), (std::vector<int32_t>{1, 1, 0}));  // the decodes' turn
  // A tail chunk small enough to join the decodes does, on either turn.
  const std::vector<RunningView> tail{{0, 0}, {3, 24}, {0, 0}};
  EXPECT_EQ(p(tail, true), (std::vector<int32_t>{1, 3, 1}));
  EXPECT_EQ(p(tail, false), (std::vector<int32_t>{1, 3, 1}));
  // Nothing to decode: the oldest chunk runs alone whatever the turn; two never share a step.
  const std::vector<RunningView> two{{30, 0}, {12, 0}};
  EXPECT_EQ(p(two, false), (std::vector<int32_t>{8, 0}));
  // Off: the decodes and both chunks share the step, as before.
  const StepTokenPolicy mixed{20, 8, true, 0};
  EXPECT_EQ(mixed(views, true), (std::vector<int32_t>{1, 1, 8}));
}

TEST(SchedulerTimeline, BatchInvariantStepsNeverMixALargeChunkAndNoRequestStarves) {
  SchedulerConfig cfg{4, 36, 16, 16, true, 8};
  ASSERT_TRUE(cfg.validate().is_ok());
  Harness h(cfg, 100000);
  ASSERT_EQ(h.submit('A', 5, 40), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('B', 3, 40), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P5! B:P3!");  // 8 rows: one step
  ASSERT_EQ(h.submit('C', 50, 3), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('D', 20, 3), SubmitResult::kQueued);
  std::vector<std::string> steps;
  for (int i = 0; i < 12; ++i) steps.push_back(h.step());
  EXPECT_EQ(steps[0], "C:P16");      // C's first chunk alone (A and B wait one step)
  EXPECT_EQ(steps[1], "A:D1 B:D1");  // then the decodes
  EXPECT_EQ(steps[2], "C:P16");
  EXPECT_EQ(steps[3], "A:D1 B:D1");
  for (int i = 0; i < 400 && h.sched.has_work(); ++i) {
    std::string s = h.step();
    int64_t rows = 0, entries = 0;
    for (const Advance& a : h.last.advances) {
      rows += a.tokens;
      ++entries;
    }
    EXPECT_TRUE(rows <= 8 || entries == 1) << s;
  }
  EXPECT_FALSE(h.sched.has_work());
  for (char r : {'A', 'B', 'C', 'D'}) EXPECT_GT(h.sampled[id(r)], 0) << r;
}

// A request's own smaller cap (prompt logprobs bound the logits rows a step brings to the
// host) holds for its chunks only, aligned or not; a larger one changes nothing.
TEST(SchedulerPolicies, ARequestsOwnChunkCapIsKeptWhenSmaller) {
  const StepTokenPolicy plain{20, 8};
  const std::vector<RunningView> views{{10, 0, 3}, {10, 0, 0}, {10, 0, 16}};
  EXPECT_EQ(plain(views), (std::vector<int32_t>{3, 8, 8}));
  const StepTokenPolicy aligned{20, 8, true};
  const std::vector<RunningView> later{{10, 4, 3}, {10, 4, 0}};
  EXPECT_EQ(aligned(later), (std::vector<int32_t>{2, 4}));  // to 6 (a multiple of 3), to 8

  Harness h(config(2, 20, 16, /*chunk=*/8), 1000);
  RequestSpec capped{id('A'), 10, 1};
  capped.max_prefill_chunk = 4;
  ASSERT_EQ(h.sched.submit(capped), SubmitResult::kQueued);
  ASSERT_EQ(h.submit('B', 10, 5), SubmitResult::kQueued);
  EXPECT_EQ(h.step(), "A:P4 B:P8");
  EXPECT_EQ(h.step(), "A:P4 B:P2!");
  EXPECT_EQ(h.step(), "A:P2! B:D1");
}

TEST(SchedulerPolicies, AdmissionNeedsSlotTokensAndCache) {
  const AdmissionPolicy policy{2};
  EXPECT_TRUE(policy({1, 5, true}));
  EXPECT_FALSE(policy({2, 5, true}));
  EXPECT_FALSE(policy({1, 0, true}));
  EXPECT_FALSE(policy({1, 5, false}));
}

TEST(SchedulerConfig, Validation) {
  EXPECT_TRUE(SchedulerConfig{}.validate().is_ok());
  EXPECT_NE(config(0, 8).validate().message().find("max_running"), std::string::npos);
  EXPECT_NE(config(4, 3).validate().message().find("step_token_budget"), std::string::npos);
  EXPECT_FALSE(config(1, 8, 0).validate().is_ok());
  EXPECT_FALSE(config(1, 8, 1, -2).validate().is_ok());
}

TEST(CountingCacheBudget, ReserveAndRelease) {
  CountingCacheBudget c(10);
  auto a = c.reserve(6);
  ASSERT_TRUE(a);
  EXPECT_FALSE(c.can_admit(5));
  EXPECT_EQ(c.reserve(5).status().code(), StatusCode::kResourceExhausted);
  c.release(*a);
  c.release(*a);  // twice: no-op
  EXPECT_EQ(c.free_tokens(), 10);
  EXPECT_FALSE(c.can_admit(-1));
}

}  // namespace
}  // namespace tf
