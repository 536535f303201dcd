// PinnedUploader: large host -> device copies (the weights at load) through pinned
// staging buffers that several copy threads keep in flight.
//
// A pageable cudaMemcpy stages through the driver's buffer on the calling thread,
// one piece at a time: reading the source (often a memory-mapped checkpoint that
// page-faults on first touch) and the DMA take turns, a few GB/s at best. Here
// each of `lanes` threads copies every lanes-th chunk of the source into one of
// its two pinned buffers and queues the DMA on its own stream, so the host reads
// run on several cores at once and overlap the transfers; a buffer is refilled
// once the event of its previous DMA has fired. copy() returns when every byte
// has arrived (the source may go at once).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace tf::cuda {

class PinnedUploader {
 public:
  // `lanes` copy threads (0: min(8, the hardware's)), each with two pinned buffers of `chunk_bytes`.
  static Expected<std::unique_ptr<PinnedUploader>> create(int device, unsigned lanes = 0,
                                                          size_t chunk_bytes = size_t{8} << 20);
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;

  unsigned lanes() const { return static_cast<unsigned>(lanes_.size()); }
  size_t chunk_bytes() const { return chunk_; }
  // Copies `bytes` from host `src` (any host memory) to device `dst`. Nothing is written
  // before the work queued on `after` so far has finished (dst may be memory that work
  // just released to the caching allocator); returns when the copy is complete.
  Status copy(void* dst, const void* src, size_t bytes, cudaStream_t after);

 private:
  struct Lane {
    cudaStream_t stream = nullptr;
    char* buf[2] = {nullptr, nullptr};
    cudaEvent_t done[2] = {nullptr, nullptr};
  };
  PinnedUploader(int device, unsigned lanes, size_t chunk) : device_(device), chunk_(chunk), pool_(lanes) {}

  int device_;
  size_t chunk_;
  ThreadPool pool_;  // its own: ThreadPool::global() may be busy with (or be) the caller
  std::vector<Lane> lanes_;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace tf::cuda
