// MLA sparse attention for many query rows on tensor cores: the function of
// Ops::mla_sparse_attention, one block per row for all its heads. bf16/fp8 caches run
// the BF16 kernel (cuda_mla_prefill_mma.cu) where it applies, the rest the TF32 one
// (cuda_mla_prefill.cu).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Calls with at least this many rows use the tensor-core kernel where it applies
// (fewer rows: one block per (row, head) keeps more SMs busy).
constexpr int64_t kMlaPrefillMinRows = 16;

// Whether the tensor-core kernel covers these shapes (heads a multiple of 16 up to 64,
// heads * width <= 64 * 512, width a multiple of 16, an f32/bf16/fp8 cache, indices per
// row within its shared memory).
bool mla_prefill_supported(int64_t heads, int64_t width, int64_t indices_per_row, DType cache_dtype);

// The BF16 tensor-core kernel (cuda_mla_prefill_mma.cu): bf16/fp8 caches, 16, 32 or 64
// heads, width a multiple of 16 up to 512 with width * heads / 256 a multiple of 16.
bool mla_prefill_mma_supported(int64_t heads, int64_t width, int64_t indices_per_row, DType cache_dtype);
// Whether that kernel multiplies q and the probabilities as bf16 hi + lo pairs (two mma per
// product, ~2^-16 relative: TF_MLA_PREFILL_SPLIT=1) instead of rounding each to bf16 once, as
// the reference's bf16 attention does (the default: half the products). Read at each call;
// benchmarks and tests flip it.
std::atomic<bool>& mla_prefill_split();
// Whether that kernel's softmax step takes a warp's heads one after another (the first form,
// TF_MLA_PREFILL_HEADS_IN_TURN=1) instead of side by side (the same bits). Benchmarks and
// tests flip it.
std::atomic<bool>& mla_prefill_heads_in_turn();
// Whether that kernel builds each row's token list by a sort even where the cache's tokens
// fit its bitmap (TF_MLA_PREFILL_SORT=1; the same list, so the same bits). Benchmarks and
// tests flip it.
std::atomic<bool>& mla_prefill_sort_tokens();
// Runs it when it covers the operands (also 16-byte aligned q and pages); false otherwise
// (nothing launched).
bool mla_sparse_attention_mma(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                              const Tensor& indices, float scale);

// out [T, H, R] = softmax_j(scale * q·c_j) c_j over each row's listed tokens (see
// Ops::mla_sparse_attention); throws StatusError (unimplemented) where unsupported.
void mla_sparse_attention_prefill(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                                  const Tensor& indices, float scale);

}  // namespace tf::cuda
