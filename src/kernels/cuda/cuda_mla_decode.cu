// Split-token MLA sparse attention for decode (few query rows, many cached tokens):
// the absorbed form out[h] = softmax_j(scale * q[h]·c_j) c_j over a row's listed
// latents c_j (f32, bf16, or fp8 e4m3 with a per-token scale), in three launches:
//
//  1. prep (a block per row): the row's in-range indices are compacted in order; when
//     they are not already strictly increasing (the DSA expansion is) they are sorted
//     (bitonic, shared memory) and repeats dropped, so each cached token counts once,
//     as on the CPU. Each kept token's element offset in the pages and its fp8 scale go
//     to the workspace, with the row's count n.
//  2. split (a block per (head group of 8, chunk, row)): the row's n tokens are cut
//     into chunks of whole 32-token tiles; a block takes each tile's latents once and
//     uses them for its 8 heads: scores (warps split the channels, a lane per token), an
//     online softmax (running max and sum per head), and the weighted sum of the tile
//     into per-thread accumulators (a thread per 4 channels x 8 heads). It writes the
//     chunk's max, sum and unnormalised output. The default kernel (split_pipe_kernel)
//     loads q before waiting on prep (programmatic dependent launch), reads the chunk's
//     offsets once and copies tile k + 1 (cp.async, raw) while computing tile k; for
//     R % 128 == 0 (the model) its tensor-core forms: for bf16 and fp8 pages one BF16
//     product per term with q and the probabilities rounded to bf16 once (split_bf16_kernel,
//     as the reference's bf16 attention and the prefill kernel round them), else or with
//     TF_MLA_DECODE_MMA=tf32 TF32 hi/lo products (split_mma_kernel, about f32 accuracy);
//     TF_MLA_DECODE_MMA=0 the scalar kernel. TF_MLA_DECODE_INLINE=1: up to W =
//     kInlineMaxIndices the split blocks make the token list themselves, no prep launch
//     (slower on the H200: off). TF_MLA_DECODE_SPLIT=v1 runs the first kernel (a
//     synchronous gather per tile, at most 16 chunks), kept for A/B runs.
//  3. combine (a block per (head, row), 256 threads): the chunks' partial results,
//     rescaled to the common max (a weight per chunk, computed once), summed in chunk
//     order with several loads in flight and divided by the total sum. Session 48's
//     combine (TF_MLA_DECODE_COMBINE=v1, A/B) gives the same bits: decode-1@4k 117.6 ->
//     121.2 tok/s on the H100 (run29s49).
//
// Determinism: a row's chunking depends only on its n: the grid has min(ceil(W / 32),
// limit) chunks and a row of `tiles` tiles puts ceil(tiles / chunks) in each, which is
// max(1, ceil(tiles / limit)) whatever W; the kernel and the limit depend only on R, the
// dtype and the knobs (read once per process). Every sum runs in a fixed order, so a
// row's bits do not depend on the other rows of the call, on W, nor on which op (one
// sequence or decode rows) called it. Launch parameters depend only on the row count
// and W (capture-safe); the workspace comes from ctx.scratch (the graph arena while
// capturing). Rows go in batches so the workspace stays bounded.
//
// This file holds the knobs and the launches; the kernels are in mla_decode_prep.cuh (1),
// mla_decode_split_scalar.cuh / _tf32.cuh / _bf16.cuh (2; the steps they share in
// mla_decode_tile_steps.cuh and mla_decode_mma_steps.cuh), mla_decode_combine.cuh (3), with the
// sizes and the workspace in mla_decode_layout.cuh.
#include "kernels/cuda/cuda_mla_decode.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/mla_decode_combine.cuh"
#include "kernels/cuda/mla_decode_layout.cuh"
#include "kernels/cuda/mla_decode_prep.cuh"
#include "kernels/cuda/mla_decode_split_bf16.cuh"
#include "kernels/cuda/mla_decode_split_scalar.cuh"
#include "kernels/cuda/mla_decode_split_tf32.cuh"

