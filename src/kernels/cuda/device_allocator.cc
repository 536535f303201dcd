// DeviceAllocator (see device_allocator.h): size-keyed free lists in front of cudaMalloc.
#include "kernels/cuda/device_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tf::cuda {

size_t round_block_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{1} << 20;
  if (bytes == 0) return kSmall;
  if (bytes < kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

std::shared_ptr<DeviceAllocator> DeviceAllocator::create(int device) {
  return std::shared_ptr<DeviceAllocator>(new DeviceAllocator(device));
}

DeviceAllocator::~DeviceAllocator() {
  std::vector<void*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all = blocks_.take_all();
  }
  if (all.empty()) return;
  (void)cudaSetDevice(device_);
  for (void* p : all) (void)cudaFree(p);
}

Expected<std::shared_ptr<Storage>> DeviceAllocator::allocate(size_t bytes) {
  if (arena_ != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t at = (arena_used_ + 255) / 256 * 256;
    arena_used_ = at + bytes;
    if (arena_used_ > arena_size_)
      return resource_exhausted("graph capture arena of " + std::to_string(arena_size_) + " bytes on cuda:" +
                                std::to_string(device_) + " is too small (" + std::to_string(arena_used_) +
                                " bytes wanted)");
    std::shared_ptr<void> keep = arena_keep_;
    return std::make_shared<Storage>(arena_ + at, bytes, Device::cuda(device_), [keep](void*) {});
  }
  const size_t block = round_block_size(bytes);
  void* p = nullptr;
  size_t got = 0;
  // Under mu_: a block handed out. Blocks freed inside a side branch's window are not
  // reusable until its join, so they count towards the peak.
  auto count_handed_out = [this](size_t b) {
    in_use_ += b;
    peak_in_use_ = std::max(peak_in_use_, in_use_ + blocks_.held_bytes());
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    p = blocks_.take(block, got);
    if (p != nullptr) count_handed_out(got);
  }
  if (p == nullptr) {
    cudaError_t err = cudaSetDevice(device_);
    if (err == cudaSuccess) err = cudaMalloc(&p, block);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      release_cached();
      err = cudaMalloc(&p, block);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return resource_exhausted("cudaMalloc of " + std::to_string(block) + " bytes on cuda:" +
                                std::to_string(device_) + " failed: " + cudaGetErrorString(err));
    }
    got = block;
    std::lock_guard<std::mutex> lock(mu_);
    ++mallocs_;
    driver_ += block;
    count_handed_out(got);
  }
  auto self = shared_from_this();
  return std::make_shared<Storage>(p, bytes, Device::cuda(device_),
                                   [self, got](void* q) { self->give_back(q, got); });
}

void DeviceAllocator::give_back(void* p, size_t block) {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.put(p, block);
  in_use_ -= block;
}

void DeviceAllocator::begin_hold() {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.begin_hold();
}

void DeviceAllocator::end_hold() {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.end_hold();
}

void DeviceAllocator::release_cached() {
  std::multimap<size_t, void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks = blocks_.take_cached();
  }
  if (blocks.empty()) return;
  (void)cudaSetDevice(device_);
  size_t freed = 0;
  for (auto& [size, p] : blocks) {
    (void)cudaFree(p);
    freed += size;
  }
  std::lock_guard<std::mutex> lock(mu_);
  driver_ -= freed;
}

void DeviceAllocator::begin_arena(std::shared_ptr<void> keep, char* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  arena_keep_ = std::move(keep);
  arena_ = base;
  arena_size_ = bytes;
  arena_used_ = 0;
}

size_t DeviceAllocator::end_arena() {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t used = arena_used_;
  arena_keep_.reset();
  arena_ = nullptr;
  arena_size_ = arena_used_ = 0;
  return used;
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.cached_bytes();
}

size_t DeviceAllocator::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t DeviceAllocator::peak_in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_in_use_;
}

size_t DeviceAllocator::driver_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return driver_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_in_use_ = in_use_;
}

size_t DeviceAllocator::malloc_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mallocs_;
}

}  // namespace tf::cuda
