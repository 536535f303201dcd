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
  bytes = std::max<int64_t>(bytes, 0);
  if (capacity_ == 0) return {Outcome::kTaken, Lease()};
  if (bytes > capacity_) return {Outcome::kLargerThanBudget, Lease()};
  std::unique_lock<std::mutex> lock(mu_);
  auto fits = [&] { return held_ + bytes <= capacity_; };
  if (!fits()) {
    ++waiting_;
    const bool room = room_.wait_for(lock, patience, fits);
    --waiting_;
    if (!room) return {Outcome::kTimedOut, Lease()};
  }
  held_ += bytes;
  return {Outcome::kTaken, Lease(this, bytes)};
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
