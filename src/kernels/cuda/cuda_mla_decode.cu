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
#include "kernels/cuda/cuda_mla_decode.h"

#include <cub/block/block_scan.cuh>
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
#include "kernels/cuda/latent_index_sort.cuh"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/mma_bf16.cuh"

namespace tf::cuda {
namespace {

constexpr int kPrepThreads = 512;
constexpr int kMaxIndices = 16384;  // prep sorts a row's indices in shared memory (64 KB)
constexpr int kTile = 32;           // tokens per tile (a lane per token in the scores)
constexpr int kGroup = 8;           // heads per split block (a warp per head in the softmax)
constexpr int kThreads = 256;       // split block: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunks = 16;      // chunks per row (workspace: rows x chunks x H x (R + 2) floats)
constexpr int kMaxWidth = 1024;     // R: a thread per 4 channels of the output
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
static_assert(kGroup == kWarps, "the softmax gives a warp to each head of the group");

struct Workspace {
  int* count;       // [rows]
  int64_t* offset;  // [rows, W] element offset of each kept token's latent row
  float* tscale;    // [rows, W] its fp8 scale (1 otherwise)
  float* part_o;    // [rows, chunks, H, R] unnormalised chunk outputs
  float* part_ml;   // [rows, chunks, H, 2] chunk max and sum
};

// Programmatic dependent launch: wait for the previous kernel's results / let the next
// kernel start its prologue. Both are no-ops for kernels launched without it.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// ---- 1. prep -------------------------------------------------------------------

template <bool kFp8>
__global__ void __launch_bounds__(kPrepThreads)
    prep_kernel(Workspace ws, MlaSplitPages p, const int32_t* __restrict__ indices, int w) {
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  extern __shared__ int toks[];  // [pow2 >= W]
  const int64_t b = blockIdx.x;
  pdl_launch_dependents();  // the pipelined split loads its queries meanwhile
  const int32_t* table = p.page_table;
  int64_t num_tokens = p.num_tokens;
  if (p.row_tables != nullptr) {
    table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(p.row_tables[b]));
    num_tokens = int64_t(p.row_pos[b]) + 1;
  }
  const int32_t* idx = indices + b * w;
  // Compaction of the in-range indices, in order (a contiguous segment per thread).
  const int per = (w + kPrepThreads - 1) / kPrepThreads;
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
  for (int j = threadIdx.x + 1; j < n; j += blockDim.x) unsorted |= toks[j - 1] >= toks[j];
  if (__syncthreads_or(unsorted)) {
    int padded = 1;
    while (padded < n) padded <<= 1;
    for (int j = n + threadIdx.x; j < padded; j += blockDim.x) toks[j] = INT_MAX;
    __syncthreads();
    bitonic_sort_slots(toks, padded);
  }
  // Drop repeats (sorted now), then each kept token's page offset and scale.
  const int per2 = (n + kPrepThreads - 1) / kPrepThreads;
  const int k0 = min(n, int(threadIdx.x) * per2), k1 = min(n, k0 + per2);
  int keep = 0;
  for (int j = k0; j < k1; ++j) keep += j == 0 || toks[j - 1] != toks[j];
  int rank = 0, kept = 0;
  Scan(scan_tmp).ExclusiveSum(keep, rank, kept);
  int64_t* off = ws.offset + b * w;
  float* sc = ws.tscale + b * w;
  for (int j = k0; j < k1; ++j) {
    if (j > 0 && toks[j - 1] == toks[j]) continue;
    const int64_t tok = toks[j], page = table[tok / p.page_size], slot = tok % p.page_size;
    off[rank] = page * p.page_stride + slot * p.width;
    sc[rank] = kFp8 ? p.scales[page * p.page_size + slot] : 1.0f;
    ++rank;
  }
  if (threadIdx.x == 0) ws.count[b] = kept;
}

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
                                                    const int64_t* __restrict__ offs, int base, int n, int nq, int rs) {
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

struct SplitSmem {
  int q, lat, sp, pr, alpha, total;  // offsets in floats
};

__host__ __device__ inline SplitSmem split_smem(int r) {
  const int groups = kThreads / quads_pow2(r);
  SplitSmem s{};
  s.q = 0;                                             // [kGroup][R] the group's queries
  s.lat = s.q + kGroup * r;                            // [kTile][R + 4] tile latents; at the end [groups][kGroup][R]
  s.sp = s.lat + max(kTile * (r + 4), groups * kGroup * r);
  s.pr = s.sp + kWarps * kGroup * kTile;               // [kWarps][kGroup][kTile] partial scores
  s.alpha = s.pr + kTile * kGroup;                     // [kTile][kGroup] probabilities x token scale
  s.total = s.alpha + kGroup;                          // [kGroup] rescale of the accumulators
  return s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    split_kernel(Workspace ws, const void* __restrict__ pages, const float* __restrict__ q, int w, int heads, int r,
                 float scale) {
  extern __shared__ __align__(16) float sm[];
  const SplitSmem L = split_smem(r);
  float* qs = sm + L.q;
  float* lat = sm + L.lat;
  float* sp = sm + L.sp;
  float* pr = sm + L.pr;
  float* alpha = sm + L.alpha;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const SplitBlock blk = split_block(ws, heads);
  if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
  const int n = blk.n, t0 = blk.t0, t1 = blk.t1, h0 = blk.h0, nh = blk.nh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rs = r + 4, nq = r / 4;
  for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
    const int hh = i / r;
    qs[i] = hh < nh ? q[(b * heads + h0 + hh) * int64_t(r) + i % r] : 0.0f;
  }
  const int64_t* offs = ws.offset + b * w;
  const float* tsc = ws.tscale + b * w;
  // Scores: warp `warp` takes channels [c0, c1) (a multiple of 4 wide), lane = token.
  const int ks = (r + 4 * kWarps - 1) / (4 * kWarps) * 4;
  const int c0 = min(r, warp * ks), c1 = min(r, c0 + ks);
  // Weighted sum: thread = channel quad `quad` x token group `grp`.
  const int qp = quads_pow2(r), groups = kThreads / qp, quad = threadIdx.x % qp, grp = threadIdx.x / qp;
  float acc[kGroup][4];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;  // warp h: head h's running max and sum
  for (int tile = t0; tile < t1; ++tile) {
    const int base = tile * kTile;
    gather_tile_latents<T>(lat, pages, offs, base, n, nq, rs);
    __syncthreads();
    {
      float s[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s[h] = 0.0f;
      const float* lrow = lat + lane * rs;
      for (int x = c0; x < c1; x += 4) {
        const float4 lv = *reinterpret_cast<const float4*>(lrow + x);
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float4 qv = *reinterpret_cast<const float4*>(qs + h * r + x);
          s[h] = fmaf(qv.x, lv.x, s[h]);
          s[h] = fmaf(qv.y, lv.y, s[h]);
          s[h] = fmaf(qv.z, lv.z, s[h]);
          s[h] = fmaf(qv.w, lv.w, s[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kGroup; ++h) sp[(warp * kGroup + h) * kTile + lane] = s[h];
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + base, base, n, scale, m_run, l_run);
    __syncthreads();
    if (quad < nq) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float a = alpha[h];
        acc[h][0] *= a;
        acc[h][1] *= a;
        acc[h][2] *= a;
        acc[h][3] *= a;
      }
      for (int t = grp; t < kTile; t += groups) {
        const float4 lv = *reinterpret_cast<const float4*>(lat + t * rs + quad * 4);
        const float4 p0 = *reinterpret_cast<const float4*>(pr + t * kGroup);
        const float4 p1 = *reinterpret_cast<const float4*>(pr + t * kGroup + 4);
        const float p[kGroup] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          acc[h][0] = fmaf(p[h], lv.x, acc[h][0]);
          acc[h][1] = fmaf(p[h], lv.y, acc[h][1]);
          acc[h][2] = fmaf(p[h], lv.z, acc[h][2]);
          acc[h][3] = fmaf(p[h], lv.w, acc[h][3]);
        }
      }
    }
    __syncthreads();
  }
  // The token groups' accumulators, added in group order.
  float* red = lat;  // [groups][kGroup][R]
  if (quad < nq) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      *reinterpret_cast<float4*>(red + (grp * kGroup + h) * r + quad * 4) =
          make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
  }
  __syncthreads();
  const int64_t part = (b * chunks + chunk) * heads + h0;  // (row, chunk, first head of the group)
  for (int i = threadIdx.x; i < nh * r; i += kThreads) {
    const int h = i / r, x = i % r;
    float o = 0.0f;
    for (int g = 0; g < groups; ++g) o += red[(g * kGroup + h) * r + x];
    ws.part_o[(part + h) * r + x] = o;
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
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
  MlaSplitPages view;       // the inline prep's pages (rows of this launch)
  const int32_t* indices;   // [rows, w], the inline prep's input
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
  s.q = 0;                                              // [kGroup][R] f32 queries
  s.sp = s.q + kGroup * r * 4;                          // [kWarps][kGroup][kTile] partial scores
  s.pr = s.sp + kWarps * kGroup * kTile * 4;            // [kTile][kGroup] probabilities x token scale
  s.alpha = s.pr + kTile * kGroup * 4;                  // [kGroup]
  s.tiles = s.alpha + 16 * ((kGroup * 4 + 15) / 16);    // 2 x [kTile][R + 4] raw; at the end [groups][kGroup][R] f32
  s.offs = s.tiles + max(2 * kTile * (r + 4) * es, groups * kGroup * r * 4);
  s.tsc = s.offs + chunk_tokens * 8;
  s.total = s.tsc + chunk_tokens * 4;
  return s;
}

// Starts the copies of one tile's `valid` tokens (offsets offs[0 ..]) into dst [kTile][rs];
// the tile's rows past `valid` are zeroed.
template <typename T>
__device__ __forceinline__ void issue_tile(T* dst, const void* __restrict__ pages, const int64_t* offs, int valid,
                                           int nq, int rs) {
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

// The same split on tensor cores (R a multiple of 128): scores S^T [32 tokens x 8 heads]
// = L [32 x R] Q^T, each warp over R/8 channels (partials added in warp order as
// above), and O^T [R x 8] += L^T P^T, each warp owning R/128 16-channel tiles of the
// accumulator (no cross-warp sum). mma.m16n8k8 TF32 with f32 operands split into a
// TF32 high and low part (q and P always; the latents when f32, bf16/fp8 values are
// exact in TF32), so products keep about f32 accuracy.
__device__ __forceinline__ uint32_t tf32_hi(float x) { return __float_as_uint(x) & 0xffffe000u; }
__device__ __forceinline__ uint32_t tf32_lo(float x) {
  return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u)) & 0xffffe000u;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr int kMaxMmaTiles = kMaxWidth / 128;  // accumulator tiles per warp

// Steps the tensor-core kernels (TF32 and BF16: the same fragment layouts) share.
// A warp's score partials c[mt] (tokens mt*16 + g (+8), heads 2tq, 2tq + 1) into
// sp [kWarps][kGroup][kTile].
__device__ __forceinline__ void store_score_partials(float* sp, int warp, int g, int tq, const float (&c)[2][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
    float* s0 = sp + (warp * kGroup + 2 * tq) * kTile + mt * 16 + g;
    s0[0] = c[mt][0];
    s0[kTile] = c[mt][1];
    s0[8] = c[mt][2];
    s0[kTile + 8] = c[mt][3];
  }
}

// The accumulators (columns = heads 2tq, 2tq + 1) rescaled to the heads' new running max.
__device__ __forceinline__ void rescale_accumulators(float (&acc)[kMaxMmaTiles][4], const float* alpha, int tq) {
  const float a0 = alpha[2 * tq], a1 = alpha[2 * tq + 1];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) {
    acc[i][0] *= a0;
    acc[i][1] *= a1;
    acc[i][2] *= a0;
    acc[i][3] *= a1;
  }
}

