#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace tf {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("TF_THREADS");
    return env ? static_cast<unsigned>(std::max(0, std::atoi(env))) : 0u;
  }());
  return pool;
}

void ThreadPool::worker_loop(unsigned index) {
  uint64_t seen = 0;
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= ranges_.size()) continue;
    auto range = ranges_[index];
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr err;
    try {
      (*job)(range.first, range.second);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t max_parts = std::min<int64_t>(size(), (n + min_chunk - 1) / min_chunk);
  if (max_parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const int64_t chunk = (n + max_parts - 1) / max_parts;
  for (int64_t b = 0; b < n; b += chunk) ranges.emplace_back(b, std::min(n, b + chunk));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_ = ranges;
    job_ = &fn;
    error_ = nullptr;
    pending_ = static_cast<unsigned>(ranges.size()) - 1;  // range 0 runs here
    ++generation_;
  }
  work_cv_.notify_all();
  std::exception_ptr err;
  try {
    fn(ranges[0].first, ranges[0].second);
  } catch (...) {
    err = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  if (!err) err = error_;
  job_ = nullptr;
  if (err) std::rethrow_exception(err);
}

}  // namespace tf
