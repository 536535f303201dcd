// The bidirectional-encoder ops on the GPU: a bias row added to every row, the exact
// (erf) GELU, rotary embedding from per-row cos/sin tables and attention inside
// segments of rows (Ops::segment_attention).
//
// segment_attention has two kernels: a tensor-core one for D = 64 (the model's head
// dim), in bf16 by default or in a split form (TF_SEGMENT_ATTENTION_MMA=split; =0 turns
// it off, for A/B), and a scalar f32 one for the rest (and for q, k, v, out not aligned to
// 8 / 16 bytes). Both start with
//  1. segment_tiles_kernel (one block): tile_start[s] = the number of query tiles
//     (kQueries rows each, kMmaBlockRows for the tensor-core kernel) of the segments before
//     s, a scan over the device offsets.
// Scalar kernel (correctness first):
//  2. segment_attention_kernel: one block of kQueries threads per (query tile, head),
//     grid x = ceil(T / kQueries) + S (an upper bound on the tiles; the spare blocks
//     exit). A block finds its segment by a binary search over tile_start, so its rows
//     all belong to one segment (a tile never straddles two) and one query row goes to
//     each thread. The block walks the segment's keys in tiles of KT keys starting at
//     the segment's first row, staged in shared memory (k and v, zero-padded to DC
//     columns) and read by every thread as float4 broadcasts; per tile a thread scores
//     its query against the KT keys (keys past the segment's end score -inf) and folds
//     them into an online softmax in f32 (running max m, sum l, acc[DC] rescaled by
//     exp(m_old - m_new) once per tile). The output is acc / l.
//     Register budget: qr[DC] + acc[DC] + s[KT] floats per thread; DC = 64 with KT = 32
//     takes 254 registers without spills at 128 threads a block (DC = 128 spills some:
//     correct, slower).
// Tensor-core kernel (D = 64, mma.sync m16n8k16, flash-attention style). By default
// (bf16) its operands are rounded to bf16 once, as the reference's attention in bf16 has
// them: k and v by segment_kv_bf16_kernel, q on loading, P before P V (the sum l keeps P
// in f32); one mma per product, no scales, and each warp takes 32 query rows (two row
// tiles sharing every K and V fragment it loads): 128-row blocks, 36 KB of shared memory,
// 234 registers, 2 blocks an SM. The split form (16 rows a warp), for A/B and ~1e-5 parity:
//  2. segment_kv_split_kernel: k and v once into the operand formats (scratch of
//     8 bytes per element, O(T)): every (row, head) of k scaled by 2^-e (exact; its
//     largest magnitude into [1, 2)) and split into fp16 hi + lo (22 significant bits),
//     kf[h][t] = 2^e; v split into bf16 hi + lo (16 bits).
//  3. segment_attention_mma_kernel: a block of 4 warps per (tile of 64 query
//     rows of one segment, head), grid and segment search as the scalar kernel; each
//     warp owns 16 rows, its q rows scaled by 2^-e per row, split into fp16 hi + lo
//     and held as A fragments. The segment's keys go by in tiles of 64, staged by
//     cp.async into a double-buffered shared ring ([key][column] arrays, 144-byte rows:
//     ldmatrix without bank conflicts; keys past the segment zero-filled). Per tile:
//       S = Q K^T   16 x 64 per warp, fp16 hi*hi + hi*lo + lo*hi (3 mma per product);
//       softmax     on the accumulators in f32: x = S kf 2^e_q scale log2(e) (keys past
//                   the segment -inf), row max over the quad by shuffles, running max
//                   m and the thread's part of the sum l, O rescaled by exp2(m_old - m);
//       O += P V    P = exp2(x - m) from the S accumulators split into bf16 hi + lo A
//                   fragments, V's B fragments by ldmatrix .trans, 3 mma per product.
//     O (f32 accumulators) / l is written for the rows in the segment. 128 threads,
//     168 registers, 74 KB of shared memory: 3 blocks an SM.
//   Accuracy: q K^T in fp16 with per-row scales is within ~2^-22 of the f32 product,
//   so the logits stay exact enough when they are large; P V keeps ~2^-16 relative
//   (bf16 pairs: fp16 would overflow for large v). Parity (H200, the test shapes,
//   max|Δ| over max|ref|): <= 5.1e-6 at soft logits, 6.6e-6 with logits up to ~20 (the
//   scalar kernel: <= 1.8e-6). bf16 hi/lo for q K^T as well measured 2.7e-5 on the sharp
//   case, one bf16 mma per product (no split) 1e-3..1.3e-2.
//   Speed (H200, T = 32400, one segment, 16 heads): 39.9 ms vs 179 ms for the scalar
//   kernel (the first version, k and v split inside the kernel with bf16 q K^T: 43 ms).
//   The bf16 form (session 35): 14.1 ms (305 TFLOP/s; 15.4 at 16 rows a warp) vs 38.7 ms
//   split, parity <= 3.6e-3 at soft logits and 1.3e-2 with logits up to ~20 (the
//   reference's own bf16 rounding).
// Both kernels: memory is O(T) (no score matrix), and every quantity of a row depends
// only on its segment's rows, in an order fixed by the segment alone: a segment's
// result is the same, bit for bit, whatever other segments the call holds. The scalar
// kernel sums q·k in column order per key and the softmax in key order, but folded per
// tile (the CPU reference normalises after a full pass): parity ~1e-6.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/cuda_vision.h"
#include "kernels/cuda/mma_bf16.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kQueries = 128;

