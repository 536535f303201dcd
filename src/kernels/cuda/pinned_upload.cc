#include "kernels/cuda/pinned_upload.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {

Expected<std::unique_ptr<PinnedUploader>> PinnedUploader::create(int device, unsigned lanes, size_t chunk_bytes) {
  if (lanes == 0) lanes = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  if (chunk_bytes == 0) return invalid_argument("pinned uploader: chunk of 0 bytes");
  std::unique_ptr<PinnedUploader> up(new PinnedUploader(device, lanes, chunk_bytes));
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  TF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&up->ready_, cudaEventDisableTiming));
  up->lanes_.resize(lanes);
  for (Lane& l : up->lanes_) {
    TF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
    for (int s = 0; s < 2; ++s) {
      TF_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&l.buf[s]), chunk_bytes, cudaHostAllocDefault));
      TF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&l.done[s], cudaEventDisableTiming));
    }
  }
  return up;
}

PinnedUploader::~PinnedUploader() {
  cudaSetDevice(device_);
  for (Lane& l : lanes_) {
    if (l.stream) cudaStreamSynchronize(l.stream);
    for (int s = 0; s < 2; ++s) {
      if (l.done[s]) cudaEventDestroy(l.done[s]);
      if (l.buf[s]) cudaFreeHost(l.buf[s]);
    }
    if (l.stream) cudaStreamDestroy(l.stream);
  }
  if (ready_) cudaEventDestroy(ready_);
}

Status PinnedUploader::copy(void* dst, const void* src, size_t bytes, cudaStream_t after) {
  if (bytes == 0) return Status::ok();
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  TF_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, after));
  // Pieces small enough that every lane gets work (a 32 MB matrix: 4 MB each), at least
  // 1 MB (per-piece overhead) and at most a buffer.
  const size_t lanes = lanes_.size();
  const size_t piece = std::clamp(((bytes + lanes - 1) / lanes + 4095) / 4096 * 4096, std::min(chunk_, size_t{1} << 20),
                                  chunk_);
  const size_t chunks = (bytes + piece - 1) / piece;
  const size_t used = std::min(chunks, lanes);
  for (size_t i = 0; i < used; ++i) TF_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lanes_[i].stream, ready_, 0));
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw StatusError(internal_error(std::string("pinned upload: ") + what + ": " + cudaGetErrorString(e)));
    }
  };
  try {
    pool_.parallel_for(static_cast<int64_t>(used), [&](int64_t b, int64_t e) {
      check(cudaSetDevice(device_), "cudaSetDevice");
      for (int64_t li = b; li < e; ++li) {
        Lane& l = lanes_[static_cast<size_t>(li)];
        int slot = 0;
        for (size_t c = static_cast<size_t>(li); c < chunks; c += used, slot ^= 1) {
          const size_t off = c * piece, n = std::min(piece, bytes - off);
          // The buffer's previous DMA must be done before it is refilled (an event
          // never recorded counts as done).
          check(cudaEventSynchronize(l.done[slot]), "waiting for a staging buffer");
          std::memcpy(l.buf[slot], static_cast<const char*>(src) + off, n);
          check(cudaMemcpyAsync(static_cast<char*>(dst) + off, l.buf[slot], n, cudaMemcpyHostToDevice, l.stream),
                "cudaMemcpyAsync");
          check(cudaEventRecord(l.done[slot], l.stream), "cudaEventRecord");
        }
        check(cudaStreamSynchronize(l.stream), "cudaStreamSynchronize");
      }
    });
  } catch (const StatusError& e) {
    // Leave no DMA reading a buffer that the next call refills.
    for (size_t i = 0; i < used; ++i) cudaStreamSynchronize(lanes_[i].stream);
    return e.status();
  }
  return Status::ok();
}

}  // namespace tf::cuda
