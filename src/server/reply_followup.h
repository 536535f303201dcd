// What the server does after a chat-like reply (chat completions, Responses, Anthropic
// Messages) finished, on a thread of its own so that neither the reply's last event nor
// the client's next request waits for it:
//  1. remembers the reply's reasoning under its conversation (ReasoningMemory), for a next
//     turn whose client drops it;
//  2. REPLY_WARMUP: while no request waits, runs the conversation with its reply as a
//     warm-up (GenerationRequest::warm_from): prompt reuse then keeps the state after the
//     reply, and the next turn runs only its new messages instead of the reply again (a
//     reply is generated token by token, so its own steps leave no state a prompt may
//     resume from bit for bit; the warm-up runs it in prefill chunks, as a fresh prompt
//     would). One warm-up at a time, at the lowest priority.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/engine_api.h"
#include "server/reasoning_memory.h"

namespace tf::server {

// A finished conversation as the client will send it back: the request's messages and the
// reply as one more assistant message (its reasoning included), parsed by the endpoint's
// own request parser.
struct FinishedChat {
  ChatPrompt chat;
  std::string cache_salt;
  int64_t prompt_tokens = 0;  // the reply's own prompt
  bool warm = true;           // may be warmed up (false: one of several choices)
};

class ReplyFollowUps {
 public:
  // `memory` may be null (REASONING_MEMORY_MIB=0); `warmup`: REPLY_WARMUP.
  ReplyFollowUps(EngineApi& engine, ReasoningMemory* memory, bool warmup);
  ~ReplyFollowUps();
  ReplyFollowUps(const ReplyFollowUps&) = delete;
  ReplyFollowUps& operator=(const ReplyFollowUps&) = delete;

  bool active() const { return memory_ != nullptr || warmup_; }
  // Queues a finished reply; `build` runs on the follow-up thread (nullopt: nothing to do).
  // Dropped when kMaxQueued are waiting already (a burst of replies outruns nothing).
  void post(std::function<std::optional<FinishedChat>()> build);
  // Waits until everything posted so far is done (warm-ups submitted, not run; tests).
  void drain();

 private:
  static constexpr size_t kMaxQueued = 64;
  void run();
  void follow_up(FinishedChat done);

  EngineApi& engine_;
  ReasoningMemory* memory_;
  const bool warmup_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<std::optional<FinishedChat>()>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  // A warm-up submitted and not finished yet (its sink clears it; shared with the sink).
  std::shared_ptr<std::atomic<bool>> warming_ = std::make_shared<std::atomic<bool>>(false);
  int64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace tf::server