// The chunk's unnormalised output (the warp's mtiles 16-channel tiles from mbase, heads of
// the group below nh) at part_o[part + head], and each head's running max and sum.
__device__ __forceinline__ void store_chunk_partials(const Workspace& ws, int64_t part, int r, int mbase, int mtiles,
                                                     int nh, const float (&acc)[kMaxMmaTiles][4], float m_run,
                                                     float l_run) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) {
    if (i >= mtiles) break;
    const int ch = mbase + i * 16 + g;
    if (2 * tq < nh) {
      ws.part_o[(part + 2 * tq) * r + ch] = acc[i][0];
      ws.part_o[(part + 2 * tq) * r + ch + 8] = acc[i][2];
    }
    if (2 * tq + 1 < nh) {
      ws.part_o[(part + 2 * tq + 1) * r + ch] = acc[i][1];
      ws.part_o[(part + 2 * tq + 1) * r + ch + 8] = acc[i][3];
    }
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
}

struct MmaSmem {
  int qf, lat, sp, pr, alpha, total;  // offsets in floats; rows of R + 4
};

__host__ __device__ inline MmaSmem mma_smem(int r) {
  const int rs = r + 4;
  MmaSmem s{};
  s.qf = 0;                                // [kGroup][rs] q (f32; split into TF32 high and low parts as read)
  s.lat = s.qf + kGroup * rs;              // [kTile][rs] tile latents (f32)
  s.sp = s.lat + kTile * rs;               // [kWarps][kGroup][kTile] partial scores
  s.pr = s.sp + kWarps * kGroup * kTile;   // [kTile][kGroup] probabilities x token scale
  s.alpha = s.pr + kTile * kGroup;         // [kGroup]
  s.total = s.alpha + kGroup;
  return s;
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

// The tensor-core kernel's raw tile after its mma_smem floats, then the chunk's offsets
// and scales (chunk_tokens of them).
__host__ __device__ inline int mma_raw_bytes(int r, int es) { return (kTile * (r + 4) * es + 15) / 16 * 16; }
__host__ __device__ inline int mma_smem_bytes(int r, int es, int chunk_tokens) {
  return (mma_smem(r).total * 4 + 15) / 16 * 16 + mma_raw_bytes(r, es) + chunk_tokens * 12;
}

// kR > 0: R known at compile time (the model's 512), so the tile loops' divisions and
// bounds fold (fewer integer instructions on a latency-bound kernel); the same arithmetic.
template <typename T, bool kInline, int kR = 0>
__global__ void __launch_bounds__(kThreads, 2) split_mma_kernel(SplitArgs args) {
  constexpr bool kSplitLat = std::is_same_v<T, float>;
  extern __shared__ __align__(16) float sm[];
  const int r = kR > 0 ? kR : args.r, heads = args.heads, w = args.w;
  const float scale = args.scale;
  const MmaSmem L = mma_smem(r);
  float* qf = sm + L.qf;
  float* lat = sm + L.lat;
  float* sp = sm + L.sp;
  float* pr = sm + L.pr;
  float* alpha = sm + L.alpha;
  const int rs = r + 4, nq = r / 4;
  T* raw = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(sm) + (L.total * 4 + 15) / 16 * 16);  // next tile
  int64_t* offs = reinterpret_cast<int64_t*>(reinterpret_cast<unsigned char*>(raw) + mma_raw_bytes(r, sizeof(T)));
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  {  // q does not depend on prep: split it while prep finishes.
    const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
    for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
      const int hh = i / r, x = i % r;
      const float v = hh < nh ? args.q[(b * heads + h0 + hh) * int64_t(r) + x] : 0.0f;
      qf[hh * rs + x] = v;
    }
  }
  const Workspace& ws = args.ws;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  int n = 0, t0 = 0, t1 = 0;
  if constexpr (kInline) {  // no prep kernel: the token list here (the f32 tile's space as scratch)
    n = inline_prep<std::is_same_v<T, __nv_fp8_e4m3>>(reinterpret_cast<int*>(lat), args, b, offs, t0, t1);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) ws.count[b] = n;  // for the combine
    pdl_launch_dependents();
    __syncthreads();
    if (t0 >= t1) return;  // an empty chunk (the combine skips it)
  } else {
    pdl_launch_dependents();
    pdl_wait();
    const SplitBlock blk = split_block(ws, heads);
    if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
    n = blk.n;
    t0 = blk.t0;
    t1 = blk.t1;
  }
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(offs) + ntok * 8);
  if constexpr (!kInline) {
    for (int i = threadIdx.x; i < ntok; i += kThreads) {
      offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
      tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
    }
    __syncthreads();
  }
  issue_tile<T>(raw, args.pages, offs, nvalid, nq, rs);
  cp_async_commit();
  const int kc = r / kWarps, kbase = warp * kc;     // score channels of this warp
  const int mtiles = r / 128, mbase = warp * mtiles * 16;  // output channels of this warp
  float acc[kMaxMmaTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    cp_async_wait<0>();
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * nq; e += kThreads) {  // dequantize (exact) into f32
      const int t = e / nq, x = (e - t * nq) * 4;
      *reinterpret_cast<float4*>(lat + t * rs + x) = load4<T>(raw, t * rs + x);
    }
    __syncthreads();
    if (tile + 1 < t1) {  // the next tile's copies run during this tile's products
      issue_tile<T>(raw, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile, nq, rs);
      cp_async_commit();
    }
    {  // Scores: two 16-token tiles x 8 heads over this warp's channels.
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      for (int k0 = kbase; k0 < kbase + kc; k0 += 8) {
        const float q0 = qf[g * rs + k0 + tq], q1 = qf[g * rs + k0 + tq + 4];
        const uint32_t bh0 = tf32_hi(q0), bh1 = tf32_hi(q1), bl0 = tf32_lo(q0), bl1 = tf32_lo(q1);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float* l0 = lat + (mt * 16 + g) * rs + k0 + tq;
          const float f[4] = {l0[0], l0[8 * rs], l0[4], l0[8 * rs + 4]};
          uint32_t a[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = kSplitLat ? tf32_hi(f[i]) : __float_as_uint(f[i]);  // bf16/fp8: exact
          mma_tf32(c[mt], a, bh0, bh1);
          mma_tf32(c[mt], a, bl0, bl1);
          if constexpr (kSplitLat) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = tf32_lo(f[i]);
            mma_tf32(c[mt], a, bh0, bh1);
          }
        }
      }
      store_score_partials(sp, warp, g, tq, c);
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, scale, m_run, l_run);
    __syncthreads();
    {  // O^T [channels x heads] += L^T [channels x 32 tokens] P^T [32 x 8].
      rescale_accumulators(acc, alpha, tq);
#pragma unroll
      for (int k0 = 0; k0 < kTile; k0 += 8) {
        const float p0 = pr[(k0 + tq) * kGroup + g], p1 = pr[(k0 + tq + 4) * kGroup + g];
        const uint32_t bh0 = tf32_hi(p0), bh1 = tf32_hi(p1), bl0 = tf32_lo(p0), bl1 = tf32_lo(p1);
#pragma unroll
        for (int i = 0; i < kMaxMmaTiles; ++i) {
          if (i < mtiles) {
            const float* l0 = lat + (k0 + tq) * rs + mbase + i * 16 + g;
            const float f[4] = {l0[0], l0[8], l0[4 * rs], l0[4 * rs + 8]};
            uint32_t a[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) a[j] = kSplitLat ? tf32_hi(f[j]) : __float_as_uint(f[j]);
            mma_tf32(acc[i], a, bh0, bh1);
            mma_tf32(acc[i], a, bl0, bl1);
            if constexpr (kSplitLat) {
#pragma unroll
              for (int j = 0; j < 4; ++j) a[j] = tf32_lo(f[j]);
              mma_tf32(acc[i], a, bh0, bh1);
            }
          }
        }
      }
    }
    __syncthreads();
  }
  store_chunk_partials(ws, (b * chunks + chunk) * heads + h0, r, mbase, mtiles, nh, acc, m_run, l_run);
}