__global__ void add_bias_kernel(float* __restrict__ out, const float* __restrict__ x,
                                const float* __restrict__ bias, int64_t n, int64_t d) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x)
    out[e] = x[e] + bias[e % d];
}

__global__ void gelu_kernel(float* __restrict__ out, const float* __restrict__ x, int64_t n) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[e];
    out[e] = v * 0.5f * (1.0f + erff(v * kSqrtHalf));
  }
}

// One thread per (row, head, pair i < D/2): reads both halves before writing (out may be x).
__global__ void rotary_kernel(float* out, const float* x, const float* __restrict__ cos,
                              const float* __restrict__ sin, int64_t rows, int64_t heads, int64_t d) {
  const int64_t half = d / 2, total = rows * heads * half;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % half, th = e / half, t = th / heads;
    const float* xr = x + th * d;
    const float* c = cos + t * d;
    const float* s = sin + t * d;
    const float x1 = xr[i], x2 = xr[i + half];
    float* o = out + th * d;
    o[i] = x1 * c[i] + (-x2) * s[i];
    o[i + half] = x2 * c[i + half] + x1 * s[i + half];
  }
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// The segment s of offsets[0..segs] as [start, end), clamped into [0, rows].
__device__ __forceinline__ void segment_bounds(const int32_t* __restrict__ offsets, int s, int64_t rows,
                                               int64_t& start, int64_t& end) {
  start = min64(max64(offsets[s], 0), rows);
  end = min64(max64(offsets[s + 1], start), rows);
}

// tile_start[s] = sum over s' < s of ceil(len(s') / tile_rows), s = 0..segs (one block).
__global__ void segment_tiles_kernel(int32_t* __restrict__ tile_start, const int32_t* __restrict__ offsets,
                                     int segs, int64_t rows, int tile_rows) {
  __shared__ int32_t buf[kThreads];
  __shared__ int32_t carry;
  if (threadIdx.x == 0) {
    carry = 0;
    tile_start[0] = 0;
  }
  for (int base = 0; base < segs; base += kThreads) {
    const int s = base + threadIdx.x;
    int32_t n = 0;
    if (s < segs) {
      int64_t s0, s1;
      segment_bounds(offsets, s, rows, s0, s1);
      n = static_cast<int32_t>((s1 - s0 + tile_rows - 1) / tile_rows);
    }
    buf[threadIdx.x] = n;
    __syncthreads();
    for (int o = 1; o < kThreads; o <<= 1) {  // inclusive Hillis-Steele scan
      const int32_t add = threadIdx.x >= o ? buf[threadIdx.x - o] : 0;
      __syncthreads();
      buf[threadIdx.x] += add;
      __syncthreads();
    }
    if (s < segs) tile_start[s + 1] = carry + buf[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == kThreads - 1) carry += buf[kThreads - 1];
    __syncthreads();
  }
}

