// What the server does after a chat-like reply (chat completions, Responses, Anthropic
// Messages) finished, on a thread of its own so that neither the reply's last event nor
// the client's next request waits for it:
//  1. remembers the reply's reasoning under its conversation (ReasoningMemory), for a next
//     turn whose client drops it;
//  2. REPLY_WARMUP: while the engine is idle, runs the conversation with its reply as a
//     warm-up (GenerationRequest::warm_from): prompt reuse then keeps the state after the
//     reply, and the next turn runs only its new messages instead of the reply again (a
//     reply is generated token by token, so its own steps leave no state a prompt may
//     resume from bit for bit; the warm-up runs it in prefill chunks, as a fresh prompt
//     would). One warm-up at a time, at the lowest priority.
// A warm-up never competes with a client's request (make_way): one is not started once a
// client's request came after the reply finished; a request that continues the warmed-up
// chat waits for the warm-up, which is running the very tokens it would run (and then
// resumes after them); any other request cancels it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  // `memory` may be null (REASONING_MEMORY_MIB=0); `reuse_grain` > 0 turns warm-ups on
  // (REPLY_WARMUP with prompt reuse: ModelInfo::reuse_grain).
  ReplyFollowUps(EngineApi& engine, ReasoningMemory* memory, int64_t reuse_grain);
  ~ReplyFollowUps();
  ReplyFollowUps(const ReplyFollowUps&) = delete;
  ReplyFollowUps& operator=(const ReplyFollowUps&) = delete;

  bool active() const { return memory_ != nullptr || grain_ > 0; }
  // Queues a finished reply; `build` runs on the follow-up thread (nullopt: nothing to do).
  // Dropped when kMaxQueued are waiting already (a burst of replies outruns nothing).
  void post(std::function<std::optional<FinishedChat>()> build);
  // Before a client's request with this prompt is submitted: waits for a warm-up in flight
  // whose kept state the prompt starts with (at most kMaxWait), or cancels one it does not.
  void make_way(const std::vector<int32_t>& prompt);
  // Waits until everything posted so far is done (warm-ups submitted, not run; tests).
  void drain();

  static constexpr size_t kMaxQueued = 64;
  static constexpr std::chrono::seconds kMaxWait{120};

 private:
  struct Warmup {
    std::string id;
    std::vector<int32_t> keeps;  // the tokens whose state it keeps
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  struct Posted {
    int64_t epoch;  // make_way calls before the reply finished
    std::function<std::optional<FinishedChat>()> build;
  };
  void run();
  void follow_up(FinishedChat done, int64_t epoch);
  std::shared_ptr<Warmup> in_flight();
  std::shared_ptr<Warmup> in_flight_locked();
  bool engine_idle() const;

  EngineApi& engine_;
  ReasoningMemory* memory_;
  const int64_t grain_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Posted> queue_;
  int64_t epoch_ = 0;  // make_way calls so far: a client request since a reply finished skips its warm-up
  bool busy_ = false;
  bool stopping_ = false;
  std::shared_ptr<Warmup> warming_;  // the latest warm-up submitted (guarded by mu_)
  int64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace tf::server
