// MLA sparse decode (cuda_mla_decode.cu): the steps the split kernels share: latent loads, the
// online softmax of a tile, a block's share of a row, the pipelined kernels' arguments, tile copies
// and their own prep. Included by cuda_mla_decode.cu's headers only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <type_traits>

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/latent_index_sort.cuh"
#include "kernels/cuda/mla_decode_layout.cuh"

namespace tf::cuda {
namespace {

// ---- 2. split ------------------------------------------------------------------

// Four consecutive raw latent elements (fp8 before its scale) as floats.
template <typename T>
__device__ __forceinline__ float4 load4(const void* pages, int64_t i) {
  if constexpr (std::is_same_v<T, float>) {
    return *reinterpret_cast<const float4*>(static_cast<const float*>(pages) + i);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(pages) + i);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, c.x, c.y);
  } else {
    __nv_fp8x4_e4m3 v;
    v.__x = *reinterpret_cast<const __nv_fp8x4_storage_t*>(static_cast<const unsigned char*>(pages) + i);
    return static_cast<float4>(v);
  }
}

// Channel quads per output thread, rounded up to a power of two, and the thread
// groups that split a tile's tokens between them.
__host__ __device__ constexpr int quads_pow2(int r) {
  int q = 1;
  while (q < r / 4) q <<= 1;
  return q;
}

// Tile latents [kTile][rs] of the tokens [base, base + kTile) of a row of n: dequantized
// (the fp8 token scale is applied later), zeros past n. Shared by the split and TF32 kernels.
template <typename T>
__device__ __forceinline__ void gather_tile_latents(float* lat, const void* __restrict__ pages,
                                                    const int64_t* __restrict__ offs, int base, int n, int nq,
                                                    int rs) {
  for (int e = threadIdx.x; e < kTile * nq; e += kThreads) {
    const int t = e / nq, x = (e % nq) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (base + t < n) v = load4<T>(pages, offs[base + t] + x);
    *reinterpret_cast<float4*>(lat + t * rs + x) = v;
  }
}

// The online-softmax step of one tile (warp = head, lane = token): sums the warps' partial
// scores sp [kWarps][kGroup][kTile], scales them (softmax scale x fp8 token scale, the tile's
// token scales at tile_tsc), updates
// the head's running max and sum, writes probability x token scale to pr [kTile][kGroup]
// and the accumulators' rescale to alpha[head]. Shared by the split and TF32 kernels.
__device__ __forceinline__ void online_softmax_tile(const float* sp, float* pr, float* alpha,
                                                    const float* tile_tsc, int base, int n, float scale,
                                                    float& m_run, float& l_run) {
  const int h = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool valid = base + lane < n;
  float s = 0.0f;
#pragma unroll
  for (int ww = 0; ww < kWarps; ++ww) s += sp[(ww * kGroup + h) * kTile + lane];
  const float ts = valid ? tile_tsc[lane] : 0.0f;
  s = valid ? s * scale * ts : -INFINITY;
  const float m_new = fmaxf(m_run, warp_reduce(s, MaxOp{}));  // finite: a tile has a token
  const float a = expf(m_run - m_new);
  const float e = valid ? expf(s - m_new) : 0.0f;
  l_run = l_run * a + warp_reduce(e, SumOp{});
  m_run = m_new;
  pr[lane * kGroup + h] = e * ts;
  if (lane == 0) alpha[h] = a;
}

// A split block's share: row blockIdx.z with n tokens, the whole tiles [t0, t1) of chunk
// blockIdx.y of gridDim.y (empty when the row has fewer tiles), heads [h0, h0 + nh) of group
// blockIdx.x. Shared by the split and TF32 kernels (the combine recomputes the split).
struct SplitBlock {
  int n, t0, t1, h0, nh;
};
__device__ __forceinline__ SplitBlock split_block(const Workspace& ws, int heads) {
  const int chunks = gridDim.y;
  SplitBlock s;
  s.n = ws.count[blockIdx.z];
  const int tiles = (s.n + kTile - 1) / kTile, per = (tiles + chunks - 1) / chunks;
  s.t0 = int(blockIdx.y) * per;
  s.t1 = min(tiles, s.t0 + per);
  s.h0 = int(blockIdx.x) * kGroup;
  s.nh = min(kGroup, heads - s.h0);
  return s;
}

// ---- 2b. pipelined split (the default) -----------------------------------------
// split_kernel's arithmetic in the same order (so equal chunking gives equal bits), with
// the latency taken out: q is loaded before waiting on prep (programmatic dependent
// launch), the chunk's token offsets and scales are read into shared memory once, and
// the tiles arrive raw (T, as stored) by cp.async one tile ahead of the tile in use,
// dequantized as they are read.

struct SplitArgs {
  Workspace ws;
  const void* pages;
  const float* q;
  int w, heads, r;
  float scale;
  MlaSplitPages view;      // the inline prep's pages (rows of this launch)
  const int32_t* indices;  // [rows, w], the inline prep's input
};

