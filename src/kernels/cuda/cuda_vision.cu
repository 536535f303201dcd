// The bidirectional-encoder ops on the GPU: a bias row added to every row, the exact
// (erf) GELU, rotary embedding from per-row cos/sin tables and attention inside
// segments of rows (Ops::segment_attention).
//
// segment_attention design (correctness first, no tensor cores), two launches:
//  1. segment_tiles_kernel (one block): tile_start[s] = the number of query tiles
//     (kQueries rows each) of the segments before s, a scan over the device offsets.
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
// Memory is O(T) (no score matrix), and every quantity of a row depends only on its
// segment's rows, in an order fixed by the segment alone: a segment's result is the
// same, bit for bit, whatever other segments the call holds. q·k is summed in column
// order per key and the softmax in key order, but folded per tile (the CPU reference
// normalises after a full pass): parity ~1e-6.
//
// Register budget: qr[DC] + acc[DC] + s[KT] floats per thread; DC = 64 (the model's
// head_dim) with KT = 32 takes 254 registers without spills at 128 threads a block
// (DC = 128 spills some: correct, slower).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/cuda_vision.h"

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

// tile_start[s] = sum over s' < s of ceil(len(s') / kQueries), s = 0..segs (one block).
__global__ void segment_tiles_kernel(int32_t* __restrict__ tile_start, const int32_t* __restrict__ offsets,
                                     int segs, int64_t rows) {
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
      n = static_cast<int32_t>((s1 - s0 + kQueries - 1) / kQueries);
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
  int lo = 0, hi = segs - 1;  // the last segment whose first tile is <= b (empty segments own no tile)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
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
  Tensor tiles = ctx.scratch(static_cast<int64_t>(segs + 1) * static_cast<int64_t>(sizeof(int32_t)));
  int32_t* tile_start = static_cast<int32_t*>(tiles.raw());
  const int32_t* off = offsets.data<int32_t>();
  segment_tiles_kernel<<<1, kThreads, 0, ctx.stream>>>(tile_start, off, segs, rows);
  check_launch("segment_attention tiles");
  float* o = out.data<float>();
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  const int h = static_cast<int>(heads), di = static_cast<int>(d);
  if (d <= 16)
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
