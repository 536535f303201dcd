// What the scheduler needs to know about cache memory, and nothing more.
//
// The scheduler admits a request only when its whole cache need (prompt +
// max new tokens, in tokens) can be reserved, so a running request never
// runs out of cache mid-flight and nothing is ever preempted. The real page
// pool (src/cache, later) implements this interface; the scheduler only holds
// opaque handles and gives each back exactly once (on finish or cancel).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tf {

struct CacheHandle {
  uint64_t id = 0;  // 0: no reservation
  bool valid() const { return id != 0; }
  bool operator==(const CacheHandle&) const = default;
};

class CacheBudget {
 public:
  virtual ~CacheBudget() = default;
  // The pool's size: a request needing more can never run.
  [[nodiscard]] virtual int64_t capacity_tokens() const = 0;
  [[nodiscard]] virtual int64_t free_tokens() const = 0;
  [[nodiscard]] virtual bool can_admit(int64_t tokens) const = 0;
  // Fails with kResourceExhausted when it does not fit.
  [[nodiscard]] virtual Expected<CacheHandle> reserve(int64_t tokens) = 0;
  // Releasing an unknown or already released handle is a no-op.
  virtual void release(CacheHandle handle) = 0;
};

// A plain token counter: the budget until the page pool exists, and the fake
// in scheduler tests. Not thread-safe (the engine loop owns it).
class CountingCacheBudget final : public CacheBudget {
 public:
  explicit CountingCacheBudget(int64_t capacity_tokens) : capacity_(capacity_tokens) {}

  int64_t capacity_tokens() const override { return capacity_; }
  int64_t free_tokens() const override { return capacity_ - used_; }
  bool can_admit(int64_t tokens) const override { return tokens >= 0 && tokens <= free_tokens(); }
  Expected<CacheHandle> reserve(int64_t tokens) override;
  void release(CacheHandle handle) override;
  size_t live_reservations() const { return live_.size(); }

 private:
  int64_t capacity_;
  int64_t used_ = 0;
  uint64_t next_id_ = 1;
  std::vector<std::pair<uint64_t, int64_t>> live_;  // handle id -> tokens (few entries)
};

}  // namespace tf