namespace tf::cuda {
namespace {

// The tensor-core split kernel (R % 128 == 0) is the default where R allows: it measured
// 14.7 vs 19.8 us (scalar pipelined) at W = 67 on the H200 (run4s9); TF_MLA_DECODE_MMA=0 takes
// the scalar kernels (read once, so the choice still depends only on R within a process).
bool use_mma() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_MMA");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
// The BF16 form of it (split_bf16_kernel) for bf16 and fp8 pages, unless TF_MLA_DECODE_MMA=tf32
// (mla_decode_bf16() below).
bool bf16_default() {
  const char* e = std::getenv("TF_MLA_DECODE_MMA");
  return e == nullptr || std::string(e) != "tf32";
}
// The pipelined split kernels are the default; TF_MLA_DECODE_SPLIT=v1
// selects the first split kernel (A/B). TF_MLA_DECODE_CHUNKS=N (1..256) sets the pipelined
// kernel's chunk limit (default kPipeChunks). Both read once per process.
bool use_pipe() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_SPLIT");
    return e == nullptr || std::string(e) != "v1";
  }();
  return on;
}
constexpr int kPipeChunks = 16;  // 16 beat 32 and 64 at 1-8 rows, W 2051 (H200, run3s9/run4s9)
int pipe_max_chunks() {
  static const int n = [] {
    const char* e = std::getenv("TF_MLA_DECODE_CHUNKS");
    const int v = e != nullptr ? std::atoi(e) : 0;
    return v >= 1 && v <= 256 ? v : kPipeChunks;
  }();
  return n;
}
// The model's latent width: the tensor-core split kernel has a compiled-in form for it (bf16
// and fp8 pages): 34.7 -> 28.1 us at 1 row and 141.8 -> 109.7 at 8 rows, W = 2051, on the H100
// (run31s49). TF_MLA_DECODE_FIXED_R=0 takes the runtime-width kernel (A/B; the same bits).
// Read once per process.
constexpr int kModelWidth = 512;
bool use_fixed_width() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_FIXED_R");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}
// TF_MLA_DECODE_INLINE=1: up to W = kInlineMaxIndices the split blocks make the row's
// token list themselves instead of a prep launch. Off by default: on the H200 (run5s9)
// it measured 14.8 vs 13.9 us at W = 67 (tensor-core kernel), and slower at W = 2051.
bool use_inline() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_INLINE");
    return e != nullptr && std::string(e) == "1";
  }();
  return on;
}
constexpr int kInlineMaxIndices = 1024;  // W up to which TF_MLA_DECODE_INLINE=1 skips the prep launch
// Above this (f32 pages of large R, or a GPU with less shared memory per block, e.g. 99 KB
// on sm_120 / sm_121) the first split kernel runs.
size_t max_pipe_smem() { return std::min<size_t>(200 * 1024, device_limits().smem_per_block - 1024); }
// Rows per launch sequence at kMaxChunks chunks (bounds the workspace: <= 34 MB at 64 x 512).
constexpr int64_t kRowBatch = 16;

bool use_combine_v1() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_COMBINE");
    return e != nullptr && std::string(e) == "v1";
  }();
  return on;
}

int padded_indices(int64_t w) {
  int p = 1;
  while (p < w) p <<= 1;
  return p;
}

void raise_if(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

// Raises a kernel's dynamic shared memory limit once per (kernel, device, size), so
// that calls inside a stream capture make no runtime calls but launches.
void ensure_smem(const void* kernel, size_t bytes, const char* op) { raise_if(set_dynamic_smem(kernel, bytes, op)); }

}  // namespace

bool mla_split_supported(int64_t heads, const MlaSplitPages& p, int64_t indices_per_row) {
  if (heads <= 0 || p.width <= 0 || p.width % 4 != 0 || p.width > kMaxWidth) return false;
  if (indices_per_row <= 0 || indices_per_row > kMaxIndices || p.page_stride % 4 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.pages) % 16 != 0) return false;
  return p.dtype == DType::kF32 || p.dtype == DType::kBF16 || p.dtype == DType::kF8E4M3;
}

std::atomic<bool>& mla_decode_bf16() {
  static std::atomic<bool> on{bf16_default()};
  return on;
}