// ---- 2c. BF16 tensor-core split (the default for bf16 and fp8 pages) -------------
// split_mma_kernel's layout (S^T = L Q^T over each warp's R/8 channels, partials added in
// warp order; O^T += L^T P^T, a warp owning R/128 16-channel accumulator tiles) with one
// mma.m16n8k16 BF16 per product instead of TF32 hi/lo pairs: q and the probabilities
// (x token scale) are rounded to bf16 once each, as the reference's bf16 attention rounds
// them and as the prefill kernel does by default (cuda_mla_prefill_mma.cu); the latents are
// exact in bf16 (fp8 is widened once per tile). q's B fragments live in registers for the
// whole chunk, the latents' A fragments come by ldmatrix (transposed for L^T) straight from
// the tile: bf16 pages are used as copied (two tiles in flight, no conversion pass), fp8
// tiles are widened into a bf16 tile. ncu had the TF32 kernel at ~2,000 instructions per
// warp and tile (conversion to f32, hi/lo splits, scalar fragment loads; run29s49).
// mla_decode_bf16() = false (TF_MLA_DECODE_MMA=tf32) keeps the TF32 kernel.
constexpr int kBf16Pad = 8;  // bf16 tile rows of R + 8 elements: 16-byte rows, ldmatrix without conflicts

