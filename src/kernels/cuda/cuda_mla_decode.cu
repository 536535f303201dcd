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
//     into at most kMaxChunks chunks of whole 32-token tiles; a block loads each tile's
//     latents once (dequantized to f32 in shared memory) and uses them for its 8 heads:
//     scores (warps split the channels, a lane per token), an online softmax (running
//     max and sum per head), and the weighted sum of the tile into per-thread
//     accumulators (a thread per 4 channels x 8 heads). It writes the chunk's max, sum
//     and unnormalised output.
//  3. combine (a block per (head, row)): the chunks' partial results, rescaled to the
//     common max, summed in chunk order and divided by the total sum.
//
// Determinism: the chunking depends only on the row's n and the index width W (the
// grid's chunk count is min(ceil(W / 32), kMaxChunks)), and every sum runs in a fixed
// order, so a row's bits do not depend on the other rows of the call, nor on which op
// (one-sequence or decode rows) called it. Launch parameters depend only on the row
// count and W (capture-safe); the workspace comes from ctx.scratch (the graph arena
// while capturing). Rows go in batches of kRowBatch so the workspace stays bounded.
#include "kernels/cuda/cuda_mla_decode.h"

#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/latent_index_sort.cuh"

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
// The tensor-core split kernel (R % 128 == 0): off by default until CudaDecodeRows.* pass
// with it on a GPU; TF_MLA_DECODE_MMA=1 turns it on (read once, so the choice still
// depends only on R within a process).
bool use_mma() {
  static const bool on = [] {
    const char* e = std::getenv("TF_MLA_DECODE_MMA");
    return e != nullptr && std::string(e) == "1";
  }();
  return on;
}
constexpr int64_t kRowBatch = 16;   // rows per launch sequence (bounds the workspace: <= 34 MB at 64 x 512)
static_assert(kGroup == kWarps, "the softmax gives a warp to each head of the group");

struct Workspace {
  int* count;       // [rows]
  int64_t* offset;  // [rows, W] element offset of each kept token's latent row
  float* tscale;    // [rows, W] its fp8 scale (1 otherwise)
  float* part_o;    // [rows, chunks, H, R] unnormalised chunk outputs
  float* part_ml;   // [rows, chunks, H, 2] chunk max and sum
};

// ---- 1. prep -------------------------------------------------------------------

