// ByteBudget: a number of bytes that work takes before it starts and gives back when it is
// done, so that the memory of work whose cost grows with its input is bounded however many
// clients send at once.
//
// The server's use (PROMPT_BUDGET_MIB, http_server.cc): a request body is charged from before
// its first byte is read until its prompt's tokens are in the engine's hands. Reading, JSON
// parsing, message checks, the chat template and the tokenizer each hold a copy or a multiple
// of the text for a while, so that phase costs a bounded multiple of the bytes it holds here.
//
// Admission is first fit: work that fits beside the holders goes at once, so a small request
// never waits behind a large one that waits for room; work that does not fit waits (woken on
// every release) until it fits or its patience runs out. Work larger than the whole budget
// would never fit and is refused at once.
//
// Work whose size shows only as it goes (a chunked or compressed body) holds what it has and
// grows its lease in steps (grow()), waiting for room like a take. Two such holders waiting to
// grow could each wait for the other's bytes until their patience ran out, and everyone else
// with them; so a grower that would wait while every byte held belongs to waiters (nobody
// runs who could give any back) is refused at once (kWouldDeadlock), and gives back what it
// holds, which lets the others go on. A holder that is not waiting (a body still arriving or
// being tokenized) gives its bytes back in time, so waiting for it is safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace tf::server {

class ByteBudget {
 public:
  // capacity <= 0: unlimited (every take is granted at once and nothing is counted).
  explicit ByteBudget(int64_t capacity);
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // A hold on part of the budget, given back by release() or on destruction. Must not
  // outlive its budget.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    void release();
    int64_t bytes() const { return bytes_; }

   private:
    friend class ByteBudget;
    Lease(ByteBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
    ByteBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  enum class Outcome { kTaken, kLargerThanBudget, kTimedOut, kWouldDeadlock };
  struct Take {
    Outcome outcome;
    Lease lease;  // holds the bytes when kTaken
  };
  // Takes `bytes` (negative counts as 0), waiting at most `patience` for them to fit beside
  // the bytes held.
  [[nodiscard]] Take take(int64_t bytes, std::chrono::milliseconds patience);
  // Adds `bytes` to `lease` (one of this budget's, or an empty one), waiting at most
  // `patience` for them to fit beside the bytes held. kLargerThanBudget when the lease would
  // hold more than the whole budget; kWouldDeadlock when it would wait while every byte held
  // is held by waiters. The lease keeps what it held on any outcome but kTaken.
  [[nodiscard]] Outcome grow(Lease& lease, int64_t bytes, std::chrono::milliseconds patience);

  int64_t capacity() const { return capacity_; }
  int64_t held() const;
  int64_t waiting() const;  // takes waiting for room now

 private:
  void give_back(int64_t bytes);

  const int64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable room_;
  int64_t held_ = 0;
  int64_t waiting_ = 0;
  int64_t held_by_waiting_ = 0;  // the bytes that waiting growers hold already
};

}  // namespace tf::server
