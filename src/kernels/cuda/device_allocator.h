// DeviceAllocator: a caching allocator for the CUDA backend's tensors.
//
// Ops::empty() is called for every intermediate of every step; cudaMalloc/cudaFree
// there would synchronise the device and cost tens of microseconds each. Freed
// blocks go back to a free list keyed by size and are handed out again; only a
// miss calls cudaMalloc (and a failed cudaMalloc first returns the cache to the
// driver and retries). All users of one allocator work on one stream, so a block
// reused right after its last kernel was enqueued is still stream-ordered; while a
// side branch runs on a second stream (Ops::SideBranch), blocks freed are held until
// its join (begin_hold/end_hold; the free lists and that rule: block_cache.h).
//
// Graph capture: between begin_arena() and end_arena() every allocation is a bump
// in a caller-owned device arena and frees are no-ops (no cudaMalloc may happen
// while a stream is captured, and a captured graph bakes the addresses in). All
// graphs share one arena: they replay one at a time on one stream and keep
// nothing in it after they end.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/block_cache.h"

namespace tf::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  static std::shared_ptr<DeviceAllocator> create(int device);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A Storage of at least `bytes` on this allocator's device; freeing it returns
  // the block to the cache (the Storage keeps the allocator alive).
  Expected<std::shared_ptr<Storage>> allocate(size_t bytes);
  // Returns every cached (free) block to the driver.
  void release_cached();
  int device() const { return device_; }
  size_t cached_bytes() const;
  size_t malloc_count() const;  // cudaMalloc calls so far (a test checks steady state)
  // Blocks handed out and not yet given back (arena allocations not counted: the arena is
  // one block of its own), their most at once since reset_peak(), and what the cache took
  // from the driver (handed out + cached).
  size_t in_use_bytes() const;
  size_t peak_in_use_bytes() const;
  size_t driver_bytes() const;
  void reset_peak();

  // A side branch's window (CudaOps::branch_begin .. branch_join): freed blocks are
  // held, not reused, until end_hold(), which the join calls once the main stream
  // waits for the side stream. Arena allocations (graph capture) are never reused.
  void begin_hold();
  void end_hold();

  // Arena mode (see above): `keep` owns the arena's memory (the Storages hold it).
  void begin_arena(std::shared_ptr<void> keep, char* base, size_t bytes);
  // Leaves arena mode; returns the bytes the capture asked for (over the arena's
  // size when an allocation failed for lack of room).
  size_t end_arena();

 private:
  explicit DeviceAllocator(int device) : device_(device) {}
  void give_back(void* p, size_t block);

  int device_;
  mutable std::mutex mu_;
  BlockCache blocks_;
  size_t mallocs_ = 0;
  size_t in_use_ = 0, peak_in_use_ = 0, driver_ = 0;
  std::shared_ptr<void> arena_keep_;
  char* arena_ = nullptr;
  size_t arena_size_ = 0, arena_used_ = 0;
};

// Block size for a request: 512-byte granules up to 1 MiB, then 1 MiB granules.
size_t round_block_size(size_t bytes);

}  // namespace tf::cuda