// The segment of query tile b: the last segment whose first tile is <= b (empty
// segments own no tile); b < tile_start[segs].
__device__ __forceinline__ int tile_segment(const int32_t* __restrict__ tile_start, int segs, int b) {
  int lo = 0, hi = segs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <int DC, int KT>
__global__ void __launch_bounds__(kQueries)
    segment_attention_kernel(float* __restrict__ out, const float* __restrict__ q,
                             const float* __restrict__ k, const float* __restrict__ v,
                             const int32_t* __restrict__ offsets, const int32_t* __restrict__ tile_start,
                             int segs, int64_t rows, int heads, int d, float scale) {
  constexpr int kD4 = DC / 4;
  __shared__ float4 ks[KT * kD4];
  __shared__ float4 vs[KT * kD4];
  const int b = static_cast<int>(blockIdx.x), h = blockIdx.y;
  if (segs <= 0 || b >= tile_start[segs]) return;  // a spare block (the grid is an upper bound)
  const int lo = tile_segment(tile_start, segs, b);
  int64_t s0, s1;
  segment_bounds(offsets, lo, rows, s0, s1);
  const int64_t t = s0 + int64_t(b - tile_start[lo]) * kQueries + threadIdx.x;
  const bool live = t < s1;
  const int64_t pitch = int64_t(heads) * d;  // elements between consecutive rows

  float qr[DC], acc[DC];
#pragma unroll
  for (int i = 0; i < DC; ++i) {
    qr[i] = live && i < d ? q[t * pitch + int64_t(h) * d + i] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t base = s0; base < s1; base += KT) {
    __syncthreads();  // the previous tile is consumed
    for (int e = threadIdx.x; e < KT * kD4; e += kQueries) {
      const int jj = e / kD4, c = (e % kD4) * 4;
      const int64_t key = base + jj;
      float kk[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (key < s1) {
        const int64_t at = key * pitch + int64_t(h) * d;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (c + u < d) {
            kk[u] = k[at + c + u];
            vv[u] = v[at + c + u];
          }
        }
      }
      ks[e] = make_float4(kk[0], kk[1], kk[2], kk[3]);
      vs[e] = make_float4(vv[0], vv[1], vv[2], vv[3]);
    }
    __syncthreads();
    // Scores of the tile's KT keys: column-outer, so the KT sums are independent FMA
    // chains (each key's sum still runs in column order) and a q column is loaded once.
    float s[KT];
#pragma unroll
    for (int jj = 0; jj < KT; ++jj) s[jj] = 0.0f;
#pragma unroll
    for (int c4 = 0; c4 < kD4; ++c4) {
#pragma unroll
      for (int jj = 0; jj < KT; ++jj) {
        const float4 kk = ks[jj * kD4 + c4];
        s[jj] = fmaf(qr[4 * c4], kk.x, s[jj]);
        s[jj] = fmaf(qr[4 * c4 + 1], kk.y, s[jj]);
        s[jj] = fmaf(qr[4 * c4 + 2], kk.z, s[jj]);
        s[jj] = fmaf(qr[4 * c4 + 3], kk.w, s[jj]);
      }
    }
    float mt = m;
#pragma unroll
    for (int jj = 0; jj < KT; ++jj) {
      s[jj] = base + jj < s1 ? s[jj] * scale : -INFINITY;
      mt = fmaxf(mt, s[jj]);
    }
    const float alpha = expf(m - mt);  // m = -inf (the first tile): 0; mt is finite (key s0 + ... < s1)
    l *= alpha;
#pragma unroll
    for (int i = 0; i < DC; ++i) acc[i] *= alpha;
#pragma unroll
    for (int jj = 0; jj < KT; ++jj) {
      const float p = expf(s[jj] - mt);  // past the segment: exp(-inf) = 0
      l += p;
#pragma unroll
      for (int c4 = 0; c4 < kD4; ++c4) {
        const float4 vv = vs[jj * kD4 + c4];
        acc[4 * c4] = fmaf(p, vv.x, acc[4 * c4]);
        acc[4 * c4 + 1] = fmaf(p, vv.y, acc[4 * c4 + 1]);
        acc[4 * c4 + 2] = fmaf(p, vv.z, acc[4 * c4 + 2]);
        acc[4 * c4 + 3] = fmaf(p, vv.w, acc[4 * c4 + 3]);
      }
    }
    m = mt;
  }
  if (!live) return;
  const float inv = 1.0f / l;
  float* o = out + t * pitch + int64_t(h) * d;
#pragma unroll
  for (int i = 0; i < DC; ++i)
    if (i < d) o[i] = acc[i] * inv;
}

template <int DC, int KT>
void launch_segment_attention(CudaContext& ctx, float* out, const float* q, const float* k, const float* v,
                              const int32_t* offsets, const int32_t* tile_start, int segs, int64_t rows,
                              int heads, int d, float scale) {
  const int64_t blocks = (rows + kQueries - 1) / kQueries + segs;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
  segment_attention_kernel<DC, KT>
      <<<grid, kQueries, 0, ctx.stream>>>(out, q, k, v, offsets, tile_start, segs, rows, heads, d, scale);
}

// ---- the tensor-core kernels (D == 64) ---------------------------------------------
constexpr int kMmaThreads = 128;   // 4 warps, 16 query rows each
constexpr int kMmaKeys = 64;       // keys per staged tile
constexpr int kMmaD = 64;          // the head dim the kernels take
constexpr int kMmaLd = kMmaD + 8;  // 16-bit row stride of a staged tile (144 B: ldmatrix without conflicts)
constexpr int kMmaTile = kMmaKeys * kMmaLd;

// Two f32 values as packed bf16 pairs: hi = bf16(x), lo = bf16(x - hi).
__device__ __forceinline__ void split2(float x, float y, uint32_t& hi, uint32_t& lo) {
  const Bf16Split a = split_bf16(x), b = split_bf16(y);
  hi = pack_bf16(a.hi, b.hi);
  lo = pack_bf16(a.lo, b.lo);
}

// The same in fp16 (11 significant bits each, 22 together, for |x| well inside fp16's range).
__device__ __forceinline__ void split2_f16(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half a = __float2half_rn(x), b = __float2half_rn(y);
  const __half c = __float2half_rn(x - __half2float(a)), d = __float2half_rn(y - __half2float(b));
  hi = static_cast<uint32_t>(__half_as_ushort(a)) | (static_cast<uint32_t>(__half_as_ushort(b)) << 16);
  lo = static_cast<uint32_t>(__half_as_ushort(c)) | (static_cast<uint32_t>(__half_as_ushort(d)) << 16);
}

// 2^x (relative error ~2^-22; results below 2^-126 flush to 0, exp2(-inf) = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The e with mx * 2^-e in [1, 2) (mx > 0 finite; -1 for mx = 0).
__device__ __forceinline__ int scale_exponent(float mx) {
  int e;
  frexpf(mx, &e);
  return e - 1;
}

// 16-byte (4-byte) copy to shared memory; zeros when !full (src must still be a valid address).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(full ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool full) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(full ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The operands of the tensor-core kernel, a half-warp per (row, head) (16 threads x 4
// columns): k scaled by 2^-e (e: its largest magnitude into [1, 2); exact) and split
// into fp16 hi + lo, kf[h][t] = 2^e; v split into bf16 hi + lo. Elementwise per (row,
// head): a segment's operands do not depend on the other rows.
__global__ void __launch_bounds__(kThreads)
    segment_kv_split_kernel(uint2* __restrict__ kh, uint2* __restrict__ kl, float* __restrict__ kf,
                            uint2* __restrict__ vh, uint2* __restrict__ vl, const float4* __restrict__ k,
                            const float4* __restrict__ v, int64_t rows, int heads) {
  const int64_t items = rows * heads, stride = int64_t(gridDim.x) * (kThreads / 16);
  const int c = threadIdx.x & 15;
  // base is uniform over a warp (two items per warp), so all lanes reach the shuffles.
  for (int64_t base = (int64_t(blockIdx.x) * kThreads + (threadIdx.x & ~31)) / 16; base < items;
       base += stride) {
    const int64_t item = base + ((threadIdx.x >> 4) & 1), at = item * 16 + c;
    const bool live = item < items;
    const float4 a = live ? k[at] : make_float4(0.f, 0.f, 0.f, 0.f);
    float mx = fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w)));