template <typename T>
__host__ __device__ constexpr int bf16_raw_stride(int r) {  // a raw tile row in elements of T
  return std::is_same_v<T, __nv_bfloat16> ? r + kBf16Pad : r + 16;
}

struct Bf16Smem {
  int tile0, tile1, sp, pr, alpha, offs, total;  // byte offsets
};

// bf16 pages: two raw tiles (the one in use and the next); fp8: the raw tile and its bf16
// widening. Then the partial scores, probabilities, rescales, and the chunk's offsets and
// scales (chunk_tokens of them).
template <typename T>
__host__ __device__ inline Bf16Smem bf16_smem(int r, int chunk_tokens) {
  Bf16Smem s{};
  const int bf16_tile = kTile * (r + kBf16Pad) * 2;
  const int raw_tile = (kTile * bf16_raw_stride<T>(r) * static_cast<int>(sizeof(T)) + 15) / 16 * 16;
  s.tile0 = 0;                                // raw tile (fp8) or tile A (bf16)
  s.tile1 = s.tile0 + raw_tile;               // bf16 widening (fp8) or tile B (bf16)
  s.sp = s.tile1 + bf16_tile;                 // [kWarps][kGroup][kTile] f32
  s.pr = s.sp + kWarps * kGroup * kTile * 4;  // [kTile][kGroup] f32
  s.alpha = s.pr + kTile * kGroup * 4;        // [kGroup] f32
  s.offs = s.alpha + 16 * ((kGroup * 4 + 15) / 16);
  s.total = s.offs + chunk_tokens * 12;  // int64 offsets, then f32 scales
  return s;
}

