// See elastic_thread_pool.h.
#include "server/elastic_thread_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace tf::server {

ElasticThreadPool::ElasticThreadPool(size_t base, size_t max, std::chrono::milliseconds idle_retire)
    : base_(std::max<size_t>(base, 1)),
      max_(std::max(max, std::max<size_t>(base, 1))),
      idle_retire_(idle_retire) {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < base_; ++i)
    if (!start_worker_locked()) break;
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

bool ElasticThreadPool::start_worker_locked() {
  const size_t serial = next_serial_++;
  try {
    workers_.emplace(serial, std::thread([this, serial] { work(serial); }));
  } catch (const std::system_error&) {
    return false;  // the system's thread limit: the queued jobs wait for a worker instead
  }
  ++idle_;  // idle from its start, so the jobs queued before it first waits do not start more
  peak_ = std::max(peak_, workers_.size());
  return true;
}

void ElasticThreadPool::enqueue(std::function<void()> fn) {
  join_retired();
  bool run_here = false;
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(fn));
    // Each idle worker takes one queued job; start another while jobs outnumber them.
    if (jobs_.size() > idle_ && workers_.size() < max_ && !start_worker_locked() && workers_.empty()) {
      fn = std::move(jobs_.back());
      jobs_.pop_back();
      run_here = true;  // no worker at all and none can start: serve it on the caller's thread
    }
  }
  if (run_here) {
    fn();
    return;
  }
  wake_.notify_one();
}

void ElasticThreadPool::work(size_t serial) {
  std::unique_lock lock(mutex_);
  for (;;) {
    const bool surplus = workers_.size() > base_;
    const bool woke = surplus
                          ? wake_.wait_for(lock, idle_retire_, [&] { return !jobs_.empty() || shutdown_; })
                          : (wake_.wait(lock, [&] { return !jobs_.empty() || shutdown_; }), true);
    --idle_;
    if (!woke) {
      if (workers_.size() <= base_) {  // another surplus worker retired first: stay
        ++idle_;
        continue;
      }
      auto it = workers_.find(serial);
      retired_.push_back(std::move(it->second));
      workers_.erase(it);
      return;
    }
    if (jobs_.empty()) return;  // shut down and drained
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
    ++idle_;
  }
}

void ElasticThreadPool::join_retired() {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(retired_);
  }
  for (std::thread& t : done) t.join();
}

void ElasticThreadPool::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  wake_.notify_all();
  // Workers no longer retire once shut down, so the map holds every one not yet in retired_.
  std::map<size_t, std::thread> workers;
  {
    std::lock_guard lock(mutex_);
    workers.swap(workers_);
  }
  for (auto& [serial, t] : workers) t.join();
  join_retired();
}

size_t ElasticThreadPool::threads() const {
  std::lock_guard lock(mutex_);
  return workers_.size();
}

size_t ElasticThreadPool::peak_threads() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

}  // namespace tf::server
