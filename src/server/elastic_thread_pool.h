// The HTTP server's connection workers: cpp-httplib hands every accepted connection to a
// task queue, and a worker holds it while it waits for the request line (up to the
// keep-alive timeout), reads the body, and for the whole life of a generation. A fixed
// pool let a few hundred idle or slow connections (a client's pool of keep-alive sockets,
// a slow-loris) hold every worker, so /health and new requests waited seconds in the queue
// behind them. This pool keeps `base` workers and starts more while every worker is busy,
// up to `max`; a worker above `base` that stays idle for `idle_retire` exits again.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace tf::server {

class ElasticThreadPool : public httplib::TaskQueue {
 public:
  ElasticThreadPool(size_t base, size_t max,
                    std::chrono::milliseconds idle_retire = std::chrono::seconds(30));
  ~ElasticThreadPool() override;
  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Runs the jobs still queued, then joins every worker.
  void shutdown() override;

  size_t threads() const;       // workers alive now
  size_t peak_threads() const;  // most workers alive at once so far

 private:
  void work(size_t serial);
  bool start_worker_locked();  // false when the system refuses another thread
  void join_retired();

  const size_t base_, max_;
  const std::chrono::milliseconds idle_retire_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::map<size_t, std::thread> workers_;  // by serial number
  std::vector<std::thread> retired_;       // exited or exiting, to join
  size_t idle_ = 0, next_serial_ = 0, peak_ = 0;
  bool shutdown_ = false;
};

}  // namespace tf::server