// Copies of one tile's `valid` tokens into dst [kTile][stride] (16 bytes a copy); rows past
// `valid` are zeroed (they meet a zero probability, and must not be NaN).
template <typename T>
__device__ __forceinline__ void issue_tile16(T* dst, const void* __restrict__ pages, const int64_t* offs,
                                             int valid, int r, int stride) {
  constexpr int kPer = 16 / sizeof(T);  // elements a copy
  const int per_row = r / kPer;
  for (int e = threadIdx.x; e < kTile * per_row; e += kThreads) {
    const int t = e / per_row, x = (e - t * per_row) * kPer;
    T* d = dst + t * stride + x;
    if (t < valid)
      cp_async_ca<16>(d, static_cast<const T*>(pages) + offs[t] + x);
    else
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// fp8 e4m3 pairs to bf16 pairs, exactly (e4m3 -> f16 -> f32 -> bf16: every step exact).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// The raw fp8 tile [kTile][r + 16] widened into bf16 [kTile][r + kBf16Pad], 16 values a step.
__device__ __forceinline__ void widen_tile(__nv_bfloat16* dst, const __nv_fp8_e4m3* src, int r) {
  const int per_row = r / 16;
  for (int e = threadIdx.x; e < kTile * per_row; e += kThreads) {
    const int t = e / per_row, x = (e - t * per_row) * 16;
    const uint4 v = *reinterpret_cast<const uint4*>(src + t * (r + 16) + x);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = e4m3x2_to_bf16x2(static_cast<uint16_t>(w[i] & 0xffffu));
      o[2 * i + 1] = e4m3x2_to_bf16x2(static_cast<uint16_t>(w[i] >> 16));
    }
    uint4* d = reinterpret_cast<uint4*>(dst + t * (r + kBf16Pad) + x);
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// kR > 0: R known at compile time (the model's 512); else R % 128 == 0, R <= kMaxWidth.
template <typename T, int kR = 0>
__global__ void __launch_bounds__(kThreads, 2) split_bf16_kernel(SplitArgs args) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __nv_fp8_e4m3>, "bf16 or fp8 pages");
  constexpr bool kWiden = std::is_same_v<T, __nv_fp8_e4m3>;
  constexpr int kMaxSteps = kMaxWidth / 128;  // 16-channel k-steps of a warp's score slice
  extern __shared__ __align__(16) unsigned char smb[];
  const int r = kR > 0 ? kR : args.r, heads = args.heads, w = args.w;
  const int ld = r + kBf16Pad, raw_ld = bf16_raw_stride<T>(r);
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  const int steps = r / 128, kbase = warp * (r / kWarps);  // score k-steps and channels of this warp
  const int mtiles = r / 128, mbase = warp * mtiles * 16;  // output channel tiles of this warp
  // q's B fragments (head g, this warp's channels), rounded to bf16 once: q does not depend
  // on prep, so they load while prep finishes.
  uint32_t qb[kMaxSteps][2];
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    qb[s][0] = qb[s][1] = 0u;
    if (s < steps && g < nh) {
      const float* qr = args.q + (b * heads + h0 + g) * int64_t(r) + kbase + 16 * s + 2 * tq;
      qb[s][0] = bf16x2_bits(qr[0], qr[1]);
      qb[s][1] = bf16x2_bits(qr[8], qr[9]);
    }
  }
  pdl_launch_dependents();
  pdl_wait();
  const Workspace& ws = args.ws;
  const SplitBlock blk = split_block(ws, heads);
  if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
  const int n = blk.n, t0 = blk.t0, t1 = blk.t1;
  const Bf16Smem L = bf16_smem<T>(r, 0);
  float* sp = reinterpret_cast<float*>(smb + L.sp);
  float* pr = reinterpret_cast<float*>(smb + L.pr);
  float* alpha = reinterpret_cast<float*>(smb + L.alpha);
  int64_t* offs = reinterpret_cast<int64_t*>(smb + L.offs);
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(smb + L.offs + ntok * 8);
  for (int i = threadIdx.x; i < ntok; i += kThreads) {
    offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
    tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
  }
  __syncthreads();
  T* const raw0 = reinterpret_cast<T*>(smb + L.tile0);
  T* const raw1 = reinterpret_cast<T*>(smb + L.tile1);
  issue_tile16<T>(raw0, args.pages, offs, nvalid, r, raw_ld);
  cp_async_commit();
  float acc[kMaxMmaTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    cp_async_wait<0>();
    __syncthreads();  // tile k has arrived; every warp is done with tile k - 1
    const __nv_bfloat16* lt;
    if constexpr (kWiden) {
      __nv_bfloat16* wide = reinterpret_cast<__nv_bfloat16*>(smb + L.tile1);
      widen_tile(wide, reinterpret_cast<const __nv_fp8_e4m3*>(raw0), r);
      __syncthreads();  // the raw tile is free again
      if (tile + 1 < t1) {
        issue_tile16<T>(raw0, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile, r, raw_ld);
        cp_async_commit();
      }
      lt = wide;
    } else {
      if (tile + 1 < t1) {  // into the other buffer (tile k - 1's, free since the barrier)
        issue_tile16<T>((k & 1) ? raw0 : raw1, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile,
                        r, raw_ld);
        cp_async_commit();
      }
      lt = reinterpret_cast<const __nv_bfloat16*>((k & 1) ? raw1 : raw0);
    }
    {  // Scores: two 16-token tiles x 8 heads over this warp's channels.
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int s = 0; s < kMaxSteps; ++s) {
        if (s >= steps) break;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          uint32_t a[4];
          load_a_frag(a, lt + (mt * 16) * ld + kbase + 16 * s, ld, lane);
          mma_bf16_16816(c[mt], a, qb[s][0], qb[s][1]);
        }
      }
      store_score_partials(sp, warp, g, tq, c);
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, args.scale, m_run, l_run);
    __syncthreads();
    {  // O^T [channels x heads] += L^T [channels x 32 tokens] P^T [32 x 8].
      rescale_accumulators(acc, alpha, tq);
#pragma unroll
      for (int k0 = 0; k0 < kTile; k0 += 16) {
        // P^T's B fragment: tokens k0 + 2tq (+1), + 8 (+9); head g.
        const uint32_t p0 = bf16x2_bits(pr[(k0 + 2 * tq) * kGroup + g], pr[(k0 + 2 * tq + 1) * kGroup + g]);
        const uint32_t p1 =
            bf16x2_bits(pr[(k0 + 2 * tq + 8) * kGroup + g], pr[(k0 + 2 * tq + 9) * kGroup + g]);
#pragma unroll
        for (int i = 0; i < kMaxMmaTiles; ++i) {
          if (i < mtiles) {
            // L^T's A fragment (channels mbase + 16i.., tokens k0..): the [token][channel]
            // tile read transposed.
            uint32_t a[4];
            ldmatrix_x4_trans(
                a, lt + (k0 + (lane & 7) + ((lane >> 4) << 3)) * ld + mbase + i * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(acc[i], a, p0, p1);
          }
        }
      }
    }
  }
  store_chunk_partials(ws, (b * chunks + chunk) * heads + h0, r, mbase, mtiles, nh, acc, m_run, l_run);
}

