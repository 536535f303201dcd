// The CUDA backend: tf::Ops on one GPU. Tensors made by empty()/zeros() live on
// that GPU (a caching allocator), every kernel runs on the backend's own stream,
// and to_host()/copy() to the host synchronise it. LatentPagesView pointers
// (pages, scales, page_table) must be device pointers for this backend.
#pragma once

#include <memory>

#include "core/status.h"
#include "kernels/api/ops.h"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace tf {

// The CUDA ops on GPU `device`; an error when there is no such GPU or its setup fails.
// exact_rows (0..64): calls with at most this many rows keep results independent of
// the other rows (f32 activations); larger ones use BF16 tensor cores (cuda_context.h).
Expected<std::unique_ptr<Ops>> make_cuda_ops(int device = 0, int64_t exact_rows = 64);
// Ok when GPU `device` exists and can run this build's kernels (compiled for its
// architecture), else why not (DEVICE=auto falls back to the CPU on it).
Status cuda_device_usable(int device = 0);
// Free memory on GPU `device` (what the cache pool and the weights are planned from).
Expected<int64_t> cuda_free_bytes(int device = 0);
// Whether GPU `device` allocates from the host's RAM (an integrated GPU: a DGX Spark's GB10,
// Jetson); its free memory then leaves out the page cache the kernel would give back.
bool cuda_shares_host_memory(int device = 0);
// The stream the CUDA ops enqueue everything on (nullptr for another backend):
// tensor-parallel collectives run on it so that they follow the ops that produced
// their input without a host synchronisation (NcclCommunicator::set_stream).
CUstream_st* cuda_ops_stream(const Ops& ops);

}  // namespace tf