#pragma unroll
    for (int o = 8; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (!live) continue;
    const int e = scale_exponent(mx);
    uint32_t h0, h1, l0, l1;
    split2_f16(ldexpf(a.x, -e), ldexpf(a.y, -e), h0, l0);
    split2_f16(ldexpf(a.z, -e), ldexpf(a.w, -e), h1, l1);
    kh[at] = make_uint2(h0, h1);
    kl[at] = make_uint2(l0, l1);
    if (c == 0) kf[(item % heads) * rows + item / heads] = ldexpf(1.0f, e);
    const float4 b = v[at];
    split2(b.x, b.y, h0, l0);
    split2(b.z, b.w, h1, l1);
    vh[at] = make_uint2(h0, h1);
    vl[at] = make_uint2(l0, l1);
  }
}

// The bf16 form's operands: k and v rounded to bf16 (elementwise, 4 values a thread).
__global__ void __launch_bounds__(kThreads)
    segment_kv_bf16_kernel(uint2* __restrict__ kb, uint2* __restrict__ vb, const float4* __restrict__ k,
                           const float4* __restrict__ v, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += int64_t(gridDim.x) * kThreads) {
    const float4 a = k[i], b = v[i];
    kb[i] = make_uint2(round_bf16x2(a.x, a.y), round_bf16x2(a.z, a.w));
    vb[i] = make_uint2(round_bf16x2(b.x, b.y), round_bf16x2(b.z, b.w));
  }
}

// One staged key tile ([key][column] arrays). Split: kh, kl hold fp16 bits of the scaled
// keys (kf their scales), vh, vl bf16 hi + lo; else kh, vh hold k and v in bf16.
template <bool kSplit>
struct MmaStage {
  __nv_bfloat16 kh[kMmaTile], kl[kMmaTile], vh[kMmaTile], vl[kMmaTile];
  float kf[kMmaKeys];
};
template <>
struct MmaStage<false> {
  __nv_bfloat16 kh[kMmaTile], vh[kMmaTile];
};
// Double-buffered: 74,240 B (split, 3 blocks an SM), 36,864 B (bf16).
template <bool kSplit>
constexpr int kMmaSmem = 2 * static_cast<int>(sizeof(MmaStage<kSplit>));

// Query rows per warp: 16 per row tile, kMmaRowTiles row tiles; each K and V fragment loaded
// from shared memory serves every row tile (bf16 at 2 row tiles, 234 registers, 2 blocks an
// SM: 14.1 vs 15.4 ms at 1 row tile, 4 blocks, H200 run11s35; the same bits).
template <bool kSplit>
constexpr int kMmaRowTiles = kSplit ? 1 : 2;
// Query rows per block (one tile of one segment).
template <bool kSplit>
constexpr int kMmaBlockRows = kMmaThreads / 32 * 16 * kMmaRowTiles<kSplit>;

// One row tile of a warp: its rows g (index 0) and g + 8 (index 1), their q as A fragments,
// the softmax scale fq, the running max m (log2 units), the thread's part of the running
// sum l (its 16 columns of each key tile), O in f32.
struct RowTile {
  int64_t r0, r1;
  bool live0, live1;
  uint32_t qh[4][4], ql[4][4];
  float fq0, fq1, m0, m1, l0, l1;
  float o[8][4];
};

