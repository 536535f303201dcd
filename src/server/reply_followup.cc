// ReplyFollowUps (see reply_followup.h).
#include "server/reply_followup.h"

#include <algorithm>
#include <limits>

#include "core/logging.h"

namespace tf::server {

ReplyFollowUps::ReplyFollowUps(EngineApi& engine, ReasoningMemory* memory, int64_t reuse_grain)
    : engine_(engine), memory_(memory), grain_(reuse_grain) {
  if (active()) thread_ = std::thread([this] { run(); });
}

ReplyFollowUps::~ReplyFollowUps() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReplyFollowUps::post(std::function<std::optional<FinishedChat>()> build) {
  if (!active()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= kMaxQueued) return;
    queue_.push_back({epoch_, std::move(build)});
  }
  cv_.notify_all();
}

void ReplyFollowUps::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || stopping_; });
}

void ReplyFollowUps::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Posted posted = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      if (std::optional<FinishedChat> done = posted.build()) follow_up(std::move(*done), posted.epoch);
    } catch (const std::exception& e) {  // a reply the parser refuses: nothing to follow up
      TF_LOG_DEBUG("reply follow-up skipped: {}", e.what());
    } catch (...) {
      TF_LOG_DEBUG("reply follow-up skipped");
    }
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

std::shared_ptr<ReplyFollowUps::Warmup> ReplyFollowUps::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_locked();
}

std::shared_ptr<ReplyFollowUps::Warmup> ReplyFollowUps::in_flight_locked() {
  std::shared_ptr<Warmup> w = warming_;
  if (!w) return nullptr;
  std::lock_guard<std::mutex> lock(w->mu);
  return w->done ? nullptr : w;
}

void ReplyFollowUps::make_way(const std::vector<int32_t>& prompt) {
  std::shared_ptr<Warmup> w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++epoch_;  // a warm-up of a reply that finished before this request is not submitted any more
    w = in_flight_locked();
  }
  if (!w) return;
  const bool continues =
      prompt.size() > w->keeps.size() && std::equal(w->keeps.begin(), w->keeps.end(), prompt.begin());
  if (!continues) {
    // Its chunks would slow this request (a cancelled request may get no further event).
    engine_.cancel(w->id);
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->done = true;
    }
    w->cv.notify_all();
    return;
  }
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait_for(lock, kMaxWait, [&w] { return w->done; });
}

bool ReplyFollowUps::engine_idle() const {
  const EngineHealth h = engine_.health();
  return h.requests_waiting == 0 && h.streams_decoding == 0 && h.streams_prefilling == 0;
}

void ReplyFollowUps::follow_up(FinishedChat done, int64_t epoch) {
  Json& messages = done.chat.messages;
  if (memory_) {
    memory_->restore(messages, done.cache_salt);  // earlier turns, as the request had them
    memory_->remember(messages, done.cache_salt);
  }
  // Only on an idle engine: requests first (the next turn would run the reply anyway). Checked
  // here before the render, and again where it is submitted.
  if (grain_ <= 0 || !done.warm || in_flight() || !engine_idle()) return;
  done.chat.add_generation_prompt = false;
  done.chat.continue_final_message = false;
  done.chat.find_system_block = false;
  Expected<std::vector<int32_t>> tokens = engine_.render_chat(done.chat);
  if (!tokens) return;
  const auto n = static_cast<int64_t>(tokens->size());
  // It keeps a state at the last multiple of the grain before its end: worth it only past the
  // one the reply's prompt kept.
  const int64_t keeps = (n - 1) / grain_ * grain_;
  if (keeps <= (done.prompt_tokens - 1) / grain_ * grain_) return;
  auto w = std::make_shared<Warmup>();
  w->id = "warmup-" + std::to_string(++next_id_);
  w->keeps.assign(tokens->begin(), tokens->begin() + keeps);
  GenerationRequest g;
  g.request_id = w->id;
  g.prompt_tokens = std::move(*tokens);
  g.sampling.max_tokens = 0;
  g.warm_from = done.prompt_tokens;
  g.priority = std::numeric_limits<int32_t>::max();
  g.cache_salt = done.cache_salt;
  g.drafts = false;
  auto finished = [w] {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->done = true;
    }
    w->cv.notify_all();
  };
  // Checked and submitted under the lock make_way takes: a client's request either came
  // first (and the warm-up is dropped) or finds the warm-up in flight.
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch_ != epoch || in_flight_locked() || !engine_idle()) return;
  warming_ = w;
  Status s = engine_.submit(std::move(g), [finished](GenerationEvent ev) {
    if (ev.kind == GenerationEvent::Kind::kFinish || ev.kind == GenerationEvent::Kind::kError) finished();
  });
  if (!s.is_ok()) {
    finished();
    TF_LOG_DEBUG("reply warm-up not submitted: {}", s.to_string());
  }
}

}  // namespace tf::server
