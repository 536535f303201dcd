// DSA indexer kernels on the GPU: pooled keys (a per-channel softmax over the k_p
// members of a pool; one thread per (pool, channel)) and relu-weighted pool
// scores (one thread per (query row, pool), the row's q and weights in shared
// memory). Both keep the CPU reference's summation order. The decode-rows variants
// (one token per row, each its own sequence) read positions and state addresses on
// the device and launch a grid that depends only on the row count and the score
// buffer's width (capture-safe); the pool scores of a row spread over warps, a warp per
// pool, for buffers up to 2048 pools, else over quads of lanes (two pools a quad) or, for
// many rows x pools, threads (two pools a thread); pooled keys 16-byte aligned, as
// tensors are. All three give the same bits.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

// Channel x of one pool's key: keys, gate point at the pool's [kp, d] rows. Shared by
// the one-sequence and the decode-rows kernels (the same arithmetic in both).
__device__ __forceinline__ float pool_key_channel(const float* keys, const float* gate, const float* ape, int64_t kp,
                                                  int64_t d, int64_t x) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < kp; ++i) mx = fmaxf(mx, gate[i * d + x] + ape[i * d + x]);
  float sum = 0, acc = 0;
  for (int64_t i = 0; i < kp; ++i) {
    const float ex = expf(gate[i * d + x] + ape[i * d + x] - mx);
    sum += ex;
    acc += ex * keys[i * d + x];
  }
  return acc / sum;
}

// One pool's score: sq holds the row's q [h, d] then its weights [h].
__device__ __forceinline__ float pool_score(const float* sq, const float* kv, int64_t h, int64_t d, float scale) {
  float acc = 0;
  for (int64_t hh = 0; hh < h; ++hh) {
    const float* qh = sq + hh * d;
    float s = 0;
    for (int64_t x = 0; x < d; ++x) s += qh[x] * kv[x];
    acc += sq[h * d + hh] * fmaxf(0.0f, s * scale);
  }
  return acc;
}

__global__ void pool_keys_kernel(float* __restrict__ out, const float* __restrict__ keys,
                                 const float* __restrict__ gate, const float* __restrict__ ape, int64_t p, int64_t kp,
                                 int64_t d) {
  const int64_t total = p * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pi = e / d, x = e % d;
    out[e] = pool_key_channel(keys + pi * kp * d, gate + pi * kp * d, ape, kp, d, x);
  }
}

__global__ void scores_kernel(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ pool,
                              const float* __restrict__ w, const int32_t* __restrict__ cand, int64_t p, int64_t h,
                              int64_t d, float scale) {
  extern __shared__ float sq[];  // q[h*d] then weights[h]
  const int64_t ti = blockIdx.x;
  for (int64_t i = threadIdx.x; i < h * d; i += blockDim.x) sq[i] = q[ti * h * d + i];
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sq[h * d + i] = w[ti * h + i];
  __syncthreads();
  const int64_t pi = blockIdx.y * int64_t(blockDim.x) + threadIdx.x;
  if (pi >= p) return;
  if (pi >= cand[ti]) {
    out[ti * p + pi] = -FLT_MAX;
    return;
  }
  out[ti * p + pi] = pool_score(sq, pool + pi * d, h, d, scale);
}

}  // namespace

void indexer_pool_keys(CudaContext& ctx, Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) {
  check_dev(ctx, "indexer_pool_keys ape", ape, DType::kF32);
  if (ape.dim() != 2) throw StatusError(invalid_argument("indexer_pool_keys: ape must be [kp, D], got " + ape.describe()));
  const int64_t kp = ape.size(0), d = ape.size(1);
  if (kp * d == 0) return;
  const int64_t p = keys.numel() / (kp * d);
  check_dev(ctx, "indexer_pool_keys keys", keys, DType::kF32, p * kp * d);
  check_dev(ctx, "indexer_pool_keys gate", gate, DType::kF32, p * kp * d);
  check_dev(ctx, "indexer_pool_keys out", out, DType::kF32, p * d);
  if (p == 0) return;
  pool_keys_kernel<<<grid_1d(p * d), 256, 0, ctx.stream>>>(out.data<float>(), keys.data<float>(), gate.data<float>(),
                                                            ape.data<float>(), p, kp, d);
  check_launch("indexer_pool_keys");
}

