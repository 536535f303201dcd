// The chunked (WY form) KDA prefill kernel (cuda_kda_chunked.cu): what it supports
// and how much scratch it takes, for the op, its tests and the benchmark.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// The tensor-core chunked kernel handles chunk 64 with Dk, Dv <= 128; kda_chunked
// falls back to the token-by-token kernel (the same function) otherwise.
bool kda_chunked_supported(int64_t dk, int64_t dv, int chunk_size);
// Chunks of 64 tokens processed per group of launches (scratch stays below ~128 MB).
int64_t kda_chunks_per_group(int64_t heads);
// Device scratch one call over t tokens takes (bytes).
int64_t kda_chunked_scratch_bytes(int64_t t, int64_t heads);

// Whether the intra-chunk kernel runs on tensor cores (cuda_kda_intra_mma.cuh) or as
// the scalar kernel; the same function, different summation orders. On unless
// TF_KDA_INTRA_MMA=0; benchmarks and tests flip it.
std::atomic<bool>& kda_intra_mma();

// Whether the state pass is split (cuda_kda_state_split.cuh: the sequential kernel
// carries S and v_new, a parallel kernel computes the outputs) or one kernel does both.
// On unless TF_KDA_STATE_SPLIT=0; benchmarks and tests flip it.
std::atomic<bool>& kda_state_split();

// Whether the intra-chunk part takes its q-less tensor-core form (80 KB of shared memory
// per block instead of 112 KB; the same bits as the default tensor-core form) where the
// default fits too. Off unless TF_KDA_INTRA_SMALL=1; tests compare the two.
std::atomic<bool>& kda_intra_small();

// The kernels kda_chunked runs on this GPU, given the switches above and its shared memory
// per block (a DGX Spark's 99 KB: the small intra form and the one-kernel state pass).
struct KdaForms {
  enum Intra { kScalar, kMma, kMmaSmall };
  bool chunked = false;  // false: token by token (nothing else fits)
  Intra intra = kMma;
  bool split_state = false;
};
KdaForms kda_forms();

// Ops::kda_chunked on the GPU (see kernels/api/ops.h).
void kda_chunked(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, Tensor& state, int chunk_size);

}  // namespace tf::cuda
