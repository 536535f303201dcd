// Split-token ("flash-decoding") MLA sparse attention for few query rows
// (cuda_mla_decode.cu): the kernels behind both mla_sparse_attention (rows below the
// prefill kernel's threshold) and mla_sparse_attention_rows, so that a decode row gives
// the same bits through either op.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// The latent pages as the split kernels read them. Decode rows (row_tables != null)
// take each row's page table address from row_tables[b] and its token count from
// row_pos[b] + 1; otherwise every row uses page_table and num_tokens.
struct MlaSplitPages {
  const void* pages = nullptr;
  const float* scales = nullptr;  // fp8 only
  DType dtype = DType::kF32;
  const int32_t* page_table = nullptr;
  int64_t page_size = 0, width = 0, page_stride = 0, num_tokens = 0;
  const int64_t* row_tables = nullptr;
  const int32_t* row_pos = nullptr;
};

// Whether the split kernels take this shape: width a multiple of 4 up to 1024, at most
// 16384 indices per row, 16-byte aligned pages with a page stride a multiple of 4.
bool mla_split_supported(int64_t heads, const MlaSplitPages& pages, int64_t indices_per_row);

// Whether the tensor-core split kernel multiplies bf16 and fp8 pages on BF16 tensor cores,
// q and the probabilities rounded to bf16 once each as the reference's bf16 attention (and
// the prefill kernel) rounds them (the default), instead of TF32 hi/lo pairs that keep about
// f32 accuracy (TF_MLA_DECODE_MMA=tf32, ~3x the instructions). Read at each call; benchmarks
// and tests flip it (a process that never does keeps one kernel for every row).
std::atomic<bool>& mla_decode_bf16();

// out [T, H, R] = softmax_j(scale * q·c_j) c_j over each row's distinct in-range listed
// tokens j (zeros for a row without any): q [T, H, R] f32, indices int32 [T, W]; all
// device pointers. Launches only on ctx.stream; workspace from ctx.scratch. A row's
// bits depend only on that row (its indices, tokens, W), never on T.
void mla_split_attention(CudaContext& ctx, float* out, const float* q, const MlaSplitPages& pages,
                         const int32_t* indices, int64_t rows, int64_t indices_per_row, int64_t heads, float scale);

}  // namespace tf::cuda