void indexer_scores(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                    const Tensor& candidates, float scale) {
  check_dev(ctx, "indexer_scores pool_keys", pool_keys, DType::kF32);
  check_dev(ctx, "indexer_scores candidates", candidates, DType::kI32);
  const int64_t t = candidates.numel(), d = pool_keys.size(-1), p = d == 0 ? 0 : pool_keys.numel() / d;
  if (t == 0) return;
  const int64_t h = weights.numel() / t;
  check_dev(ctx, "indexer_scores q", q, DType::kF32, t * h * d);
  check_dev(ctx, "indexer_scores weights", weights, DType::kF32, t * h);
  check_dev(ctx, "indexer_scores out", out, DType::kF32, t * p);
  if (p == 0) return;
  const size_t smem = static_cast<size_t>(h * d + h) * sizeof(float);
  if (smem > 48 * 1024)
    throw StatusError(unimplemented("indexer_scores: " + std::to_string(h) + " heads of width " + std::to_string(d) +
                                    " exceed the kernel's shared memory"));
  if ((p + 127) / 128 > 65535) throw StatusError(unimplemented("indexer_scores: too many pools"));
  dim3 grid(static_cast<unsigned>(t), static_cast<unsigned>((p + 127) / 128));
  scores_kernel<<<grid, 128, smem, ctx.stream>>>(out.data<float>(), q.data<float>(), pool_keys.data<float>(),
                                                 weights.data<float>(), candidates.data<int32_t>(), p, h, d, scale);
  check_launch("indexer_scores");
}

namespace {

// Entry c of a row's token indices (`visible` tokens, selected pools sel[s]).
__device__ __forceinline__ int32_t token_index(const int32_t* sel, int64_t c, int64_t s, int64_t visible, int64_t kp,
                                               bool tail) {
  const int64_t complete = visible / kp;
  if (c < s * kp) {
    const int64_t p = sel[c / kp];
    if (p >= 0 && p < complete) return static_cast<int32_t>(p * kp + c % kp);
  } else if (tail && c - s * kp < visible % kp) {
    return static_cast<int32_t>(complete * kp + (c - s * kp));
  }
  return -1;
}

// One thread per output entry.
__global__ void token_indices_kernel(int32_t* __restrict__ out, const int32_t* __restrict__ sel, int64_t t, int64_t w,
                                     int64_t s, int64_t first, int64_t kp, bool tail) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < t * w; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / w, c = e % w;
    out[e] = token_index(sel + i * s, c, s, first + i + 1, kp, tail);
  }
}

}  // namespace

void indexer_token_indices(CudaContext& ctx, Tensor& indices, const Tensor& pools, int64_t first_position,
                           int pool_size, bool tail) {
  check_dev(ctx, "indexer_token_indices pools", pools, DType::kI32);
  check_dev(ctx, "indexer_token_indices indices", indices, DType::kI32);
  const int64_t t = indices.dim() == 0 ? 0 : indices.size(0), w = t == 0 ? 0 : indices.numel() / t;
  const int64_t s = t == 0 ? 0 : pools.numel() / t, kp = pool_size;
  if (kp < 1 || pools.numel() != t * s || w < s * kp + (tail ? kp - 1 : 0) || first_position < 0)
    throw StatusError(invalid_argument("indexer_token_indices: indices " + indices.describe() + ", pools " +
                                       pools.describe() + ", pool size " + std::to_string(kp)));
  if (t * w == 0) return;
  token_indices_kernel<<<grid_1d(t * w), 256, 0, ctx.stream>>>(indices.data<int32_t>(), pools.data<int32_t>(), t, w,
                                                                s, first_position, kp, tail);
  check_launch("indexer_token_indices");
}

// ---- decode rows (ops.h DecodeRowsView): per-row state read on the device ----------

namespace {

constexpr int kScoreBlocksPerRow = 8;  // fixed: the grid may not depend on sequence lengths

template <typename T>
__device__ __forceinline__ T* row_addr(const int64_t* table, int64_t b) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(table[b]));
}