// kSplit: the hi/lo products (3 mma each, ~2^-16 relative); else q, k, P and v in bf16, one
// mma per product, as the reference's bf16 attention rounds them.
template <bool kSplit>
__global__ void __launch_bounds__(kMmaThreads, kSplit ? 3 : 2)
    segment_attention_mma_kernel(float* __restrict__ out, const float* __restrict__ q,
                                 const __nv_bfloat16* __restrict__ kv, int64_t part,
                                 const float* __restrict__ kf, const int32_t* __restrict__ offsets,
                                 const int32_t* __restrict__ tile_start, int segs, int64_t rows, int heads,
                                 float scale_log2) {
  // kv: the operands ([T][H][D] 16-bit each, `part` elements apart): split kh, kl, vh, vl;
  // else k, v.
  constexpr int MT = kMmaRowTiles<kSplit>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  using Stage = MmaStage<kSplit>;
  Stage* st = reinterpret_cast<Stage*>(smem_raw);
  const int b = static_cast<int>(blockIdx.x), h = blockIdx.y;
  if (segs <= 0 || b >= tile_start[segs]) return;  // a spare block (the grid is an upper bound)
  const int seg = tile_segment(tile_start, segs, b);
  int64_t s0, s1;
  segment_bounds(offsets, seg, rows, s0, s1);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int64_t pitch = int64_t(heads) * kMmaD, hoff = int64_t(h) * kMmaD;
  RowTile rt[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    rt[mt].r0 = s0 + int64_t(b - tile_start[seg]) * kMmaBlockRows<kSplit> + (warp * MT + mt) * 16 + g;
    rt[mt].r1 = rt[mt].r0 + 8;
    rt[mt].live0 = rt[mt].r0 < s1;
    rt[mt].live1 = rt[mt].r1 < s1;
  }

  // Key tile `base` into stage `stage`: 4 (bf16: 2) arrays x 64 keys x 8 chunks of 16 B
  // (16 or 8 copies a thread) and (split) 64 key factors; keys past the segment are zeros.
  auto issue = [&](int stage, int64_t base) {
    Stage& S = st[stage];
#pragma unroll
    for (int i = 0; i < kMmaKeys * 8 / kMmaThreads; ++i) {
      const int e = tid + i * kMmaThreads, j = e >> 3, c = (e & 7) * 8, so = j * kMmaLd + c;
      const bool ok = base + j < s1;
      const __nv_bfloat16* src = kv + (ok ? base + j : s0) * pitch + hoff + c;
      cp_async16_zfill(&S.kh[so], src, ok);
      if constexpr (kSplit) {
        cp_async16_zfill(&S.kl[so], src + part, ok);
        cp_async16_zfill(&S.vh[so], src + 2 * part, ok);
        cp_async16_zfill(&S.vl[so], src + 3 * part, ok);
      } else {
        cp_async16_zfill(&S.vh[so], src + part, ok);
      }
    }
    if constexpr (kSplit) {
      if (tid < kMmaKeys) {
        const bool ok = base + tid < s1;
        cp_async4_zfill(&S.kf[tid], kf + int64_t(h) * rows + (ok ? base + tid : s0), ok);
      }
    }
  };
  issue(0, s0);
  cp_async_commit();

  // Each row tile's 16 query rows as A fragments (columns kk*16..kk*16+15; rows past the
  // segment zero): split, each row scaled by 2^-e into [1, 2) and split into fp16 hi + lo,
  // fq = 2^e scale log2(e); else rounded to bf16, fq = scale log2(e).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    RowTile& R = rt[mt];
    float2 x[4][2][2];  // [kk][half][row]
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int c = kk * 16 + half * 8 + 2 * tq;
        x[kk][half][0] =
            R.live0 ? *reinterpret_cast<const float2*>(q + R.r0 * pitch + hoff + c) : make_float2(0.f, 0.f);
        x[kk][half][1] =
            R.live1 ? *reinterpret_cast<const float2*>(q + R.r1 * pitch + hoff + c) : make_float2(0.f, 0.f);
      }
    }
    if constexpr (kSplit) {
      float mx0 = 0.0f, mx1 = 0.0f;  // the rows' largest magnitudes
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          mx0 = fmaxf(mx0, fmaxf(fabsf(x[kk][half][0].x), fabsf(x[kk][half][0].y)));
          mx1 = fmaxf(mx1, fmaxf(fabsf(x[kk][half][1].x), fabsf(x[kk][half][1].y)));
        }
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      const int e0 = scale_exponent(mx0), e1 = scale_exponent(mx1);
      R.fq0 = ldexpf(scale_log2, e0);
      R.fq1 = ldexpf(scale_log2, e1);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float2 a = x[kk][half][0], c = x[kk][half][1];
          split2_f16(ldexpf(a.x, -e0), ldexpf(a.y, -e0), R.qh[kk][half * 2], R.ql[kk][half * 2]);
          split2_f16(ldexpf(c.x, -e1), ldexpf(c.y, -e1), R.qh[kk][half * 2 + 1], R.ql[kk][half * 2 + 1]);
        }
      }
    } else {
      R.fq0 = R.fq1 = scale_log2;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          R.qh[kk][half * 2] = round_bf16x2(x[kk][half][0].x, x[kk][half][0].y);
          R.qh[kk][half * 2 + 1] = round_bf16x2(x[kk][half][1].x, x[kk][half][1].y);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) R.o[n][0] = R.o[n][1] = R.o[n][2] = R.o[n][3] = 0.0f;
    R.m0 = R.m1 = -INFINITY;
    R.l0 = R.l1 = 0.0f;
  }

  int stage = 0;
  for (int64_t base = s0; base < s1; base += kMmaKeys, stage ^= 1) {
    if (base + kMmaKeys < s1) issue(stage ^ 1, base + kMmaKeys);
    cp_async_commit();  // always: one group per tile
    cp_async_wait<1>();  // this tile's copies have landed (the next tile's may be in flight)
    __syncthreads();     // ... everyone's
    const Stage& S = st[stage];
    const int valid = static_cast<int>(min64(s1 - base, kMmaKeys));

    // S = Q K^T: 16 rows x 64 keys per row tile (n8 tiles of keys 8n..8n+7), each K
    // fragment used by every row tile; split: of the scaled operands, hi*hi + hi*lo + lo*hi.
    float s[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bh[4];
        load_b_frags_nk(bh, &S.kh[np * 16 * kMmaLd + kk * 16], kMmaLd, lane);
        if constexpr (kSplit) {
          uint32_t bl[4];
          load_b_frags_nk(bl, &S.kl[np * 16 * kMmaLd + kk * 16], kMmaLd, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const RowTile& R = rt[mt];
            mma_f16_16816(s[mt][2 * np], R.ql[kk], bh[0], bh[1]);
            mma_f16_16816(s[mt][2 * np], R.qh[kk], bl[0], bl[1]);
            mma_f16_16816(s[mt][2 * np], R.qh[kk], bh[0], bh[1]);
            mma_f16_16816(s[mt][2 * np + 1], R.ql[kk], bh[2], bh[3]);
            mma_f16_16816(s[mt][2 * np + 1], R.qh[kk], bl[2], bl[3]);
            mma_f16_16816(s[mt][2 * np + 1], R.qh[kk], bh[2], bh[3]);
          }
        } else {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(s[mt][2 * np], rt[mt].qh[kk], bh[0], bh[1]);
            mma_bf16_16816(s[mt][2 * np + 1], rt[mt].qh[kk], bh[2], bh[3]);
          }
        }
      }
    }

    // Online softmax in f32, per row tile, in log2 units: split, the scores scaled first
    // (x = S kf fq: the operands' scales back, times scale log2(e)); bf16, S fq folded into
    // the exponent's FMA (fq > 0, so the row max of S scaled is max(S) fq, the same value).
    // Keys past the segment -inf; the row max over the quad (the four threads that hold a
    // row's 64 columns).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      RowTile& R = rt[mt];
      float(&x)[8][4] = s[mt];
      if constexpr (kSplit) {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const float2 f = *reinterpret_cast<const float2*>(&S.kf[n * 8 + 2 * tq]);
          x[n][0] = x[n][0] * f.x * R.fq0;
          x[n][1] = x[n][1] * f.y * R.fq0;
          x[n][2] = x[n][2] * f.x * R.fq1;
          x[n][3] = x[n][3] * f.y * R.fq1;
        }
      }
      if (valid < kMmaKeys) {  // the segment's last, partial tile
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (n * 8 + 2 * tq + e >= valid) x[n][e] = x[n][2 + e] = -INFINITY;
          }
        }
      }
      float mx0 = kSplit ? R.m0 : -INFINITY, mx1 = kSplit ? R.m1 : -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        mx0 = fmaxf(mx0, fmaxf(x[n][0], x[n][1]));
        mx1 = fmaxf(mx1, fmaxf(x[n][2], x[n][3]));
      }
