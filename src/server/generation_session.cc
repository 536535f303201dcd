// See generation_session.h.
#include "server/generation_session.h"

namespace tf::server {

namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kKeepAlive = std::chrono::seconds(1);
}  // namespace

GenerationSession::GenerationSession(EngineApi& engine, ServerMetrics& metrics, GenerationRequest request,
                                     int64_t prompt_tokens, Clock::time_point arrival)
    : engine_(engine),
      metrics_(metrics),
      request_(std::move(request)),
      prompt_tokens_(prompt_tokens),
      arrival_(arrival),
      choices_(static_cast<size_t>(request_.n > 0 ? request_.n : 1)) {}

GenerationSession::~GenerationSession() {
  if (submitted_ && !ended_) engine_.cancel(request_.request_id);
}

Status GenerationSession::submit() {
  std::shared_ptr<EventQueue> q = queue_;
  Status s = engine_.submit(request_, [q](GenerationEvent ev) { q->push(std::move(ev)); });
  if (s.is_ok()) submitted_ = true;
  return s;
}

bool GenerationSession::apply(const GenerationEvent& ev) {
  if (ev.kind == GenerationEvent::Kind::kError) {
    error_ = ev.error.is_ok() ? internal_error("engine reported an error without a message") : ev.error;
    ended_ = true;
    return true;
  }
  if (ev.choice < 0 || static_cast<size_t>(ev.choice) >= choices_.size()) return false;  // engine bug: ignore
  ChoiceState& c = choices_[static_cast<size_t>(ev.choice)];
  if (c.finished) return false;
  if (ev.kind == GenerationEvent::Kind::kDelta && !first_token_seen_) {
    first_token_seen_ = true;
    metrics_.record_ttft(std::chrono::duration<double>(Clock::now() - arrival_).count());
  }
  c.apply(ev);
  if (ev.kind == GenerationEvent::Kind::kFinish && ++finished_ == static_cast<int>(choices_.size())) {
    ended_ = true;
    record_done();
    return true;
  }
  return false;
}

void GenerationSession::record_done() {
  UsageTotals u = usage();
  const char* reason = choices_.empty() ? "stop" : finish_reason_name(choices_[0].finish_reason);
  metrics_.record_generation(u.prompt_tokens, u.completion_tokens, reason,
                             std::chrono::duration<double>(Clock::now() - arrival_).count());
}

Status GenerationSession::wait() {
  // The liveness check runs every poll interval, also while events keep arriving.
  Clock::time_point next_check = Clock::now() + kPollInterval;
  while (!ended_) {
    GenerationEvent ev;
    if (queue_->pop(ev, kPollInterval)) apply(ev);
    if (!ended_ && alive_ && Clock::now() >= next_check) {
      next_check = Clock::now() + kPollInterval;
      if (!alive_()) return unavailable("client disconnected");
    }
  }
  return error_;
}

GenerationSession::Pump GenerationSession::pump(StreamFormatter& fmt,
                                                const std::function<bool(const std::string&)>& write) {
  if (!started_stream_) {
    started_stream_ = true;
    last_write_ = Clock::now();
    if (!write(fmt.start())) return Pump::kBroken;
  }
  std::string out;
  GenerationEvent ev;
  if (!queue_->pop(ev, kPollInterval)) {
    if (Clock::now() - last_write_ >= kKeepAlive) {
      last_write_ = Clock::now();
      if (!write(": keep-alive\n\n")) return Pump::kBroken;
    }
    if (alive_ && !alive_()) return Pump::kBroken;
    return Pump::kMore;
  }
  // Drain what is already queued so one write carries several events.
  for (;;) {
    bool ended = apply(ev);
    if (ev.kind == GenerationEvent::Kind::kError) {
      out += fmt.on_error(error_);
    } else if (ev.choice >= 0 && static_cast<size_t>(ev.choice) < choices_.size()) {
      out += fmt.on_event(ev, choices_[static_cast<size_t>(ev.choice)]);
    }
    if (ended) {
      if (error_.is_ok()) out += fmt.on_done(choices_, usage());
      last_write_ = Clock::now();
      return write(out) ? Pump::kDone : Pump::kBroken;
    }
    if (!queue_->pop(ev, std::chrono::milliseconds(0))) break;
  }
  last_write_ = Clock::now();
  return write(out) ? Pump::kMore : Pump::kBroken;
}

}  // namespace tf::server
