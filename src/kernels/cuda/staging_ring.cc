#include "kernels/cuda/staging_ring.h"

#include <memory>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {

Expected<std::unique_ptr<StagingRing>> StagingRing::create(size_t capacity) {
  std::unique_ptr<StagingRing> ring(new StagingRing());
  TF_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&ring->base_), capacity, cudaHostAllocDefault));
  ring->capacity_ = capacity;
  return ring;
}

StagingRing::~StagingRing() {
  for (Region& r : in_flight_) {
    cudaEventSynchronize(r.done);
    cudaEventDestroy(r.done);
  }
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  if (base_) cudaFreeHost(base_);
}

cudaEvent_t StagingRing::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  return e;
}

Expected<char*> StagingRing::reserve(size_t bytes) {
  const size_t n = (bytes + 255) / 256 * 256;
  if (n > capacity_)
    return invalid_argument("staging ring: " + std::to_string(bytes) + " bytes exceed its " +
                            std::to_string(capacity_));
  if (head_ + n > capacity_) head_ = 0;
  // Retire the copies the GPU has done (keeps the queue short).
  while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().done) == cudaSuccess) {
    spare_events_.push_back(in_flight_.front().done);
    in_flight_.pop_front();
  }
  // Wait for the newest queued copy that still reads part of [head_, head_ + n)
  // (events complete in queue order, so every older one is done too).
  size_t last = in_flight_.size();
  for (size_t i = 0; i < in_flight_.size(); ++i) {
    const Region& r = in_flight_[i];
    if (r.end > head_ && r.begin < head_ + n) last = i;
  }
  if (last < in_flight_.size()) {
    TF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(in_flight_[last].done));
    for (size_t i = 0; i <= last; ++i) {
      spare_events_.push_back(in_flight_.front().done);
      in_flight_.pop_front();
    }
  }
  pending_begin_ = head_;
  pending_end_ = head_ + n;
  head_ += n;
  return base_ + pending_begin_;
}

Status StagingRing::commit(cudaStream_t stream) {
  cudaEvent_t e = take_event();
  if (e == nullptr) return internal_error("staging ring: cudaEventCreate failed");
  TF_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, stream));
  in_flight_.push_back({pending_begin_, pending_end_, e});
  return Status::ok();
}

}  // namespace tf::cuda