#pragma unroll
      for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
      }
      if constexpr (!kSplit) {
        mx0 = fmaxf(R.m0, mx0 * R.fq0);
        mx1 = fmaxf(R.m1, mx1 * R.fq1);
      }
      // mx is finite (key `base` is in the segment); m = -inf (the first tile) gives 0.
      const float a0 = fast_exp2(R.m0 - mx0), a1 = fast_exp2(R.m1 - mx1);
      R.m0 = mx0;
      R.m1 = mx1;
      R.l0 *= a0;
      R.l1 *= a1;
      // O rescaled only where the row's running max moved (else alpha is exactly 1: the
      // same bits without the 16 multiplies).
      if (a0 != 1.0f) {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          R.o[n][0] *= a0;
          R.o[n][1] *= a0;
        }
      }
      if (a1 != 1.0f) {
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          R.o[n][2] *= a1;
          R.o[n][3] *= a1;
        }
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          // past the segment: 0
          x[n][e] = fast_exp2(kSplit ? x[n][e] - R.m0 : fmaf(x[n][e], R.fq0, -R.m0));
          x[n][2 + e] = fast_exp2(kSplit ? x[n][2 + e] - R.m1 : fmaf(x[n][2 + e], R.fq1, -R.m1));
          R.l0 += x[n][e];
          R.l1 += x[n][2 + e];
        }
      }
    }

    // O += P V (split: bf16 hi*hi + hi*lo + lo*hi; else P rounded to bf16, one mma; the sum
    // l keeps P in f32): P's A fragment for keys 16kk.. is the accumulators of n8 tiles 2kk,
    // 2kk + 1; V's B fragments by ldmatrix .trans from the [key][column] tile, each used by
    // every row tile.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t ph[MT][4], pl[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float(&x)[8][4] = s[mt];
        if constexpr (kSplit) {
          split2(x[2 * kk][0], x[2 * kk][1], ph[mt][0], pl[mt][0]);
          split2(x[2 * kk][2], x[2 * kk][3], ph[mt][1], pl[mt][1]);
          split2(x[2 * kk + 1][0], x[2 * kk + 1][1], ph[mt][2], pl[mt][2]);
          split2(x[2 * kk + 1][2], x[2 * kk + 1][3], ph[mt][3], pl[mt][3]);
        } else {
          ph[mt][0] = round_bf16x2(x[2 * kk][0], x[2 * kk][1]);
          ph[mt][1] = round_bf16x2(x[2 * kk][2], x[2 * kk][3]);
          ph[mt][2] = round_bf16x2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
          ph[mt][3] = round_bf16x2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
        }
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bh[4];
        load_b_frags_kn(bh, &S.vh[kk * 16 * kMmaLd + np * 16], kMmaLd, lane);
        if constexpr (kSplit) {
          uint32_t bl[4];
          load_b_frags_kn(bl, &S.vl[kk * 16 * kMmaLd + np * 16], kMmaLd, lane);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            float(&o)[8][4] = rt[mt].o;
            mma_bf16_16816(o[2 * np], pl[mt], bh[0], bh[1]);
            mma_bf16_16816(o[2 * np], ph[mt], bl[0], bl[1]);
            mma_bf16_16816(o[2 * np], ph[mt], bh[0], bh[1]);
            mma_bf16_16816(o[2 * np + 1], pl[mt], bh[2], bh[3]);
            mma_bf16_16816(o[2 * np + 1], ph[mt], bl[2], bl[3]);
            mma_bf16_16816(o[2 * np + 1], ph[mt], bh[2], bh[3]);
          }
        } else {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16_16816(rt[mt].o[2 * np], ph[mt], bh[0], bh[1]);
            mma_bf16_16816(rt[mt].o[2 * np + 1], ph[mt], bh[2], bh[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage is consumed before the next iteration refills it
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    RowTile& R = rt[mt];
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
      R.l0 += __shfl_xor_sync(0xffffffffu, R.l0, o2);
      R.l1 += __shfl_xor_sync(0xffffffffu, R.l1, o2);
    }
    const float inv0 = 1.0f / R.l0, inv1 = 1.0f / R.l1;
    if (R.live0) {
      float* p = out + R.r0 * pitch + hoff + 2 * tq;
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<float2*>(p + n * 8) = make_float2(R.o[n][0] * inv0, R.o[n][1] * inv0);
    }
    if (R.live1) {
      float* p = out + R.r1 * pitch + hoff + 2 * tq;
#pragma unroll
      for (int n = 0; n < 8; ++n)
        *reinterpret_cast<float2*>(p + n * 8) = make_float2(R.o[n][2] * inv1, R.o[n][3] * inv1);
    }
  }
}

