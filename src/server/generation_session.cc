// See generation_session.h.
#include "server/generation_session.h"

#include <algorithm>

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
    if (on_finished_) on_finished_(choices_);
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

void GenerationSession::hold(EventQueue::Arrived a) {
  // A choice finished or the request failed: what is held goes at once, so that pacing never
  // delays a stream's end (its length, and the rate a client measures over it, stay the same).
  if (a.event.kind == GenerationEvent::Kind::kDelta)
    pacer_.arrived(a.at);
  else
    flush_held_ = true;
  held_.push_back(std::move(a));
}

GenerationSession::Pump GenerationSession::pump(StreamFormatter& fmt,
                                                const std::function<bool(const std::string&)>& write) {
  if (!started_stream_) {
    started_stream_ = true;
    last_write_ = Clock::now();
    if (!write(fmt.start())) return Pump::kBroken;
  }
  // Wait for events: up to the poll interval, or until the oldest held token may go.
  auto wait = kPollInterval;
  if (!held_.empty()) {
    const auto until = pacer_.due(held_.front().at, held_.size()) - Clock::now();
    wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(until), std::chrono::milliseconds(0),
                      kPollInterval);
  }
  EventQueue::Arrived a;
  if (queue_->pop_arrived(a, wait)) {
    hold(std::move(a));
    while (queue_->pop_arrived(a, std::chrono::milliseconds(0)))
      hold(std::move(a));  // one write carries several
  }
  // Release what is due: a token once the pacer lets it go, the finish and error events as
  // they reach the front.
  std::string out;
  const Clock::time_point now = Clock::now();
  while (!held_.empty()) {
    const GenerationEvent& ev = held_.front().event;
    const bool paced = ev.kind == GenerationEvent::Kind::kDelta && !flush_held_;
    if (paced && pacer_.due(held_.front().at, held_.size()) > now) break;
    if (paced) pacer_.released(now);
    const bool ended = apply(ev);
    if (ev.kind == GenerationEvent::Kind::kError) {
      out += fmt.on_error(error_);
    } else if (ev.choice >= 0 && static_cast<size_t>(ev.choice) < choices_.size()) {
      out += fmt.on_event(ev, choices_[static_cast<size_t>(ev.choice)]);
    }
    held_.pop_front();
    if (ended) {
      if (error_.is_ok()) out += fmt.on_done(choices_, usage());
      last_write_ = now;
      return write(out) ? Pump::kDone : Pump::kBroken;
    }
  }
  if (out.empty()) {
    if (now - last_write_ >= kKeepAlive) {
      last_write_ = now;
      if (!write(": keep-alive\n\n")) return Pump::kBroken;
    }
    if (alive_ && !alive_()) return Pump::kBroken;
    return Pump::kMore;
  }
  last_write_ = now;
  return write(out) ? Pump::kMore : Pump::kBroken;
}

}  // namespace tf::server
