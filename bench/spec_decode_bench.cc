// What speculative decoding's verify steps cost and buy, end to end in the engine, on any
// checkpoint (a synthetic one on the GPU machine: scripts/device/gpu_tests.sh part "spec").
//
// One batch-1 greedy request (random prompt ids, ignore_eos) runs first without drafts
// (serial decoding; the drafter records the reply), then with drafts of k = 1, 3, 7 tokens
// per step taken from that recording (all kept: the best case, what a long copy or a
// perfect drafter gives), then with drafts that are all wrong (the worst case: every verify
// step yields one token, at the cost of k + 1 rows). Every run's reply must equal the
// serial one. Then the MTP layer drafts (DRAFTER=mtp, k = 1 and 3 every step, an engine
// of its own each): on a synthetic checkpoint its drafts are mostly wrong, so this measures
// what the layer's passes add to a wrong-draft verify step of the same k. Printed: decode
// tok/s per run, tokens per step, and the ratio to serial measured side by side in this
// process; the break-even acceptance of each k follows from the wrong-draft cost.
//
//   spec_decode_bench --model DIR [--device cuda] [--tokens 128] [--prompt-tokens 256]
//                     [--cases right1,right3,right7,wrong1,wrong3,wrong7,mtp1,mtp3]
//                     [--synth-experts N: first write the full-geometry synthetic checkpoint with
//                      N EXL3 K=4 mcg experts per layer into --model]
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/synthetic_checkpoint.h"

namespace tf::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Drafter {
  std::mutex mu;
  enum class Mode { kRecord, kRight, kWrong } mode = Mode::kRecord;
  int limit = 0;
  std::vector<int32_t> run;  // prompt + reply, as last asked while recording
  std::vector<int32_t> drafts(std::span<const int32_t> t, int max) {
    std::lock_guard<std::mutex> lock(mu);
    if (mode == Mode::kRecord) {
      run.assign(t.begin(), t.end());
      return {};
    }
    if (run.size() <= t.size()) return {};  // past the recorded reply
    const size_t n = std::min<size_t>(static_cast<size_t>(std::min(max, limit)), run.size() - t.size());
    std::vector<int32_t> d(run.begin() + static_cast<std::ptrdiff_t>(t.size()),
                           run.begin() + static_cast<std::ptrdiff_t>(t.size() + n));
    if (mode == Mode::kWrong)
      for (int32_t& x : d) x = x == 11 ? 12 : 11;
    return d;
  }
};

struct Run {
  std::string text;
  int64_t tokens = 0;
  double decode_s = 0, ttft_s = 0;
  bool ok = false;
};

