// See offline_runner.h.
#include "bench/offline_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>

#include "bench/bench_report.h"
#include "bench/prompt_synthesis.h"

namespace tf::bench {

namespace {

using Clock = std::chrono::steady_clock;

// State the engine's sink threads and the submitting thread share; owned by a
// shared_ptr so that late events after the run find it alive (and closed).
struct PhaseState {
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point t0;
  std::vector<RequestRecord> records;
  std::vector<bool> ended;
  int in_flight = 0;
  bool closed = false;

  double now_s() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  // Caller holds mu.
  void end(size_t i, double now) {
    ended[i] = true;
    records[i].end_s = now;
    --in_flight;
    cv.notify_all();
  }

  void on_event(size_t i, const engine::GenerationEvent& ev) {
    double now = now_s();
    std::lock_guard<std::mutex> lock(mu);
    if (closed || ended[i]) return;
    RequestRecord& r = records[i];
    using Kind = engine::GenerationEvent::Kind;
    switch (ev.kind) {
      case Kind::kDelta:
        if (!ev.content.empty() || !ev.reasoning.empty() || !ev.tool_calls.empty()) {
          if (r.first_token_s < 0) r.first_token_s = now;
          r.token_times_s.push_back(now);
        }
        break;
      case Kind::kFinish:
        r.ok = true;
        r.output_tokens_from_usage = ev.completion_tokens > 0;
        r.output_tokens = r.output_tokens_from_usage ? ev.completion_tokens : static_cast<int64_t>(r.token_times_s.size());
        r.finish_reason = engine::finish_reason_name(ev.finish_reason);
        end(i, now);
        break;
      case Kind::kError:
        r.ok = false;
        r.error = "engine error: " + ev.error.to_string();
        end(i, now);
        break;
    }
  }
};

std::vector<RequestRecord> run_phase(engine::EngineApi& engine, const BenchSpec& spec,
                                     const std::vector<std::vector<int32_t>>& prompts, const std::string& id_prefix,
                                     double& wall_s) {
  auto st = std::make_shared<PhaseState>();
  const size_t n = prompts.size();
  st->records.resize(n);
  st->ended.assign(n, false);
  st->t0 = Clock::now();
  std::vector<std::string> ids(n);

  // Cancels requests past the timeout; caller holds `lock`, which is released
  // around cancel() so that the engine may deliver events meanwhile.
  auto expire = [&](std::unique_lock<std::mutex>& lock) {
    double now = st->now_s();
    std::vector<size_t> late;
    for (size_t i = 0; i < n; ++i)
      if (!st->ended[i] && !ids[i].empty() && now - st->records[i].start_s > spec.timeout_s) late.push_back(i);
    if (late.empty()) return;
    for (size_t i : late) {
      st->records[i].ok = false;
      char buf[64];
      std::snprintf(buf, sizeof buf, "timed out after %g s", spec.timeout_s);
      st->records[i].error = buf;
      st->end(i, now);
    }
    lock.unlock();
    for (size_t i : late) engine.cancel(ids[i]);
    lock.lock();
  };
  auto wait_until = [&](auto ready) {
    std::unique_lock<std::mutex> lock(st->mu);
    while (!ready()) {
      st->cv.wait_for(lock, std::chrono::milliseconds(50));
      expire(lock);
    }
  };

  for (size_t i = 0; i < n; ++i) {
    wait_until([&] { return st->in_flight < spec.concurrency; });
    engine::GenerationRequest g;
    g.request_id = id_prefix + std::to_string(i);
    g.prompt_tokens = prompts[i];
    g.sampling.max_tokens = spec.output_tokens;
    g.sampling.temperature = spec.temperature;
    g.sampling.ignore_eos = spec.ignore_eos;
    g.n = 1;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      RequestRecord& r = st->records[i];
      r.index = static_cast<int>(i);
      r.prompt_tokens = static_cast<int64_t>(prompts[i].size());
      r.start_s = st->now_s();
      ids[i] = g.request_id;
      ++st->in_flight;  // before submit: the engine may finish it inside submit()
    }
    Status s = engine.submit(std::move(g), [st, i](engine::GenerationEvent ev) { st->on_event(i, ev); });
    if (!s.is_ok()) {
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->ended[i]) {
        st->records[i].ok = false;
        st->records[i].error = "submit refused: " + s.to_string();
        st->end(i, st->now_s());
      }
    }
  }
  wait_until([&] { return st->in_flight == 0; });

  std::lock_guard<std::mutex> lock(st->mu);
  st->closed = true;
  wall_s = 0.0;
  for (const RequestRecord& r : st->records) wall_s = std::max(wall_s, r.end_s);
  return st->records;
}

}  // namespace

Expected<BenchRun> run_offline_bench(engine::EngineApi& engine, const BenchSpec& spec) {
  TF_RETURN_IF_ERROR(validate(spec));
  BenchRun run;
  run.mode = "offline";
  run.model = engine.model_info().id;
  TokenizeFn tokenize = [&engine](const std::string& text) { return engine.tokenize(text, false); };
  // Measured prompts are 0..requests-1, warmup prompts follow: none shares a prefix.
  TF_ASSIGN_OR_RETURN(auto prompts, synthesize_prompts(tokenize, spec.seed, 0, spec.requests + spec.warmup,
                                                       spec.prompt_tokens));
  if (spec.repeat_prompt) std::fill(prompts.begin(), prompts.end(), prompts.front());
  std::vector<std::vector<int32_t>> warm(prompts.begin() + spec.requests, prompts.end());
  prompts.resize(static_cast<size_t>(spec.requests));
  // Ids unique across runs against the same engine.
  std::string tag = "bench-" + std::to_string(Clock::now().time_since_epoch().count() % 1000000007) + "-";
  if (!warm.empty()) {
    double warm_wall = 0.0;
    auto records = run_phase(engine, spec, warm, tag + "warmup-", warm_wall);
    int failed = static_cast<int>(std::count_if(records.begin(), records.end(), [](const RequestRecord& r) { return !r.ok; }));
    if (failed > 0) run.notes.push_back(std::to_string(failed) + " of " + std::to_string(records.size()) + " warmup requests failed");
  }
  if (spec.prime_prompts) {
    double prime_wall = 0.0;
    auto records = run_phase(engine, priming_spec(spec), prompts, tag + "prime-", prime_wall);
    run.notes.push_back(prime_note(records, prime_wall));
  }
  run.records = run_phase(engine, spec, prompts, tag, run.wall_s);
  return run;
}

}  // namespace tf::bench