template <typename T, bool kInline>
__global__ void __launch_bounds__(kThreads, 2) split_pipe_kernel(SplitArgs a) {
  extern __shared__ __align__(16) unsigned char smb[];
  const int r = a.r, heads = a.heads, w = a.w;
  const PipeSmem L = pipe_smem(r, int(sizeof(T)), 0);
  float* qs = reinterpret_cast<float*>(smb + L.q);
  float* sp = reinterpret_cast<float*>(smb + L.sp);
  float* pr = reinterpret_cast<float*>(smb + L.pr);
  float* alpha = reinterpret_cast<float*>(smb + L.alpha);
  T* tiles = reinterpret_cast<T*>(smb + L.tiles);
  int64_t* offs = reinterpret_cast<int64_t*>(smb + L.offs);
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  // q does not depend on prep: load it while prep finishes.
  for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
    const int hh = i / r;
    qs[i] = hh < nh ? a.q[(b * heads + h0 + hh) * int64_t(r) + i % r] : 0.0f;
  }
  const Workspace& ws = a.ws;
  int n = 0, t0 = 0, t1 = 0;
  if constexpr (kInline) {  // no prep kernel: the token list here (tiles' space as scratch)
    n = inline_prep<std::is_same_v<T, __nv_fp8_e4m3>>(reinterpret_cast<int*>(tiles), a, b, offs, t0, t1);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) ws.count[b] = n;  // for the combine
    pdl_launch_dependents();
    __syncthreads();
    if (t0 >= t1) return;  // an empty chunk (the combine skips it)
  } else {
    pdl_launch_dependents();
    pdl_wait();
    const SplitBlock blk = split_block(ws, heads);
    if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
    n = blk.n;
    t0 = blk.t0;
    t1 = blk.t1;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rs = r + 4, nq = r / 4;
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(offs) + ntok * 8);
  if constexpr (!kInline) {
    for (int i = threadIdx.x; i < ntok; i += kThreads) {
      offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
      tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
    }
    __syncthreads();
  }
  const int tile_elems = kTile * rs;
  issue_tile<T>(tiles, a.pages, offs, nvalid, nq, rs);
  cp_async_commit();
  const int ks = (r + 4 * kWarps - 1) / (4 * kWarps) * 4;
  const int c0 = min(r, warp * ks), c1 = min(r, c0 + ks);
  const int qp = quads_pow2(r), groups = kThreads / qp, quad = threadIdx.x % qp, grp = threadIdx.x / qp;
  float acc[kGroup][4];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    if (tile + 1 < t1) {
      issue_tile<T>(tiles + ((k + 1) & 1) * tile_elems, a.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile,
                    nq, rs);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* lat = tiles + (k & 1) * tile_elems;
    {
      float s[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s[h] = 0.0f;
      const int lrow = lane * rs;
      for (int x = c0; x < c1; x += 4) {
        const float4 lv = load4<T>(lat, lrow + x);
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float4 qv = *reinterpret_cast<const float4*>(qs + h * r + x);
          s[h] = fmaf(qv.x, lv.x, s[h]);
          s[h] = fmaf(qv.y, lv.y, s[h]);
          s[h] = fmaf(qv.z, lv.z, s[h]);
          s[h] = fmaf(qv.w, lv.w, s[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kGroup; ++h) sp[(warp * kGroup + h) * kTile + lane] = s[h];
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, a.scale, m_run, l_run);
    __syncthreads();
    if (quad < nq) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float al = alpha[h];
        acc[h][0] *= al;
        acc[h][1] *= al;
        acc[h][2] *= al;
        acc[h][3] *= al;
      }
      for (int t = grp; t < kTile; t += groups) {
        const float4 lv = load4<T>(lat, t * rs + quad * 4);
        const float4 p0 = *reinterpret_cast<const float4*>(pr + t * kGroup);
        const float4 p1 = *reinterpret_cast<const float4*>(pr + t * kGroup + 4);
        const float p[kGroup] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          acc[h][0] = fmaf(p[h], lv.x, acc[h][0]);
          acc[h][1] = fmaf(p[h], lv.y, acc[h][1]);
          acc[h][2] = fmaf(p[h], lv.z, acc[h][2]);
          acc[h][3] = fmaf(p[h], lv.w, acc[h][3]);
        }
      }
    }
    __syncthreads();
  }
  // The token groups' accumulators, added in group order (the tiles' space is free).
  float* red = reinterpret_cast<float*>(tiles);  // [groups][kGroup][R]
  if (quad < nq) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      *reinterpret_cast<float4*>(red + (grp * kGroup + h) * r + quad * 4) =
          make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
  }
  __syncthreads();
  const int64_t part = (b * chunks + chunk) * heads + h0;
  for (int i = threadIdx.x; i < nh * r; i += kThreads) {
    const int h = i / r, x = i % r;
    float o = 0.0f;
    for (int g = 0; g < groups; ++g) o += red[(g * kGroup + h) * r + x];
    ws.part_o[(part + h) * r + x] = o;
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
}