// The operands (split: kh, kl, vh, vl and the key scales kf; else k, v in bf16) into scratch,
// then the kernel of that form.
template <bool kSplit>
void launch_segment_attention_mma(CudaContext& ctx, float* out, const float* q, const float* k,
                                  const float* v, const int32_t* offsets, const int32_t* tile_start, int segs,
                                  int64_t rows, int heads, float scale) {
  const int64_t n = rows * heads * kMmaD;  // elements of k (and of v)
  const int64_t operand_bytes = kSplit ? n * 8 + rows * heads * static_cast<int64_t>(sizeof(float)) : n * 4;
  Tensor ops = ctx.scratch(operand_bytes);
  auto* base = static_cast<unsigned char*>(ops.raw());
  auto* kv = reinterpret_cast<__nv_bfloat16*>(base);
  float* kf = nullptr;
  if constexpr (kSplit) {
    kf = reinterpret_cast<float*>(base + n * 8);
    const int64_t split_blocks =
        std::min<int64_t>((rows * heads + kThreads / 16 - 1) / (kThreads / 16), 8192);
    segment_kv_split_kernel<<<static_cast<unsigned>(split_blocks), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<uint2*>(base), reinterpret_cast<uint2*>(base + n * 2), kf,
        reinterpret_cast<uint2*>(base + n * 4), reinterpret_cast<uint2*>(base + n * 6),
        reinterpret_cast<const float4*>(k), reinterpret_cast<const float4*>(v), rows, heads);
  } else {
    segment_kv_bf16_kernel<<<grid_1d(n / 4, kThreads), kThreads, 0, ctx.stream>>>(
        reinterpret_cast<uint2*>(base), reinterpret_cast<uint2*>(base + n * 2),
        reinterpret_cast<const float4*>(k), reinterpret_cast<const float4*>(v), n / 4);
  }
  check_launch("segment_attention operands");
  for (const auto [attr, value] : {std::pair{cudaFuncAttributeMaxDynamicSharedMemorySize, kMmaSmem<kSplit>},
                                   std::pair{cudaFuncAttributePreferredSharedMemoryCarveout,
                                             static_cast<int>(cudaSharedmemCarveoutMaxShared)}}) {
    const Status st = cuda_status(cudaFuncSetAttribute(segment_attention_mma_kernel<kSplit>, attr, value),
                                  "segment_attention");
    if (!st.is_ok()) throw StatusError(st);
  }
  const int64_t blocks = (rows + kMmaBlockRows<kSplit> - 1) / kMmaBlockRows<kSplit> + segs;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
  const float scale_log2 = scale * 1.44269504088896340736f;  // exp(x) = exp2(x log2 e)
  segment_attention_mma_kernel<kSplit><<<grid, kMmaThreads, kMmaSmem<kSplit>, ctx.stream>>>(
      out, q, kv, n, kf, offsets, tile_start, segs, rows, heads, scale_log2);
}

// Which kernel takes D = 64 (TF_SEGMENT_ATTENTION_MMA, read at each call: the tests switch
// it): the tensor-core one in bf16 (default), `split` its hi/lo form, `0` the scalar kernel.
enum class MmaForm { kBf16, kSplit, kScalar };
MmaForm mma_form() {
  const char* e = std::getenv("TF_SEGMENT_ATTENTION_MMA");
  const std::string v = e ? e : "";
  return v == "0" ? MmaForm::kScalar : v == "split" ? MmaForm::kSplit : MmaForm::kBf16;
}

