// DSA indexer pool scores for many query rows on BF16 tensor cores
// (cuda_indexer_prefill.cu): the function of Ops::indexer_scores for prefill spans.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Whether the tensor-core kernel covers h heads of width d (d 64 or 128, h <= 64).
bool indexer_scores_mma_supported(int64_t heads, int64_t width);
// Whether it covers these operands (shapes as above, q and keys 16-byte aligned f32).
bool indexer_scores_mma_applies(const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                                const Tensor& candidates);

// out [T, P] = sum_h w[t, h] relu(scale q[t, h]·k[p]) for p < candidates[t], lowest
// float otherwise (see Ops::indexer_scores). q and the pooled keys are split into two
// bf16 parts each (3 mma per product), so a score agrees with the f32 CPU op to a few
// 1e-6 of the largest score (H200: <= 5.5e-6; parity tolerance 1e-5) (the summation order differs); tiles of 64 rows x 128
// pools wholly past every row's candidates are only filled. Throws StatusError
// (unimplemented) where !indexer_scores_mma_supported.
void indexer_scores_mma(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                        const Tensor& candidates, float scale);

}  // namespace tf::cuda