// ---- 3. combine ----------------------------------------------------------------

struct CombineArgs {
  float* out;
  Workspace ws;
  int heads, r, chunks;
};

constexpr int kCombineThreads = 256;
constexpr int kCombineMaxChunks = 256;  // pipe_max_chunks()'s limit
constexpr int kCombineUnroll = 8;       // partial loads in flight per thread

// What both combine kernels read for block (head, row): the output row, the chunks' max/sum
// pairs (chunk k at ml[k * heads * 2]) and partial outputs (chunk k at po[k * heads * r]),
// and the chunks the row used (the split's chunking of its n tokens). A row without tokens
// gets zeros here (used = 0).
struct CombineRow {
  float* o;
  const float* ml;
  const float* po;
  int used;
};
__device__ __forceinline__ CombineRow combine_row(const CombineArgs& a) {
  const Workspace& ws = a.ws;
  const int heads = a.heads, r = a.r, chunks = a.chunks, h = blockIdx.x;
  const int64_t b = blockIdx.y;
  CombineRow c{a.out + (b * heads + h) * int64_t(r), ws.part_ml + (b * chunks * heads + h) * 2,
               ws.part_o + (b * chunks * heads + h) * int64_t(r), 0};
  const int n = ws.count[b];
  if (n == 0) {
    for (int x = threadIdx.x; x < r; x += blockDim.x) c.o[x] = 0.0f;
    return c;
  }
  const int tiles = (n + kTile - 1) / kTile, per = (tiles + chunks - 1) / chunks;
  c.used = (tiles + per - 1) / per;
  return c;
}

