// The engine's device-sampling path (engine_sampling.cc) changes no reply: the
// same requests through an engine that samples on the host (TF_DEVICE_SAMPLING=0)
// and through one that samples with Ops::sample_rows give the same texts, finish
// reasons and logprobs, while rows with host-only features (logit_bias, penalties,
// min_tokens) fall back per row in the same batch.
// Built twice: on the CPU backend (TF_DEVICE_SAMPLING=1; the CPU op sums as the host
// does, so logprobs are bit-equal) and, in the CUDA configuration, on the GPU
// (TF_TEST_DEVICE="cuda", the default auto mode; logprobs within 2e-6, see
// kernels/api/sample_rows.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

#include "engine/demo_checkpoint.h"
#include "engine/engine.h"

namespace tf::engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

#ifndef TF_TEST_DEVICE
#define TF_TEST_DEVICE "cpu"
#endif
constexpr bool kOnCpu = std::string_view(TF_TEST_DEVICE) == "cpu";

struct Reply {
  std::map<int, std::string> text;
  std::map<int, std::vector<TokenLogprob>> logprobs;
  std::map<int, FinishReason> finish;
  std::map<int, int64_t> tokens;
  bool error = false;
  std::string error_text;
};

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  Reply reply;
  int expected = 1;
  EventSink sink() {
    return [this](GenerationEvent ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.kind == GenerationEvent::Kind::kError) {
        reply.error = true;
        reply.error_text = ev.error.to_string();
      } else if (ev.kind == GenerationEvent::Kind::kFinish) {
        reply.finish[ev.choice] = ev.finish_reason;
        reply.tokens[ev.choice] = ev.completion_tokens;
      } else {
        reply.text[ev.choice] += ev.reasoning + ev.content;
        for (auto& l : ev.logprobs) reply.logprobs[ev.choice].push_back(l);
      }
      cv.notify_all();
    };
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 120s, [&] { return reply.error || static_cast<int>(reply.finish.size()) == expected; });
  }
};

std::vector<GenerationRequest> requests(Engine& e) {
  auto make = [&](const std::string& id, const std::string& text, int64_t max_tokens) {
    GenerationRequest g;
    g.request_id = id;
    auto ids = e.tokenize(text, false);
    EXPECT_TRUE(ids.has_value());
    g.prompt_tokens = *ids;
    g.sampling.max_tokens = max_tokens;
    g.sampling.ignore_eos = true;
    return g;
  };
  std::vector<GenerationRequest> out;
  GenerationRequest g = make("greedy", "The weather today is", 16);
  g.sampling.temperature = 0.0;
  out.push_back(g);
  g = make("t1", "Tell me a story about a dragon.", 20);
  g.sampling.temperature = 1.0;
  out.push_back(g);
  g = make("filters", "List three colours:", 20);
  g.sampling.temperature = 0.7;
  g.sampling.top_k = 40;
  g.sampling.top_p = 0.9;
  g.sampling.min_p = 0.02;
  g.sampling.seed = 1234;
  out.push_back(g);
  g = make("logprobs", "Pick a number between one and ten.", 12);
  g.sampling.temperature = 0.9;
  g.sampling.logprobs = true;
  g.sampling.top_logprobs = 4;
  g.n = 2;
  out.push_back(g);
  g = make("bias", "Say something nice.", 12);  // host only: logit_bias
  g.sampling.temperature = 1.0;
  g.sampling.logit_bias[100] = 5.0;
  out.push_back(g);
  g = make("penalties", "Repeat after me: la la la", 12);  // host only: penalties
  g.sampling.temperature = 0.8;
  g.sampling.presence_penalty = 0.5;
  g.sampling.repetition_penalty = 1.2;
  out.push_back(g);
  g = make("min_tokens", "End soon.", 10);  // host for the first 4 tokens (EOS banned), then the device
  g.sampling.temperature = 1.0;
  g.sampling.ignore_eos = false;
  g.sampling.min_tokens = 4;
  out.push_back(g);
  return out;
}