template <bool kFp8>
__global__ void __launch_bounds__(kPrepThreads)
    prep_kernel(Workspace ws, MlaSplitPages p, const int32_t* __restrict__ indices, int w) {
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  extern __shared__ int toks[];  // [pow2 >= W]
  const int64_t b = blockIdx.x;
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
// scores sp [kWarps][kGroup][kTile], scales them (softmax scale x fp8 token scale), updates
// the head's running max and sum, writes probability x token scale to pr [kTile][kGroup]
// and the accumulators' rescale to alpha[head]. Shared by the split and TF32 kernels.
__device__ __forceinline__ void online_softmax_tile(const float* sp, float* pr, float* alpha,
                                                    const float* __restrict__ tsc, int base, int n, float scale,
                                                    float& m_run, float& l_run) {
  const int h = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool valid = base + lane < n;
  float s = 0.0f;
#pragma unroll
  for (int ww = 0; ww < kWarps; ++ww) s += sp[(ww * kGroup + h) * kTile + lane];
  const float ts = valid ? tsc[base + lane] : 0.0f;
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
    online_softmax_tile(sp, pr, alpha, tsc, base, n, scale, m_run, l_run);
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

struct MmaSmem {
  int qh, ql, lat, sp, pr, alpha, total;  // offsets in floats; rows of R + 4
};

__host__ __device__ inline MmaSmem mma_smem(int r) {
  const int rs = r + 4;
  MmaSmem s{};
  s.qh = 0;                                // [kGroup][rs] q, TF32 high part (as float bits)
  s.ql = s.qh + kGroup * rs;               // [kGroup][rs] low part
  s.lat = s.ql + kGroup * rs;              // [kTile][rs] tile latents (raw)
  s.sp = s.lat + kTile * rs;               // [kWarps][kGroup][kTile] partial scores
  s.pr = s.sp + kWarps * kGroup * kTile;   // [kTile][kGroup] probabilities x token scale
  s.alpha = s.pr + kTile * kGroup;         // [kGroup]
  s.total = s.alpha + kGroup;
  return s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    split_mma_kernel(Workspace ws, const void* __restrict__ pages, const float* __restrict__ q, int w, int heads,
                     int r, float scale) {
  constexpr bool kSplitLat = std::is_same_v<T, float>;
  extern __shared__ __align__(16) float sm[];
  const MmaSmem L = mma_smem(r);
  float* qh = sm + L.qh;
  float* ql = sm + L.ql;
  float* lat = sm + L.lat;
  float* sp = sm + L.sp;
  float* pr = sm + L.pr;
  float* alpha = sm + L.alpha;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const SplitBlock blk = split_block(ws, heads);
  if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
  const int n = blk.n, t0 = blk.t0, t1 = blk.t1, h0 = blk.h0, nh = blk.nh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int rs = r + 4, nq = r / 4;
  for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
    const int hh = i / r, x = i % r;
    const float v = hh < nh ? q[(b * heads + h0 + hh) * int64_t(r) + x] : 0.0f;
    qh[hh * rs + x] = __uint_as_float(tf32_hi(v));
    ql[hh * rs + x] = __uint_as_float(tf32_lo(v));
  }
  const int64_t* offs = ws.offset + b * w;
  const float* tsc = ws.tscale + b * w;
  const int kc = r / kWarps, kbase = warp * kc;     // score channels of this warp
  const int mtiles = r / 128, mbase = warp * mtiles * 16;  // output channels of this warp
  float acc[kMaxMmaTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int base = tile * kTile;
    gather_tile_latents<T>(lat, pages, offs, base, n, nq, rs);
    __syncthreads();
    {  // Scores: two 16-token tiles x 8 heads over this warp's channels.
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      for (int k0 = kbase; k0 < kbase + kc; k0 += 8) {
        const uint32_t bh0 = __float_as_uint(qh[g * rs + k0 + tq]), bh1 = __float_as_uint(qh[g * rs + k0 + tq + 4]);
        const uint32_t bl0 = __float_as_uint(ql[g * rs + k0 + tq]), bl1 = __float_as_uint(ql[g * rs + k0 + tq + 4]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float* l0 = lat + (mt * 16 + g) * rs + k0 + tq;
          const float f[4] = {l0[0], l0[8 * rs], l0[4], l0[8 * rs + 4]};
          uint32_t a[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = tf32_hi(f[i]);
          mma_tf32(c[mt], a, bh0, bh1);
          mma_tf32(c[mt], a, bl0, bl1);
          if constexpr (kSplitLat) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = tf32_lo(f[i]);
            mma_tf32(c[mt], a, bh0, bh1);
          }
        }
      }
      // c[mt]: tokens mt*16 + g (+8), heads 2tq, 2tq + 1.
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float* s0 = sp + (warp * kGroup + 2 * tq) * kTile + mt * 16 + g;
        s0[0] = c[mt][0];
        s0[kTile] = c[mt][1];
        s0[8] = c[mt][2];
        s0[kTile + 8] = c[mt][3];
      }
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc, base, n, scale, m_run, l_run);
    __syncthreads();
    {  // O^T [channels x heads] += L^T [channels x 32 tokens] P^T [32 x 8].
      const float a0 = alpha[2 * tq], a1 = alpha[2 * tq + 1];
#pragma unroll
      for (int i = 0; i < kMaxMmaTiles; ++i) {
        acc[i][0] *= a0;
        acc[i][1] *= a1;
        acc[i][2] *= a0;
        acc[i][3] *= a1;
      }
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
            for (int j = 0; j < 4; ++j) a[j] = tf32_hi(f[j]);
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
  const int64_t part = (b * chunks + chunk) * heads + h0;
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

// ---- 3. combine ----------------------------------------------------------------

__global__ void combine_kernel(float* __restrict__ out, Workspace ws, int heads, int r, int chunks) {
  const int h = blockIdx.x;
  const int64_t b = blockIdx.y;
  float* o = out + (b * heads + h) * int64_t(r);
  const int n = ws.count[b];
  if (n == 0) {
    for (int x = threadIdx.x; x < r; x += blockDim.x) o[x] = 0.0f;
    return;
  }
  const int tiles = (n + kTile - 1) / kTile, per = (tiles + chunks - 1) / chunks, used = (tiles + per - 1) / per;
  const float* ml = ws.part_ml + (b * chunks * heads + h) * 2;  // chunk k at ml[k * heads * 2]
  float mx = -INFINITY;
  for (int k = 0; k < used; ++k) mx = fmaxf(mx, ml[k * heads * 2]);
  float total = 0.0f;
  for (int k = 0; k < used; ++k) total += ml[k * heads * 2 + 1] * expf(ml[k * heads * 2] - mx);
  const float* po = ws.part_o + (b * chunks * heads + h) * int64_t(r);  // chunk k at po[k * heads * r]
  for (int x = threadIdx.x; x < r; x += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < used; ++k) acc += po[int64_t(k) * heads * r + x] * expf(ml[k * heads * 2] - mx);
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
void ensure_smem(const void* kernel, size_t bytes, const char* op) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> done;
  int device = 0;
  raise_if(cuda_status(cudaGetDevice(&device), op));
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = done[{kernel, device}];
  if (bytes <= have) return;
  raise_if(cuda_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)), op));
  have = bytes;
}

}  // namespace