[[noreturn]] void fail(const std::string& what) { throw StatusError(invalid_argument(what)); }

}  // namespace

void add_bias(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& bias) {
  check_dev(ctx, "add_bias x", x, DType::kF32);
  check_dev(ctx, "add_bias out", out, DType::kF32, x.numel());
  check_dev(ctx, "add_bias bias", bias, DType::kF32);
  const int64_t d = bias.numel();
  if (x.dim() < 1 || x.size(-1) != d)
    fail("add_bias: bias " + bias.describe() + " does not match the rows of " + x.describe());
  if (x.numel() == 0) return;
  add_bias_kernel<<<grid_1d(x.numel(), kThreads), kThreads, 0, ctx.stream>>>(
      out.data<float>(), x.data<float>(), bias.data<float>(), x.numel(), d);
  check_launch("add_bias");
}

void gelu(CudaContext& ctx, Tensor& out, const Tensor& x) {
  check_dev(ctx, "gelu x", x, DType::kF32);
  check_dev(ctx, "gelu out", out, DType::kF32, x.numel());
  if (x.numel() == 0) return;
  gelu_kernel<<<grid_1d(x.numel(), kThreads), kThreads, 0, ctx.stream>>>(out.data<float>(), x.data<float>(),
                                                                         x.numel());
  check_launch("gelu");
}

void rotary(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_dev(ctx, "rotary x", x, DType::kF32);
  check_dev(ctx, "rotary out", out, DType::kF32, x.numel());
  check_dev(ctx, "rotary cos", cos, DType::kF32);
  check_dev(ctx, "rotary sin", sin, DType::kF32, cos.numel());
  if (cos.dim() != 2 || cos.size(1) % 2 != 0)
    fail("rotary: cos must be [T, D] with D even, got " + cos.describe());
  const int64_t rows = cos.size(0), d = cos.size(1);
  if (rows * d == 0 ? x.numel() != 0 : x.numel() % (rows * d) != 0)
    fail("rotary: x " + x.describe() + " is not [T, H, D] for tables " + cos.describe());
  if (x.numel() == 0) return;
  const int64_t heads = x.numel() / (rows * d);
  rotary_kernel<<<grid_1d(x.numel() / 2, kThreads), kThreads, 0, ctx.stream>>>(
      out.data<float>(), x.data<float>(), cos.data<float>(), sin.data<float>(), rows, heads, d);
  check_launch("rotary");
}

void segment_attention(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& offsets, float scale) {
  check_dev(ctx, "segment_attention q", q, DType::kF32);
  if (q.dim() != 3) fail("segment_attention: q must be [T, H, D], got " + q.describe());
  const int64_t rows = q.size(0), heads = q.size(1), d = q.size(2);
  check_dev(ctx, "segment_attention k", k, DType::kF32, q.numel());
  check_dev(ctx, "segment_attention v", v, DType::kF32, q.numel());
  check_dev(ctx, "segment_attention out", out, DType::kF32, q.numel());
  check_dev(ctx, "segment_attention offsets", offsets, DType::kI32);
  if (offsets.numel() < 1)
    fail("segment_attention: offsets must hold at least one entry (S + 1 for S segments)");
  if (d > 128)
    throw StatusError(
        unimplemented("segment_attention: head dim " + std::to_string(d) + " (at most 128 on CUDA)"));
  if (heads > 65535) fail("segment_attention: more than 65535 heads");
  if (rows + offsets.numel() > (int64_t{1} << 30))
    fail("segment_attention: more than 2^30 rows and segments");
  if (q.numel() == 0) return;
  const int segs = static_cast<int>(offsets.numel() - 1);
  if (segs == 0) return;
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  const MmaForm form = mma_form();
  const bool mma = d == kMmaD && aligned(q.raw(), 8) && aligned(out.raw(), 8) && aligned(k.raw(), 16) &&
                   aligned(v.raw(), 16) && form != MmaForm::kScalar;
  Tensor tiles = ctx.scratch(static_cast<int64_t>(segs + 1) * static_cast<int64_t>(sizeof(int32_t)));
  int32_t* tile_start = static_cast<int32_t*>(tiles.raw());
  const int32_t* off = offsets.data<int32_t>();
  // Query rows per tile of the kernel that runs.
  int tile_rows = kQueries;
  if (mma) tile_rows = form == MmaForm::kSplit ? kMmaBlockRows<true> : kMmaBlockRows<false>;
  segment_tiles_kernel<<<1, kThreads, 0, ctx.stream>>>(tile_start, off, segs, rows, tile_rows);
  check_launch("segment_attention tiles");
  float* o = out.data<float>();
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  const int h = static_cast<int>(heads), di = static_cast<int>(d);
  if (mma && form == MmaForm::kSplit)
    launch_segment_attention_mma<true>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, scale);
  else if (mma)
    launch_segment_attention_mma<false>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, scale);
  else if (d <= 16)
    launch_segment_attention<16, 32>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, di, scale);
  else if (d <= 32)
    launch_segment_attention<32, 32>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, di, scale);
  else if (d <= 64)
    launch_segment_attention<64, 32>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, di, scale);
  else
    launch_segment_attention<128, 16>(ctx, o, qp, kp, vp, off, tile_start, segs, rows, h, di, scale);
  check_launch("segment_attention");
}

}  // namespace tf::cuda