// Runs every request alone, then all together (batched rows of both kinds).
std::vector<Reply> run_all(const fs::path& dir, int64_t& on_device) {
  EngineOptions o;
  o.model_dir = dir.string();
  o.parallel = 8;
  o.context = 512;
  o.kv = "bf16";
  o.prefill_chunk = 32;
  o.memory_reserve_gib = 0;
  o.device = TF_TEST_DEVICE;
  o.draft_model = "none";  // every token through the sampler under test (verified rows sample on the host)
  auto e = Engine::create(o);
  EXPECT_TRUE(e.has_value()) << e.status().to_string();
  if (!e.has_value()) return {};
  std::unique_ptr<Engine> engine = std::move(*e);
  std::vector<GenerationRequest> reqs = requests(*engine);
  std::vector<Reply> out;
  for (const auto& g : reqs) {
    Collector c;
    c.expected = g.n;
    EXPECT_TRUE(engine->submit(g, c.sink()).is_ok());
    EXPECT_TRUE(c.wait());
    out.push_back(c.reply);
  }
  std::vector<std::unique_ptr<Collector>> cs;
  for (auto g : reqs) {
    cs.push_back(std::make_unique<Collector>());
    cs.back()->expected = g.n;
    g.request_id += "-together";
    EXPECT_TRUE(engine->submit(std::move(g), cs.back()->sink()).is_ok());
  }
  for (auto& c : cs) {
    EXPECT_TRUE(c->wait());
    out.push_back(c->reply);
  }
  on_device = engine->health().sampled_on_device_total;
  return out;
}

// The CPU op sums as the host does (bit-equal); the CUDA kernel in another order.
void expect_logprob(double dev, double host) {
  if (kOnCpu) {
    EXPECT_EQ(dev, host);
  } else {
    EXPECT_LE(std::fabs(dev - host), 2e-6 * std::max(1.0, std::fabs(host))) << dev << " vs " << host;
  }
}

TEST(EngineDeviceSampling, RepliesEqualTheHostPath) {
  const fs::path root = fs::temp_directory_path() / ("tf-engine-devsample-" + std::to_string(::getpid()));
  auto dir = ensure_demo_checkpoint(root);
  ASSERT_TRUE(dir.has_value()) << dir.status().to_string();

  ::setenv("TF_DEVICE_SAMPLING", "0", 1);
  int64_t host_on_device = -1;
  const std::vector<Reply> host = run_all(*dir, host_on_device);
  if (kOnCpu) {
    ::setenv("TF_DEVICE_SAMPLING", "1", 1);
  } else {
    ::unsetenv("TF_DEVICE_SAMPLING");  // auto: on for the CUDA backend
  }
  int64_t dev_on_device = -1;
  const std::vector<Reply> dev = run_all(*dir, dev_on_device);
  ::unsetenv("TF_DEVICE_SAMPLING");

  std::printf("[sampling] engine on %s: %lld tokens sampled on the device (host-path engine: %lld)\n", TF_TEST_DEVICE,
              static_cast<long long>(dev_on_device), static_cast<long long>(host_on_device));
  EXPECT_EQ(host_on_device, 0);
  // Device rows: greedy 16 + t1 20 + filters 20 + logprobs 2x12 + min_tokens' last 6 at most,
  // each twice (alone, together); min_tokens may stop early at EOS.
  EXPECT_GE(dev_on_device, 2 * (16 + 20 + 20 + 24));
  ASSERT_EQ(host.size(), dev.size());
  for (size_t i = 0; i < host.size(); ++i) {
    SCOPED_TRACE("reply " + std::to_string(i));
    ASSERT_FALSE(host[i].error) << host[i].error_text;
    ASSERT_FALSE(dev[i].error) << dev[i].error_text;
    EXPECT_EQ(dev[i].text, host[i].text);
    EXPECT_EQ(dev[i].finish, host[i].finish);
    EXPECT_EQ(dev[i].tokens, host[i].tokens);
    ASSERT_EQ(dev[i].logprobs.size(), host[i].logprobs.size());
    for (const auto& [choice, lps] : host[i].logprobs) {
      const auto& d = dev[i].logprobs.at(choice);
      ASSERT_EQ(d.size(), lps.size());
      for (size_t t = 0; t < lps.size(); ++t) {
        EXPECT_EQ(d[t].token, lps[t].token);
        expect_logprob(d[t].logprob, lps[t].logprob);
        ASSERT_EQ(d[t].top.size(), lps[t].top.size());
        for (size_t j = 0; j < lps[t].top.size(); ++j) {
          EXPECT_EQ(d[t].top[j].token, lps[t].top[j].token);
          expect_logprob(d[t].top[j].logprob, lps[t].top[j].logprob);
        }
      }
    }
  }
  // Alone and together agree too (row independence of both paths).
  const size_t n = host.size() / 2;
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(dev[i].text, dev[i + n].text) << i;
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
}  // namespace tf::engine
