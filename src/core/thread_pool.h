// A fixed pool of worker threads with a blocking parallel_for.
// The CPU backend splits rows of an op across it; the work split depends only
// on the range and the pool size, never on timing, so results are reproducible.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tf {

class ThreadPool {
 public:
  // threads == 0: one per hardware thread.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
  // Runs fn(begin, end) over [0, n) split into at most size() contiguous chunks of at
  // least min_chunk items; returns when all are done. The calling thread takes part.
  // Exceptions thrown by fn are rethrown here (the first one).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

  // The process-wide pool (sized from TF_THREADS or the hardware).
  static ThreadPool& global();

 private:
  void worker_loop(unsigned index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> ranges_;
  uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace tf