bool mla_split_supported(int64_t heads, const MlaSplitPages& p, int64_t indices_per_row) {
  if (heads <= 0 || p.width <= 0 || p.width % 4 != 0 || p.width > kMaxWidth) return false;
  if (indices_per_row <= 0 || indices_per_row > kMaxIndices || p.page_stride % 4 != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.pages) % 16 != 0) return false;
  return p.dtype == DType::kF32 || p.dtype == DType::kBF16 || p.dtype == DType::kF8E4M3;
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
  const int chunks = static_cast<int>(std::min<int64_t>((w + kTile - 1) / kTile, kMaxChunks));
  const int64_t batch = std::min(rows, kRowBatch);
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
  // Tensor cores where the width allows (the choice depends only on R: both ops agree).
  const bool mma = use_mma() && r % 128 == 0;
  const size_t split_smem_bytes = static_cast<size_t>(mma ? mma_smem(r).total : split_smem(r).total) * 4;
  auto prep = pages.dtype == DType::kF8E4M3 ? prep_kernel<true> : prep_kernel<false>;
  auto split = pages.dtype == DType::kF32    ? (mma ? split_mma_kernel<float> : split_kernel<float>)
               : pages.dtype == DType::kBF16 ? (mma ? split_mma_kernel<__nv_bfloat16> : split_kernel<__nv_bfloat16>)
                                             : (mma ? split_mma_kernel<__nv_fp8_e4m3> : split_kernel<__nv_fp8_e4m3>);
  ensure_smem(reinterpret_cast<const void*>(prep), prep_smem, op);
  ensure_smem(reinterpret_cast<const void*>(split), split_smem_bytes, op);
  for (int64_t r0 = 0; r0 < rows; r0 += batch) {
    const int64_t nb = std::min(batch, rows - r0);
    MlaSplitPages p = pages;
    if (p.row_tables != nullptr) {
      p.row_tables += r0;
      p.row_pos += r0;
    }
    prep<<<static_cast<unsigned>(nb), kPrepThreads, prep_smem, ctx.stream>>>(ws, p, indices + r0 * w, w);
    const dim3 grid(static_cast<unsigned>((h + kGroup - 1) / kGroup), static_cast<unsigned>(chunks),
                    static_cast<unsigned>(nb));
    split<<<grid, kThreads, split_smem_bytes, ctx.stream>>>(ws, pages.pages, q + r0 * h * r, w, h, r, scale);
    combine_kernel<<<dim3(static_cast<unsigned>(h), static_cast<unsigned>(nb)), 128, 0, ctx.stream>>>(
        out + r0 * h * r, ws, h, r, chunks);
  }
  check_launch(op);
}

}  // namespace tf::cuda