// One block per row, a thread per channel (grid-stride): the new key/gate go into ring
// slot pos % kp; the token that completes a pool also computes the pooled key. Each
// thread reads back only the channel it wrote, so no barrier is needed.
__global__ void update_rows_kernel(const int32_t* __restrict__ pos, const int64_t* __restrict__ rings,
                                   const int64_t* __restrict__ pool_keys, const float* __restrict__ key,
                                   const float* __restrict__ gate, const float* __restrict__ ape, int64_t kp,
                                   int64_t d) {
  const int64_t b = blockIdx.x, p = pos[b], slot = p % kp;
  float* ring = row_addr<float>(rings, b);
  for (int64_t x = threadIdx.x; x < d; x += blockDim.x) {
    ring[slot * d + x] = key[b * d + x];
    ring[(kp + slot) * d + x] = gate[b * d + x];
    if (slot == kp - 1) row_addr<float>(pool_keys, b)[(p / kp) * d + x] = pool_key_channel(ring, ring + kp * d, ape, kp, d, x);
  }
}

// The general path: a warp per pool (grid-stride over the row's pools): lanes hold 4 channels of the pool
// key each, every head's dot product is a warp reduction (a fixed tree: the result does
// not depend on the batch), heads are summed in order as in indexer_scores.
constexpr int kScoreThreads = 256;
__global__ void __launch_bounds__(kScoreThreads)
    scores_rows_kernel(float* __restrict__ out, const int32_t* __restrict__ pos, const int64_t* __restrict__ pool_keys,
                       const float* __restrict__ q, const float* __restrict__ w, int64_t width, int64_t kp, int64_t h,
                       int64_t d, float scale, int64_t select) {
  extern __shared__ float sq[];  // q[h*d] then weights[h]
  const int64_t b = blockIdx.x;
  const int64_t n = min(int64_t(pos[b] + 1) / kp, width);
  if (n == 0 || n <= select) return;  // none, or the top-k takes all (Ops::indexer_scores_rows)
  for (int64_t i = threadIdx.x; i < h * d; i += blockDim.x) sq[i] = q[b * h * d + i];
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) sq[h * d + i] = w[b * h + i];
  __syncthreads();
  const float* pk = row_addr<const float>(pool_keys, b);
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t pi = int64_t(blockIdx.y) * warps + (threadIdx.x >> 5); pi < n; pi += int64_t(gridDim.y) * warps) {
    const float* kv = pk + pi * d;
    float acc = 0;
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* qh = sq + hh * d;
      float s = 0;
      for (int64_t x = lane; x < d; x += 32) s += qh[x] * kv[x];
      s = warp_reduce(s, SumOp{});
      acc += sq[h * d + hh] * fmaxf(0.0f, s * scale);
    }
    if (lane == 0) out[b * width + pi] = acc;
  }
}

// Row b's q [h, d] into shared memory with rows ld floats apart, then its weights [h] at
// h * ld; the whole block takes part (a barrier ends it).
__device__ __forceinline__ void stage_row_q(float* sqw, const float* q, const float* w, int64_t b, int h, int d,
                                            int ld) {
  for (int i = threadIdx.x; i < h * d; i += blockDim.x) sqw[(i / d) * ld + i % d] = q[b * h * d + i];
  for (int i = threadIdx.x; i < h; i += blockDim.x) sqw[h * ld + i] = w[b * h + i];
  __syncthreads();
}