template <int kBytes>
__device__ __forceinline__ void cp_async_ca(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(kBytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Byte offsets of the pipelined kernel's shared memory; the chunk's offsets and scales
// (chunk_tokens of them) come last so the rest depends only on R and the element size.
struct PipeSmem {
  int q, sp, pr, alpha, tiles, offs, tsc, total;
};

__host__ __device__ inline PipeSmem pipe_smem(int r, int es, int chunk_tokens) {
  const int groups = kThreads / quads_pow2(r);
  PipeSmem s{};
  s.q = 0;                                    // [kGroup][R] f32 queries
  s.sp = s.q + kGroup * r * 4;                // [kWarps][kGroup][kTile] partial scores
  s.pr = s.sp + kWarps * kGroup * kTile * 4;  // [kTile][kGroup] probabilities x token scale
  s.alpha = s.pr + kTile * kGroup * 4;        // [kGroup]
  s.tiles =
      s.alpha + 16 * ((kGroup * 4 + 15) / 16);  // 2 x [kTile][R + 4] raw; at the end [groups][kGroup][R] f32
  s.offs = s.tiles + max(2 * kTile * (r + 4) * es, groups * kGroup * r * 4);
  s.tsc = s.offs + chunk_tokens * 8;
  s.total = s.tsc + chunk_tokens * 4;
  return s;
}

// Starts the copies of one tile's `valid` tokens (offsets offs[0 ..]) into dst [kTile][rs];
// the tile's rows past `valid` are zeroed.
template <typename T>
__device__ __forceinline__ void issue_tile(T* dst, const void* __restrict__ pages, const int64_t* offs,
                                           int valid, int nq, int rs) {
  constexpr int kBytes = 4 * sizeof(T);
  for (int e = threadIdx.x; e < kTile * nq; e += kThreads) {
    const int t = e / nq, x = (e - t * nq) * 4;
    T* d = dst + t * rs + x;
    if (t < valid) {
      cp_async_ca<kBytes>(d, static_cast<const T*>(pages) + offs[t] + x);
    } else if constexpr (kBytes == 4) {
      *reinterpret_cast<uint32_t*>(d) = 0u;
    } else if constexpr (kBytes == 8) {
      *reinterpret_cast<uint2*>(d) = make_uint2(0u, 0u);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// The split block's own prep (the split kernels' kInline, W <= kInlineMaxIndices): prep's
// token list for row b (compaction, sort when needed, repeats dropped: the same list, so
// the same bits) in toks [pow2 >= W], then the offsets and scales of this block's chunk
// (tiles [t0, t1) of gridDim.y chunks) into offs and the scales after them. Returns n.
template <bool kFp8>
__device__ int inline_prep(int* toks, const SplitArgs& a, int64_t b, int64_t* offs, int& t0, int& t1) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const MlaSplitPages& p = a.view;
  const int w = a.w;
  const int32_t* table = p.page_table;
  int64_t num_tokens = p.num_tokens;
  if (p.row_tables != nullptr) {
    table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(p.row_tables[b]));
    num_tokens = int64_t(p.row_pos[b]) + 1;
  }
  const int32_t* idx = a.indices + b * w;
  const int per = (w + kThreads - 1) / kThreads;
  const int j0 = min(w, int(threadIdx.x) * per), j1 = min(w, j0 + per);
  int mine = 0;
  for (int j = j0; j < j1; ++j) mine += idx[j] >= 0 && idx[j] < num_tokens;
  int at = 0, n = 0;
  Scan(scan_tmp).ExclusiveSum(mine, at, n);
  for (int j = j0; j < j1; ++j) {
    const int32_t id = idx[j];
    if (id >= 0 && id < num_tokens) toks[at++] = id;
  }
  __syncthreads();
  int unsorted = 0;
  for (int j = threadIdx.x + 1; j < n; j += kThreads) unsorted |= toks[j - 1] >= toks[j];
  if (__syncthreads_or(unsorted)) {
    int padded = 1;
    while (padded < n) padded <<= 1;
    for (int j = n + threadIdx.x; j < padded; j += kThreads) toks[j] = INT_MAX;
    __syncthreads();
    bitonic_sort_slots(toks, padded);
  }
  const int per2 = (n + kThreads - 1) / kThreads;
  const int k0 = min(n, int(threadIdx.x) * per2), k1 = min(n, k0 + per2);
  int keep = 0;
  for (int j = k0; j < k1; ++j) keep += j == 0 || toks[j - 1] != toks[j];
  int rank = 0, kept = 0;
  Scan(scan_tmp).ExclusiveSum(keep, rank, kept);
  const int chunks = gridDim.y, tiles = (kept + kTile - 1) / kTile, cper = (tiles + chunks - 1) / chunks;
  t0 = int(blockIdx.y) * cper;
  t1 = min(tiles, t0 + cper);
  const int tok0 = t0 * kTile, tok1 = min(kept, t1 * kTile);
  float* tsc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(offs) + max(0, t1 - t0) * kTile * 8);
  for (int j = k0; j < k1; ++j) {
    if (j > 0 && toks[j - 1] == toks[j]) continue;
    if (rank >= tok0 && rank < tok1) {
      const int64_t tok = toks[j], page = table[tok / p.page_size], slot = tok % p.page_size;
      offs[rank - tok0] = page * p.page_stride + slot * p.width;
      tsc[rank - tok0] = kFp8 ? p.scales[page * p.page_size + slot] : 1.0f;
    }
    ++rank;
  }
  return kept;
}

}  // namespace
}  // namespace tf::cuda
