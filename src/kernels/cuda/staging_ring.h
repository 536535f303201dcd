// StagingRing: pinned host memory through which small host->device copies go
// without waiting for the GPU.
//
// A synchronous upload drains the stream: every kernel queued before it must
// finish before the host may go on, so a decode step that uploads a few token
// ids or indices per layer leaves the GPU idle at each upload. Copying the bytes
// into pinned memory first lets cudaMemcpyAsync return at once (the caller's host
// buffer is free to go); the ring only waits when it wraps onto a region whose
// copy the GPU has not executed yet (an event per region tells).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "core/status.h"

namespace tf::cuda {

class StagingRing {
 public:
  static Expected<std::unique_ptr<StagingRing>> create(size_t capacity);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  size_t capacity() const { return capacity_; }
  // Pinned space for `bytes` (<= capacity) that no queued copy still reads;
  // waits for the GPU only when the ring wrapped onto such a copy.
  Expected<char*> reserve(size_t bytes);
  // Marks the space handed out by the last reserve() as read by work queued on
  // `stream` so far (records an event after the caller queued its copy).
  Status commit(cudaStream_t stream);

 private:
  StagingRing() = default;
  struct Region {
    size_t begin, end;
    cudaEvent_t done;
  };
  cudaEvent_t take_event();

  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t head_ = 0;
  size_t pending_begin_ = 0, pending_end_ = 0;
  std::deque<Region> in_flight_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace tf::cuda
