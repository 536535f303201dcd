// Helpers for the bench tests: an EngineApi decorator that counts requests in
// flight (to check the concurrency bound), and an HTTP server over it.
#pragma once

#include <atomic>
#include <memory>

#include "server/http_server.h"
#include "server_fake_engine.h"

namespace tf::bench::testing {

using server::testing::FakeEngine;
using namespace tf::engine;  // NOLINT: test-only convenience

// Forwards to `inner`; tracks requests between submit and their finish/error.
class CountingEngine : public EngineApi {
 public:
  explicit CountingEngine(EngineApi& inner) : inner_(inner) {}
  ModelInfo model_info() const override { return inner_.model_info(); }
  EngineHealth health() const override { return inner_.health(); }
  Expected<std::vector<int32_t>> tokenize(const std::string& t, bool s) const override { return inner_.tokenize(t, s); }
  Expected<std::vector<int32_t>> render_chat(const ChatPrompt& c) const override { return inner_.render_chat(c); }
  Expected<std::string> detokenize(const std::vector<int32_t>& t) const override { return inner_.detokenize(t); }
  Expected<std::vector<std::string>> token_strings(const std::vector<int32_t>& t) const override {
    return inner_.token_strings(t);
  }
  void cancel(const std::string& id) override { inner_.cancel(id); }

  Status submit(GenerationRequest request, EventSink sink) override {
    int now = ++in_flight_;
    for (int seen = max_in_flight_.load(); now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
    }
    auto ended = std::make_shared<std::atomic<bool>>(false);
    Status s = inner_.submit(std::move(request), [this, sink, ended](GenerationEvent ev) {
      // Counted down before the consumer sees the end, so its next submit finds room.
      if (ev.kind != GenerationEvent::Kind::kDelta && !ended->exchange(true)) --in_flight_;
      sink(std::move(ev));
    });
    if (!s.is_ok() && !ended->exchange(true)) --in_flight_;
    return s;
  }

  int max_in_flight() const { return max_in_flight_.load(); }
  int in_flight() const { return in_flight_.load(); }

 private:
  EngineApi& inner_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
};

// An HTTP server on a free port over a counting FakeEngine.
struct BenchServer {
  FakeEngine fake;
  CountingEngine counting{fake};
  std::unique_ptr<server::HttpServer> http;
  explicit BenchServer(server::ServerOptions opts = {}) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    http = std::make_unique<server::HttpServer>(counting, opts);
    Status s = http->start_background();
    if (!s.is_ok()) throw std::runtime_error(s.to_string());
  }
  ~BenchServer() {
    http->stop();
    // The fake's threads call through `counting`, which goes before `fake` does.
    fake.wait_idle(std::chrono::seconds(10));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(http->port()); }
};

}  // namespace tf::bench::testing