// Session 48's combine (TF_MLA_DECODE_COMBINE=v1, for A/B runs): 128 threads, each
// chunk's weight recomputed per channel. The same bits as combine_kernel.
__global__ void combine_v1_kernel(CombineArgs a) {
  pdl_wait();
  const CombineRow c = combine_row(a);
  if (c.used == 0) return;
  const int heads = a.heads, r = a.r, used = c.used;
  const float* ml = c.ml;
  const float* po = c.po;
  float* o = c.o;
  float mx = -INFINITY;
  for (int k = 0; k < used; ++k) mx = fmaxf(mx, ml[k * heads * 2]);
  float total = 0.0f;
  for (int k = 0; k < used; ++k) total += ml[k * heads * 2 + 1] * expf(ml[k * heads * 2] - mx);
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < used; ++k) acc += po[int64_t(k) * heads * r + x] * expf(ml[k * heads * 2] - mx);
    o[x] = acc / total;
  }
}
bool use_combine_v1() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_COMBINE");
    return e != nullptr && std::string(e) == "v1";
  }();
  return on;
}

// A block per (head, row). Each chunk's weight exp(m_k - max) is computed once (was once
// per channel), then every thread sums its channels over the chunks with kCombineUnroll
// loads in flight: the same terms added in the same order as before, so the same bits.
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(CombineArgs a) {
  __shared__ float weight[kCombineMaxChunks];
  __shared__ float total_sum;
  pdl_wait();  // the split's partials (a no-op without programmatic dependent launch)
  const CombineRow c = combine_row(a);
  if (c.used == 0) return;  // block-uniform
  const int heads = a.heads, r = a.r, used = c.used;
  const float* ml = c.ml;
  float* o = c.o;
  if (threadIdx.x < 32) {
    float mx = -INFINITY;
    for (int k = threadIdx.x; k < used; k += 32) mx = fmaxf(mx, ml[k * heads * 2]);
    mx = warp_reduce(mx, MaxOp{});
    for (int k = threadIdx.x; k < used; k += 32) weight[k] = expf(ml[k * heads * 2] - mx);
    __syncwarp();
    if (threadIdx.x == 0) {
      float total = 0.0f;  // in chunk order
      for (int k = 0; k < used; ++k) total += ml[k * heads * 2 + 1] * weight[k];
      total_sum = total;
    }
  }
  __syncthreads();
  const float total = total_sum;
  const float* __restrict__ po = c.po;
  const int64_t stride = int64_t(heads) * r;
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float acc = 0.0f;
    int k = 0;
    for (; k + kCombineUnroll <= used; k += kCombineUnroll) {
      float v[kCombineUnroll];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) v[u] = po[(k + u) * stride + x];
#pragma unroll
      for (int u = 0; u < kCombineUnroll; ++u) acc += v[u] * weight[k + u];
    }
    for (; k < used; ++k) acc += po[k * stride + x] * weight[k];
    o[x] = acc / total;
  }
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
