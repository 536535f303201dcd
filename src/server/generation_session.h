// One generation request in flight: submits to the engine, drains its events and
// turns them into a non-streaming result or SSE text through a StreamFormatter.
//
// Cancellation: if the session ends before every choice finished (client gone, write
// failed, server stopping), the destructor cancels the engine request, so whatever it
// held in the cache pool is freed.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/engine_api.h"
#include "server/event_queue.h"
#include "server/metrics.h"
#include "server/openai_responses.h"
#include "server/stream_pacer.h"

namespace tf::server {

using Clock = std::chrono::steady_clock;

// Formats one endpoint's stream. Each method returns SSE text to send ("" = nothing).
class StreamFormatter {
 public:
  virtual ~StreamFormatter() = default;
  virtual std::string start() = 0;
  virtual std::string on_event(const GenerationEvent& ev, const ChoiceState& state) = 0;
  virtual std::string on_error(const Status& error) = 0;
  virtual std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) = 0;
};

class GenerationSession {
 public:
  enum class Pump { kMore, kDone, kBroken };

  GenerationSession(EngineApi& engine, ServerMetrics& metrics, GenerationRequest request, int64_t prompt_tokens,
                    Clock::time_point arrival);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Admission; kResourceExhausted means the queue is full (429).
  Status submit();
  // Non-streaming: waits for every choice; returns the engine's error if any.
  Status wait();
  // Streaming: forwards events through `fmt` to `write`; `write` returning false
  // means the client is gone. Sends a keep-alive comment when idle for a second. With
  // smooth streaming on (set_smoothing), tokens go out paced by a StreamPacer.
  Pump pump(StreamFormatter& fmt, const std::function<bool(const std::string&)>& write);

  const std::vector<ChoiceState>& choices() const { return choices_; }
  UsageTotals usage() const { return sum_usage(choices_, prompt_tokens_); }
  const std::string& request_id() const { return request_.request_id; }
  void set_alive_check(std::function<bool()> alive) { alive_ = std::move(alive); }
  // STREAM_SMOOTH: the longest a streamed token is held to even out bursts (0: off).
  void set_smoothing(std::chrono::milliseconds max_hold) { pacer_ = StreamPacer(max_hold); }
  // Called once every choice has finished (not after an error), on the thread that saw it.
  void set_on_finished(std::function<void(const std::vector<ChoiceState>&)> done) {
    on_finished_ = std::move(done);
  }

 private:
  // Applies one event; true when the request has ended (all finished or error).
  bool apply(const GenerationEvent& ev);
  void record_done();
  void hold(EventQueue::Arrived a);  // a streamed event, until the pacer lets it go

  EngineApi& engine_;
  ServerMetrics& metrics_;
  GenerationRequest request_;
  int64_t prompt_tokens_;
  Clock::time_point arrival_;
  std::shared_ptr<EventQueue> queue_ = std::make_shared<EventQueue>();
  std::vector<ChoiceState> choices_;
  int finished_ = 0;
  bool submitted_ = false;
  bool ended_ = false;
  bool started_stream_ = false;
  bool first_token_seen_ = false;
  Status error_;
  Clock::time_point last_write_;
  std::function<bool()> alive_;
  std::function<void(const std::vector<ChoiceState>&)> on_finished_;
  StreamPacer pacer_{std::chrono::milliseconds(0)};
  std::deque<EventQueue::Arrived> held_;
  bool flush_held_ = false;  // a finish or an error arrived: release everything held at once
};

}  // namespace tf::server
