// See byte_budget.h.
#include "server/byte_budget.h"

#include <algorithm>
#include <utility>

namespace tf::server {

ByteBudget::ByteBudget(int64_t capacity) : capacity_(std::max<int64_t>(capacity, 0)) {}

ByteBudget::Lease::Lease(Lease&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

ByteBudget::Lease& ByteBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ByteBudget::Lease::release() {
  if (budget_) budget_->give_back(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

ByteBudget::Take ByteBudget::take(int64_t bytes, std::chrono::milliseconds patience) {
  Lease lease;
  const Outcome outcome = grow(lease, bytes, patience);
  return {outcome, std::move(lease)};
}

ByteBudget::Outcome ByteBudget::grow(Lease& lease, int64_t bytes, std::chrono::milliseconds patience) {
  bytes = std::max<int64_t>(bytes, 0);
  if (capacity_ == 0) return Outcome::kTaken;
  const int64_t own = lease.budget_ ? lease.bytes_ : 0;
  if (bytes > capacity_ - own) return Outcome::kLargerThanBudget;
  std::unique_lock<std::mutex> lock(mu_);
  auto fits = [&] { return held_ + bytes <= capacity_; };
  // Nobody who could give bytes back runs: every byte held is held by a waiter, this one's
  // included (a waiter that holds nothing cannot be part of such a cycle, it only times out).
  auto stuck = [&] { return own > 0 && held_ == held_by_waiting_; };
  if (!fits()) {
    ++waiting_;
    held_by_waiting_ += own;
    bool room = false, deadlock = false;
    const auto until = std::chrono::steady_clock::now() + patience;
    room_.wait_until(lock, until, [&] {
      room = fits();
      deadlock = !room && stuck();
      return room || deadlock;
    });
    // No longer a waiter: another waiter that looks again sees the cycle broken (this one
    // gives its bytes back once refused).
    --waiting_;
    held_by_waiting_ -= own;
    if (!room) return deadlock ? Outcome::kWouldDeadlock : Outcome::kTimedOut;
  }
  held_ += bytes;
  lease.budget_ = this;
  lease.bytes_ = own + bytes;
  return Outcome::kTaken;
}

void ByteBudget::give_back(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    held_ -= bytes;
  }
  // Every waiter looks again: the first that fits goes (first fit, byte_budget.h).
  room_.notify_all();
}

int64_t ByteBudget::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

int64_t ByteBudget::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

}  // namespace tf::server