// The many-pool path (h <= 32 heads, d a multiple of 16): a thread per kPoolsPerThread pools (pools
// first + t + i * kPoolThreads, so a warp reads adjacent keys), blocks over the score
// columns (the grid follows the score buffer's width, not the rows' lengths, so it
// stays capture-safe; blocks past a row's pools return at once). The row's q and
// weights sit in shared memory (every read a broadcast, shared by the thread's kPoolsPerThread pools);
// the pool keys come into registers 16 channels at a time; each head's dot product runs
// over the channels in order, then the heads are summed in order, as in pool_score.
// H100, 1 row: 49 us at 128K pools, 91 at 256K (59% of HBM); 4-16 rows up to 66%.
constexpr int kFastHeads = 32, kKeyChunk = 16, kPoolThreads = 128, kPoolsPerThread = 2;
__global__ void __launch_bounds__(kPoolThreads)
    scores_rows_pool_kernel(float* __restrict__ out, const int32_t* __restrict__ pos,
                            const int64_t* __restrict__ pool_keys, const float* __restrict__ q,
                            const float* __restrict__ w, int64_t width, int64_t kp, int h, int d, float scale,
                            int64_t select) {
  extern __shared__ __align__(16) float sqw[];  // q[h*d] then weights[h]
  const int64_t b = blockIdx.y;
  const int64_t n = min(int64_t(pos[b] + 1) / kp, width),
                first = int64_t(blockIdx.x) * kPoolThreads * kPoolsPerThread;
  if (first >= n || n <= select) return;
  stage_row_q(sqw, q, w, b, h, d, d);
  const float* keys = row_addr<const float>(pool_keys, b);
  int64_t pi[kPoolsPerThread];
  const float4* kv[kPoolsPerThread];
#pragma unroll
  for (int p = 0; p < kPoolsPerThread; ++p) {
    pi[p] = first + threadIdx.x + p * kPoolThreads;
    kv[p] = reinterpret_cast<const float4*>(keys + min(pi[p], n - 1) * d);  // past n: computed, not stored
  }
  if (pi[0] >= n) return;
  float s[kPoolsPerThread][kFastHeads];
#pragma unroll
  for (int p = 0; p < kPoolsPerThread; ++p)
#pragma unroll
    for (int hh = 0; hh < kFastHeads; ++hh) s[p][hh] = 0.0f;
  for (int c = 0; c < d; c += kKeyChunk) {
    float4 k4[kPoolsPerThread][kKeyChunk / 4];
#pragma unroll
    for (int p = 0; p < kPoolsPerThread; ++p)
#pragma unroll
      for (int i = 0; i < kKeyChunk / 4; ++i) k4[p][i] = kv[p][c / 4 + i];
#pragma unroll
    for (int hh = 0; hh < kFastHeads; ++hh) {
      if (hh < h) {
        const float4* qh = reinterpret_cast<const float4*>(sqw + hh * d + c);
#pragma unroll
        for (int i = 0; i < kKeyChunk / 4; ++i) {
          const float4 qv = qh[i];
#pragma unroll
          for (int p = 0; p < kPoolsPerThread; ++p) {
            s[p][hh] = fmaf(qv.x, k4[p][i].x, s[p][hh]);
            s[p][hh] = fmaf(qv.y, k4[p][i].y, s[p][hh]);
            s[p][hh] = fmaf(qv.z, k4[p][i].z, s[p][hh]);
            s[p][hh] = fmaf(qv.w, k4[p][i].w, s[p][hh]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < kPoolsPerThread; ++p) {
    float acc = 0.0f;
#pragma unroll
    for (int hh = 0; hh < kFastHeads; ++hh)
      if (hh < h) acc += sqw[h * d + hh] * fmaxf(0.0f, s[p][hh] * scale);
    if (pi[p] < n) out[b * width + pi[p]] = acc;
  }
}

// The mid-size path (h <= 32 heads, d a multiple of 16; fewer pools than the path above
// fills the GPU with): a quad of lanes per two pools, lane g of the quad holding heads
// g, g+4, .., g+28 of both, so the pools spread over twice the threads of the path above
// (at 32K pools and 1 row that one leaves most SMs one block of 4 warps: 21.7 against
// 18.4 us here; at 8K pools 21 against 10) and each q read from shared memory serves two
// pools. q rows sit d + 4 floats apart, so the quad's four heads fall in different banks.
// Each head's dot product runs over the channels in order; the quad's first lane then
// gathers the 32 relus by shuffles and sums the heads in order: the operations of
// pool_score and of the paths above, so the bits are theirs (tested).
constexpr int kQuadThreads = 128, kQuadPools = kQuadThreads / 2, kQuadHeads = 8, kQuadPad = 4;
__global__ void __launch_bounds__(kQuadThreads)
    scores_rows_quad_kernel(float* __restrict__ out, const int32_t* __restrict__ pos,
                            const int64_t* __restrict__ pool_keys, const float* __restrict__ q,
                            const float* __restrict__ w, int64_t width, int64_t kp, int h, int d, float scale,
                            int64_t select) {
  extern __shared__ __align__(16) float sqw[];  // q[h][d + kQuadPad] then weights[h]
  const int64_t b = blockIdx.y;
  const int64_t n = min(int64_t(pos[b] + 1) / kp, width), first = int64_t(blockIdx.x) * kQuadPools;
  if (first >= n || n <= select) return;
  const int ld = d + kQuadPad;
  stage_row_q(sqw, q, w, b, h, d, ld);
  const int g = threadIdx.x & 3, lane = threadIdx.x & 31;
  // The quad's pools: first + quad and first + quad + kQuadPools / 2 (adjacent quads read
  // adjacent keys). Past the row's pools a quad computes on its last pool and stores
  // nothing (every lane takes part in the shuffles).
  int64_t pi[2];
  const float4* kv[2];
  const float* keys = row_addr<const float>(pool_keys, b);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    pi[p] = first + (threadIdx.x >> 2) + p * (kQuadPools / 2);
    kv[p] = reinterpret_cast<const float4*>(keys + min(pi[p], n - 1) * d);
  }
  float s[2][kQuadHeads];
#pragma unroll
  for (int p = 0; p < 2; ++p)
#pragma unroll
    for (int j = 0; j < kQuadHeads; ++j) s[p][j] = 0.0f;
  for (int c = 0; c < d; c += kKeyChunk) {
    float4 k4[2][kKeyChunk / 4];
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int i = 0; i < kKeyChunk / 4; ++i) k4[p][i] = kv[p][c / 4 + i];
#pragma unroll
    for (int j = 0; j < kQuadHeads; ++j) {
      const int hh = j * 4 + g;
      if (hh < h) {
        const float4* qh = reinterpret_cast<const float4*>(sqw + hh * ld + c);
#pragma unroll
        for (int i = 0; i < kKeyChunk / 4; ++i) {
          const float4 qv = qh[i];
#pragma unroll
          for (int p = 0; p < 2; ++p) {
            s[p][j] = fmaf(qv.x, k4[p][i].x, s[p][j]);
            s[p][j] = fmaf(qv.y, k4[p][i].y, s[p][j]);
            s[p][j] = fmaf(qv.z, k4[p][i].z, s[p][j]);
            s[p][j] = fmaf(qv.w, k4[p][i].w, s[p][j]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    float relu[kQuadHeads];
#pragma unroll
    for (int j = 0; j < kQuadHeads; ++j) relu[j] = fmaxf(0.0f, s[p][j] * scale);
    float acc = 0.0f;
#pragma unroll
    for (int hh = 0; hh < 4 * kQuadHeads; ++hh) {
      const float v = __shfl_sync(0xffffffffu, relu[hh / 4], (lane & ~3) + hh % 4);
      if (hh < h) acc += sqw[h * ld + hh] * v;
    }
    if (g == 0 && pi[p] < n) out[b * width + pi[p]] = acc;
  }
}

// The scores kernel past kWarpPoolMaxWidth: the quad path while rows x width <=
// kQuadMaxPools, else the thread-per-pools path (both give the same bits).
// TF_INDEXER_SCORES=quad | thread picks one at every size (read once, for A/B runs).
constexpr int64_t kQuadMaxPools = 65536;
bool use_quad_scores(int64_t rows, int64_t width) {
  static const int forced = [] {
    const char* e = std::getenv("TF_INDEXER_SCORES");
    if (e == nullptr) return 0;
    return std::string(e) == "quad" ? 1 : std::string(e) == "thread" ? 2 : 0;
  }();
  return forced == 1 || (forced == 0 && rows * width <= kQuadMaxPools);
}

// The short-context path (h <= 32 heads, d a multiple of 4, score buffers up to
// kWarpPoolMaxWidth pools): a warp per pool and a lane per head, so a row's few pools
// still spread over many warps (the thread-per-pool path above keeps one thread busy
// with all 32 heads x d channels of a pool: ~20 us at a 2K-token context). Each lane's
// dot product runs over the channels in order and the heads are summed in order (the
// weights times the relus, gathered by shuffles), the very operations of the path above
// and of pool_score, so both give the same bits (tested). q sits transposed in shared
// memory ([d][33]: read in global order, and a lane per head reads without bank
// conflicts); the pool key comes as float4 loads of one address per warp (a broadcast).
// Longer buffers take the thread-per-pool path, which needs fewer instructions per pool
// (H200: 2K-token context 20 -> 8 us at 1 row; at 32K tokens the warp path was slower).
constexpr int kWarpPoolThreads = 256, kWarpPoolMaxBlocks = 256, kWarpPoolStride = 33;
constexpr int64_t kWarpPoolMaxWidth = 2048;
__global__ void __launch_bounds__(kWarpPoolThreads)
    scores_rows_warp_kernel(float* __restrict__ out, const int32_t* __restrict__ pos,
                            const int64_t* __restrict__ pool_keys, const float* __restrict__ q,
                            const float* __restrict__ w, int64_t width, int64_t kp, int h, int d, float scale,
                            int64_t select) {
  extern __shared__ __align__(16) float sqt[];  // q transposed [d][33], then weights [32]
  const int64_t b = blockIdx.y;
  const int64_t n = min(int64_t(pos[b] + 1) / kp, width);
  const int warps = kWarpPoolThreads / 32;
  const int64_t first = int64_t(blockIdx.x) * warps;
  if (first >= n || n <= select) return;
  for (int i = threadIdx.x; i < 32 * d; i += kWarpPoolThreads) {
    const int hh = i / d, c = i % d;
    sqt[c * kWarpPoolStride + hh] = hh < h ? q[(b * h + hh) * d + c] : 0.0f;
  }
  const int wat = kWarpPoolStride * d;
  if (threadIdx.x < 32) sqt[wat + threadIdx.x] = int(threadIdx.x) < h ? w[b * h + threadIdx.x] : 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const float* pk = row_addr<const float>(pool_keys, b);
  for (int64_t pi = first + (threadIdx.x >> 5); pi < n; pi += int64_t(gridDim.x) * warps) {
    const float4* kv = reinterpret_cast<const float4*>(pk + pi * d);
    float s = 0.0f;
    for (int c = 0; c < d; c += 4) {
      const float4 k4 = kv[c / 4];
      s = fmaf(sqt[(c + 0) * kWarpPoolStride + lane], k4.x, s);
      s = fmaf(sqt[(c + 1) * kWarpPoolStride + lane], k4.y, s);
      s = fmaf(sqt[(c + 2) * kWarpPoolStride + lane], k4.z, s);
      s = fmaf(sqt[(c + 3) * kWarpPoolStride + lane], k4.w, s);
    }
    const float relu = fmaxf(0.0f, s * scale);
    float acc = 0.0f;
    for (int hh = 0; hh < h; ++hh) acc += sqt[wat + hh] * __shfl_sync(0xffffffffu, relu, hh);
    if (lane == 0) out[b * width + pi] = acc;
  }
}

__global__ void token_indices_rows_kernel(int32_t* __restrict__ out, const int32_t* __restrict__ sel,
                                          const int32_t* __restrict__ pos, int64_t t, int64_t w, int64_t s,
                                          int64_t kp, bool tail) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < t * w; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / w, c = e % w;
    out[e] = token_index(sel + i * s, c, s, int64_t(pos[i]) + 1, kp, tail);
  }
}

void check_indexer_rows(const char* op, const DecodeRowsView& v) {
  if (v.rows < 0 || (v.rows > 0 && v.positions == nullptr) || v.kpool < 1)
    throw StatusError(invalid_argument(std::string(op) + ": decode rows without positions or pool size"));
}

}  // namespace

void indexer_update_rows(CudaContext& ctx, const DecodeRowsView& rows, const Tensor& key, const Tensor& gate,
                         const Tensor& ape) {
  check_indexer_rows("indexer_update_rows", rows);
  const int64_t b = rows.rows, d = rows.index_dim, kp = rows.kpool;
  check_dev(ctx, "indexer_update_rows key", key, DType::kF32, b * d);
  check_dev(ctx, "indexer_update_rows gate", gate, DType::kF32, b * d);
  check_dev(ctx, "indexer_update_rows ape", ape, DType::kF32, kp * d);
  if (b == 0 || d == 0) return;
  if (rows.rings == nullptr || rows.pool_keys == nullptr)
    throw StatusError(invalid_argument("indexer_update_rows: no indexer state"));
  update_rows_kernel<<<static_cast<unsigned>(b), 128, 0, ctx.stream>>>(rows.positions, rows.rings, rows.pool_keys,
                                                                       key.data<float>(), gate.data<float>(),
                                                                       ape.data<float>(), kp, d);
  check_launch("indexer_update_rows");
}

void indexer_scores_rows(CudaContext& ctx, Tensor& out, const DecodeRowsView& rows, const Tensor& q,
                         const Tensor& weights, float scale, int64_t select) {
  check_indexer_rows("indexer_scores_rows", rows);
  const int64_t b = rows.rows, d = rows.index_dim;
  if (b == 0) return;
  check_dev(ctx, "indexer_scores_rows out", out, DType::kF32);
  const int64_t width = out.numel() / b, h = weights.numel() / b;
  if (out.size(0) != b || weights.size(0) != b)
    throw StatusError(invalid_argument("indexer_scores_rows: out " + out.describe() + ", weights " +
                                       weights.describe() + " for " + std::to_string(b) + " rows"));
  check_dev(ctx, "indexer_scores_rows q", q, DType::kF32, b * h * d);
  check_dev(ctx, "indexer_scores_rows weights", weights, DType::kF32, b * h);
  if (width == 0 || d == 0) return;
  if (rows.pool_keys == nullptr) throw StatusError(invalid_argument("indexer_scores_rows: no pooled keys"));
  const size_t smem = static_cast<size_t>(h * d + h) * sizeof(float);
  if (smem > 48 * 1024)
    throw StatusError(unimplemented("indexer_scores_rows: " + std::to_string(h) + " heads of width " +
                                    std::to_string(d) + " exceed the kernel's shared memory"));
  if (h <= 32 && d % 4 == 0 && width <= kWarpPoolMaxWidth && b <= 65535) {
    const size_t tsmem = static_cast<size_t>(kWarpPoolStride * d + 32) * sizeof(float);
    if (tsmem <= 48 * 1024) {
      const int64_t blocks = std::min<int64_t>((width + 7) / 8, kWarpPoolMaxBlocks);
      const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(b));
      scores_rows_warp_kernel<<<grid, kWarpPoolThreads, tsmem, ctx.stream>>>(
          out.data<float>(), rows.positions, rows.pool_keys, q.data<float>(), weights.data<float>(), width,
          rows.kpool, static_cast<int>(h), static_cast<int>(d), scale, select);
      check_launch("indexer_scores_rows");
      return;
    }
  }
  if (h <= kFastHeads && d % kKeyChunk == 0 && (width + kQuadPools - 1) / kQuadPools <= INT32_MAX &&
      b <= 65535) {
    const size_t qsmem = static_cast<size_t>(h * (d + kQuadPad) + h) * sizeof(float);
    if (use_quad_scores(b, width) && qsmem <= 48 * 1024) {
      const dim3 grid(static_cast<unsigned>((width + kQuadPools - 1) / kQuadPools), static_cast<unsigned>(b));
      scores_rows_quad_kernel<<<grid, kQuadThreads, qsmem, ctx.stream>>>(
          out.data<float>(), rows.positions, rows.pool_keys, q.data<float>(), weights.data<float>(), width,
          rows.kpool, static_cast<int>(h), static_cast<int>(d), scale, select);
    } else {
      constexpr int64_t per_block = int64_t{kPoolThreads} * kPoolsPerThread;
      const dim3 grid(static_cast<unsigned>((width + per_block - 1) / per_block), static_cast<unsigned>(b));
      scores_rows_pool_kernel<<<grid, kPoolThreads, smem, ctx.stream>>>(
          out.data<float>(), rows.positions, rows.pool_keys, q.data<float>(), weights.data<float>(), width,
          rows.kpool, static_cast<int>(h), static_cast<int>(d), scale, select);
    }
    check_launch("indexer_scores_rows");
    return;
  }
  const dim3 grid(static_cast<unsigned>(b), kScoreBlocksPerRow);
  scores_rows_kernel<<<grid, kScoreThreads, smem, ctx.stream>>>(out.data<float>(), rows.positions, rows.pool_keys,
                                                      q.data<float>(), weights.data<float>(), width, rows.kpool, h, d,
                                                      scale, select);
  check_launch("indexer_scores_rows");
}

void indexer_token_indices_rows(CudaContext& ctx, Tensor& indices, const Tensor& selected, const DecodeRowsView& rows,
                                bool tail) {
  check_indexer_rows("indexer_token_indices_rows", rows);
  check_dev(ctx, "indexer_token_indices_rows selected", selected, DType::kI32);
  check_dev(ctx, "indexer_token_indices_rows indices", indices, DType::kI32);
  const int64_t t = rows.rows, kp = rows.kpool;
  if (t == 0) return;
  const int64_t w = indices.numel() / t, s = selected.numel() / t;
  if (indices.size(0) != t || selected.size(0) != t || w < s * kp + (tail ? kp - 1 : 0))
    throw StatusError(invalid_argument("indexer_token_indices_rows: indices " + indices.describe() + ", selected " +
                                       selected.describe() + ", pool size " + std::to_string(kp)));
  if (t * w == 0) return;
  // Fixed grid (grid-stride), whatever the entries' values.
  token_indices_rows_kernel<<<grid_1d(t * w), 256, 0, ctx.stream>>>(indices.data<int32_t>(), selected.data<int32_t>(),
                                                                     rows.positions, t, w, s, kp, tail);
  check_launch("indexer_token_indices_rows");
}

}  // namespace tf::cuda