Run run_once(Engine& e, const GenerationRequest& g) {
  std::mutex mu;
  std::condition_variable cv;
  Run r;
  bool done = false;
  const auto t0 = Clock::now();
  Clock::time_point first{};
  Status s = e.submit(g, [&](GenerationEvent ev) {
    std::lock_guard<std::mutex> lock(mu);
    if (first == Clock::time_point{}) first = Clock::now();
    if (ev.kind == GenerationEvent::Kind::kError) {
      std::fprintf(stderr, "error: %s\n", ev.error.to_string().c_str());
      done = true;
    } else if (ev.kind == GenerationEvent::Kind::kFinish) {
      r.tokens = ev.completion_tokens;
      r.decode_s = std::chrono::duration<double>(Clock::now() - first).count();
      r.ttft_s = std::chrono::duration<double>(first - t0).count();
      r.ok = true;
      done = true;
    } else {
      r.text += ev.reasoning + ev.content;
    }
    cv.notify_all();
  });
  if (!s.is_ok()) {
    std::fprintf(stderr, "submit: %s\n", s.to_string().c_str());
    return r;
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return r;
}

int main_impl(int argc, char** argv) {
  std::string model, device = "cuda", cases = "right1,right3,right7,wrong1,wrong3,wrong7,mtp1,mtp3";
  int64_t tokens = 128, prompt_tokens = 256;
  int synth_experts = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--device") device = argv[i + 1];
    else if (a == "--tokens") tokens = std::atoll(argv[i + 1]);
    else if (a == "--prompt-tokens") prompt_tokens = std::atoll(argv[i + 1]);
    else if (a == "--cases") cases = std::string(",") + argv[i + 1] + ",";
    else if (a == "--synth-experts") synth_experts = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (model.empty() || tokens < 2 || prompt_tokens < 1) {
    std::fprintf(stderr, "usage: spec_decode_bench --model DIR [--device cuda] [--tokens N] [--prompt-tokens N]\n");
    return 2;
  }
  if (synth_experts > 0) {
    // --model names the folder to write: the full geometry with EXL3 K=4 mcg experts.
    SyntheticCheckpointOptions so;
    so.geometry = *synthetic_geometry_preset("full");
    so.geometry.experts = synth_experts;
    so.exl3 = Exl3SyntheticOptions{};
    so.overwrite = true;
    auto w = write_synthetic_checkpoint(model, so);
    if (!w) {
      std::fprintf(stderr, "synthetic checkpoint: %s\n", w.status().to_string().c_str());
      return 1;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is printed (a crash keeps what came before)
  Drafter drafter;
  EngineOptions o;
  o.model_dir = model;
  o.device = device;
  o.parallel = 1;
  o.context = prompt_tokens + tokens + 64;
  o.memory_reserve_gib = 0;
  o.kept_prompts = 0;  // every run prefills the same way
  o.draft_model = "none";  // the recorded drafts only (the MTP cases below have engines of their own)
  o.drafter = [&drafter](std::span<const int32_t> t, int max) { return drafter.drafts(t, max); };
  auto e = Engine::create(o);
  if (!e) {
    std::fprintf(stderr, "engine: %s\n", e.status().to_string().c_str());
    return 1;
  }
  GenerationRequest g;
  g.request_id = "spec-bench";
  std::mt19937 rng(7);
  const int32_t vocab = static_cast<int32_t>((*e)->model_info().vocab_size);
  std::uniform_int_distribution<int32_t> id(1000, std::max(1001, vocab / 2));
  for (int64_t i = 0; i < prompt_tokens; ++i) g.prompt_tokens.push_back(id(rng));
  g.sampling.max_tokens = tokens;
  g.sampling.temperature = 0.0;
  g.sampling.ignore_eos = true;

  std::printf("spec_decode_bench: %s on %s, prompt %lld tokens, %lld generated, batch 1, greedy\n", model.c_str(),
              device.c_str(), static_cast<long long>(prompt_tokens), static_cast<long long>(tokens));
  (void)run_once(**e, g);  // warm-up (and the recording)
  const Run serial = run_once(**e, g);
  if (!serial.ok) return 1;
  const double serial_tps = static_cast<double>(serial.tokens - 1) / serial.decode_s;
  std::printf("[spec] %-28s %8.1f tok/s  %6.2f tokens/step  ratio %.3f\n", "serial (no drafts)", serial_tps, 1.0, 1.0);
  int bad = 0;
  // One measured run: its line beside serial's, and whether its reply is serial's.
  auto measure = [&](Engine& engine, const std::string& name) {
    const EngineHealth before = engine.health();
    const Run r = run_once(engine, g);
    const EngineHealth after = engine.health();
    if (!r.ok) return false;
    const int64_t steps = after.model_steps - before.model_steps - 1;  // less the prefill
    const double tps = static_cast<double>(r.tokens - 1) / r.decode_s;
    std::printf("[spec] %-28s %8.1f tok/s  %6.2f tokens/step  ratio %.3f  (%lld of %lld drafts kept)%s\n",
                name.c_str(), tps, static_cast<double>(r.tokens - 1) / std::max<int64_t>(1, steps), tps / serial_tps,
                static_cast<long long>(after.accepted_tokens_total - before.accepted_tokens_total),
                static_cast<long long>(after.drafted_tokens_total - before.drafted_tokens_total),
                r.text == serial.text ? "" : "  REPLY DIFFERS FROM SERIAL");
    bad += r.text != serial.text;
    return true;
  };
  struct Case {
    Drafter::Mode mode;
    int k;
  };
  for (const Case c : {Case{Drafter::Mode::kRight, 1}, {Drafter::Mode::kRight, 3}, {Drafter::Mode::kRight, 7},
                       {Drafter::Mode::kWrong, 1}, {Drafter::Mode::kWrong, 3}, {Drafter::Mode::kWrong, 7}}) {
    const std::string tag = std::string(c.mode == Drafter::Mode::kRight ? "right" : "wrong") + std::to_string(c.k);
    if (cases.find(tag) == std::string::npos) continue;
    drafter.mode = c.mode;
    drafter.limit = c.k;
    if (!measure(**e, std::string(c.mode == Drafter::Mode::kRight ? "right" : "wrong") + " drafts, k = " +
                          std::to_string(c.k)))
      return 1;
  }
  const EngineOptions base = o;
  (*e).reset();  // one engine's weights on the device at a time
  for (int k : {1, 3}) {
    if (cases.find("mtp" + std::to_string(k)) == std::string::npos) continue;
    EngineOptions m = base;
    m.drafter = nullptr;
    m.draft_model = "mtp";
    m.copy_drafts = false;
    m.always_draft = true;
    m.mtp_max = k;
    auto me = Engine::create(m);
    if (!me) {
      std::fprintf(stderr, "MTP engine: %s\n", me.status().to_string().c_str());
      return 1;
    }
    (void)run_once(**me, g);  // warm-up
    if (!measure(**me, "MTP drafts, k = " + std::to_string(k))) return 1;
  }
  std::printf("[spec] a verify step of k+1 rows costs (serial / wrong-draft tok/s) serial steps; it pays when the "
              "mean tokens per step exceed that\n");
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tf::engine

int main(int argc, char** argv) { return tf::engine::main_impl(argc, argv); }
