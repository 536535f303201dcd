// ReplyFollowUps (see reply_followup.h).
#include "server/reply_followup.h"

#include <limits>

#include "core/logging.h"

namespace tf::server {

ReplyFollowUps::ReplyFollowUps(EngineApi& engine, ReasoningMemory* memory, bool warmup)
    : engine_(engine), memory_(memory), warmup_(warmup) {
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
    queue_.push_back(std::move(build));
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
    auto build = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    try {
      if (std::optional<FinishedChat> done = build()) follow_up(std::move(*done));
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

void ReplyFollowUps::follow_up(FinishedChat done) {
  Json& messages = done.chat.messages;
  if (memory_) {
    memory_->restore(messages, done.cache_salt);  // earlier turns, as the request had them
    memory_->remember(messages, done.cache_salt);
  }
  if (!warmup_ || !done.warm || warming_->load()) return;
  if (engine_.health().requests_waiting > 0) return;  // requests first; the next turn runs it anyway
  done.chat.add_generation_prompt = false;
  done.chat.continue_final_message = false;
  done.chat.find_system_block = false;
  Expected<std::vector<int32_t>> tokens = engine_.render_chat(done.chat);
  if (!tokens || static_cast<int64_t>(tokens->size()) <= done.prompt_tokens) return;
  GenerationRequest g;
  g.request_id = "warmup-" + std::to_string(++next_id_);
  g.prompt_tokens = std::move(*tokens);
  g.sampling.max_tokens = 0;
  g.warm_from = done.prompt_tokens;
  g.priority = std::numeric_limits<int32_t>::max();
  g.cache_salt = done.cache_salt;
  g.drafts = false;
  warming_->store(true);
  std::shared_ptr<std::atomic<bool>> warming = warming_;
  Status s = engine_.submit(std::move(g), [warming](GenerationEvent ev) {
    if (ev.kind == GenerationEvent::Kind::kFinish || ev.kind == GenerationEvent::Kind::kError)
      warming->store(false);
  });
  if (!s.is_ok()) {
    warming_->store(false);
    TF_LOG_DEBUG("reply warm-up not submitted: {}", s.to_string());
  }
}

}  // namespace tf::server