void mla_split_attention(CudaContext& ctx, float* out, const float* q, const MlaSplitPages& pages,
                         const int32_t* indices, int64_t rows, int64_t indices_per_row, int64_t heads, float scale) {
  const char* op = "mla_sparse_attention (split)";
  if (!mla_split_supported(heads, pages, indices_per_row))
    throw StatusError(unimplemented(std::string(op) + ": " + std::to_string(heads) + " heads of width " +
                                    std::to_string(pages.width) + " with " + std::to_string(indices_per_row) +
                                    " indices per row"));
  if (rows <= 0) return;
  const int w = static_cast<int>(indices_per_row), r = static_cast<int>(pages.width), h = static_cast<int>(heads);
  const int es = static_cast<int>(dtype_size(pages.dtype));
  // The kernel and the chunk limit depend only on R, the dtype and the process's knobs
  // (the shared memory check assumes the widest index buffer), so both ops (one sequence,
  // decode rows) and every W take the same path for a row.
  const int limit = use_pipe() ? pipe_max_chunks() : kMaxChunks;
  const int worst_tokens = ((kMaxIndices / kTile + limit - 1) / limit) * kTile;
  const bool mma = use_pipe() && use_mma() && r % 128 == 0 &&
                   static_cast<size_t>(mma_smem_bytes(r, es, worst_tokens)) <= max_pipe_smem();
  const bool pipe = use_pipe() && !mma && static_cast<size_t>(pipe_smem(r, es, worst_tokens).total) <= max_pipe_smem();
  const int max_chunks = mma || pipe ? limit : kMaxChunks;
  const int chunks = static_cast<int>(std::min<int64_t>((w + kTile - 1) / kTile, max_chunks));
  const int chunk_tokens = ((w + kTile - 1) / kTile + chunks - 1) / chunks * kTile;  // the most a row's chunk takes
  // Rows per launch sequence: the workspace stays <= kRowBatch x kMaxChunks partials.
  const int64_t batch =
      std::min(rows, mma || pipe ? std::max<int64_t>(1, kRowBatch * kMaxChunks / chunks) : kRowBatch);
  // Workspace: one scratch block carved into 256-byte aligned parts.
  auto up = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t b_count = up(batch * 4), b_off = up(batch * w * 8), b_sc = up(batch * w * 4);
  const int64_t b_o = up(batch * chunks * heads * r * 4), b_ml = up(batch * chunks * heads * 2 * 4);
  Tensor scratch = ctx.scratch(b_count + b_off + b_sc + b_o + b_ml);
  char* base = static_cast<char*>(scratch.raw());
  Workspace ws{reinterpret_cast<int*>(base), reinterpret_cast<int64_t*>(base + b_count),
               reinterpret_cast<float*>(base + b_count + b_off), reinterpret_cast<float*>(base + b_count + b_off + b_sc),
               reinterpret_cast<float*>(base + b_count + b_off + b_sc + b_o)};
  const size_t prep_smem = static_cast<size_t>(padded_indices(w)) * 4;
  auto prep = pages.dtype == DType::kF8E4M3 ? prep_kernel<true> : prep_kernel<false>;
  auto split_v1 = pages.dtype == DType::kF32    ? split_kernel<float>
                  : pages.dtype == DType::kBF16 ? split_kernel<__nv_bfloat16>
                                                : split_kernel<__nv_fp8_e4m3>;
  // The pipelined kernels: [tensor cores][inline prep] for this dtype.
  using Kernel = void (*)(SplitArgs);
  const Kernel f32k[2][2] = {{split_pipe_kernel<float, false>, split_pipe_kernel<float, true>},
                             {split_mma_kernel<float, false>, split_mma_kernel<float, true>}};
  const Kernel bf16k[2][2] = {{split_pipe_kernel<__nv_bfloat16, false>, split_pipe_kernel<__nv_bfloat16, true>},
                              {split_mma_kernel<__nv_bfloat16, false>, split_mma_kernel<__nv_bfloat16, true>}};
  const Kernel fp8k[2][2] = {{split_pipe_kernel<__nv_fp8_e4m3, false>, split_pipe_kernel<__nv_fp8_e4m3, true>},
                             {split_mma_kernel<__nv_fp8_e4m3, false>, split_mma_kernel<__nv_fp8_e4m3, true>}};
  const bool pdl = mma || pipe;
  // Small W on the pipelined kernels: the split blocks make the token list themselves (no
  // prep launch; the same list, so the same bits), in shared memory the tiles use later.
  const int scratch_bytes = mma ? kTile * (r + 4) * 4 : pipe_smem(r, es, 0).offs - pipe_smem(r, es, 0).tiles;
  const bool inline_prep_ok =
      pdl && use_inline() && w <= kInlineMaxIndices && padded_indices(w) * 4 <= scratch_bytes;
  Kernel split_pdl = (pages.dtype == DType::kF32    ? f32k
                      : pages.dtype == DType::kBF16 ? bf16k
                                                    : fp8k)[mma ? 1 : 0][inline_prep_ok ? 1 : 0];
  if (mma && !inline_prep_ok && r == kModelWidth && use_fixed_width() && pages.dtype != DType::kF32)
    split_pdl = pages.dtype == DType::kBF16 ? split_mma_kernel<__nv_bfloat16, false, kModelWidth>
                                            : split_mma_kernel<__nv_fp8_e4m3, false, kModelWidth>;
  // The BF16 kernel: 16-byte copies of each token's row (its element offsets times the
  // element size are multiples of 16) and its shared memory within the limit.
  size_t split_bytes = static_cast<size_t>(mma    ? mma_smem_bytes(r, es, chunk_tokens)
                                           : pipe ? pipe_smem(r, es, chunk_tokens).total
                                                  : split_smem(r).total * 4);
  const bool fp8 = pages.dtype == DType::kF8E4M3;
  const int worst_bf16 =
      fp8 ? bf16_smem<__nv_fp8_e4m3>(r, worst_tokens).total : bf16_smem<__nv_bfloat16>(r, worst_tokens).total;
  if (mma && !inline_prep_ok && pages.dtype != DType::kF32 && mla_decode_bf16().load() &&
      (r * es) % 16 == 0 && (pages.page_stride * es) % 16 == 0 &&
      static_cast<size_t>(worst_bf16) <= max_pipe_smem()) {
    const bool fixed = r == kModelWidth && use_fixed_width();
    split_pdl =
        fp8 ? (fixed ? split_bf16_kernel<__nv_fp8_e4m3, kModelWidth> : split_bf16_kernel<__nv_fp8_e4m3>)
            : (fixed ? split_bf16_kernel<__nv_bfloat16, kModelWidth> : split_bf16_kernel<__nv_bfloat16>);
    split_bytes = static_cast<size_t>(fp8 ? bf16_smem<__nv_fp8_e4m3>(r, chunk_tokens).total
                                          : bf16_smem<__nv_bfloat16>(r, chunk_tokens).total);
  }
  ensure_smem(reinterpret_cast<const void*>(prep), prep_smem, op);
  ensure_smem(pdl ? reinterpret_cast<const void*>(split_pdl) : reinterpret_cast<const void*>(split_v1),
              split_bytes, op);
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    const int64_t nb = std::min(batch, rows - r0);
    MlaSplitPages p = pages;
    if (p.row_tables != nullptr) {
      p.row_tables += r0;
      p.row_pos += r0;
    }
    if (!inline_prep_ok)
      prep<<<static_cast<unsigned>(nb), kPrepThreads, prep_smem, ctx.stream>>>(ws, p, indices + r0 * w, w);
    const dim3 grid(static_cast<unsigned>((h + kGroup - 1) / kGroup), static_cast<unsigned>(chunks),
                    static_cast<unsigned>(nb));
    if (pdl) {
      const SplitArgs sa{ws, pages.pages, q + r0 * h * r, w, h, r, scale, p, indices + r0 * w};
      raise_if(cuda_status(launch_kernel_ex(split_pdl, grid, dim3(kThreads), split_bytes, ctx.stream, nullptr,
                                            !inline_prep_ok, sa),
                           op));
    } else {
      split_v1<<<grid, kThreads, split_bytes, ctx.stream>>>(ws, pages.pages, q + r0 * h * r, w, h, r, scale);
    }
    const CombineArgs ca{out + r0 * h * r, ws, h, r, chunks};
    const bool v1 = use_combine_v1();
    raise_if(cuda_status(launch_kernel_ex(v1 ? combine_v1_kernel : combine_kernel,
                                          dim3(static_cast<unsigned>(h), static_cast<unsigned>(nb)),
                                          dim3(v1 ? 128 : kCombineThreads), 0, ctx.stream, nullptr, pdl, ca),
                         op));
  }
  check_launch(op);
}

}  // namespace tf::cuda
