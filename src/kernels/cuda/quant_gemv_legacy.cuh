// The first quantized GEMV kernel (kept for side-by-side timing: QuantGemvArgs::legacy;
// the lead may delete it once the streaming kernel in quant_gemv.cu has been measured).
// Included by quant_gemv.cu only.
//
// 128 output rows per block of 4 warps, K split into slices of up to 15 chunks over
// blocks; the x tile in shared memory holds, per (x row, chunk, t), the lane's pairs of
// x split into bf16 hi / mid / lo (8 words each); three MMAs per 16 K; slices summed by a
// second kernel (or the last block of each row block). Measured on the H200 (run3):
// 4096->8192 m=1 20.5 us = 21% of HBM: only two chunks in flight per lane, the x
// tile staged by every block, and the second kernel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_gemv_frag.cuh"

namespace tf::cuda::legacy_gemv {
namespace {

using qfrag::bf16x2_bits;
using qfrag::fp8_pair;
using qfrag::mma_16816;
using qfrag::pair_elem;
using qfrag::q4_pair;

constexpr int kWarps = 4;                 // warps per block, each a different 32 rows
constexpr int kTiles = 2;                 // 16-row MMA tiles per warp
constexpr int kUnitWords = 24;            // x tile words per (x row, chunk, t): 3 terms x 8 pairs
constexpr int kRowPadWords = 4;           // keeps x rows g and g+1 in different banks
static_assert(kWarps * kTiles * 16 == kQuantBlockRows, "a block covers one fp8 scale row");


struct Params {
  float* out;
  int64_t ldo;
  const float* x;
  int64_t ldx;
  const uint8_t* codes;
  const void* scales;
  float* ws;
  unsigned* counters;  // per row block (fused slice sum), null: a second kernel sums
  int64_t m, n, k, chunks, cps, slices;
  bool accumulate, xvec, wvec;
};

// x rows 0..7 (zeros from m on) of chunks [c0, c0 + nck) into the tile: per (row, chunk,
// t) 8 hi pairs, 8 mid pairs, 8 lo pairs of x[16t + pair_elem(j, h)].
template <MatrixFormat F>
__device__ void stage_x(uint32_t* xs, int row_words, const Params& p, int64_t c0, int nck) {
  const int units = kQuantGemvRows * nck * 4;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    const int r = u / (nck * 4), rem = u % (nck * 4), c = rem >> 2, t = rem & 3;
    const int64_t k0 = (c0 + c) * kQuantChunk + 16 * t;
    float v[16];
    if (r < p.m) {
      const float* src = p.x + r * p.ldx + k0;
      if (p.xvec && k0 + 16 <= p.k) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float4 f = __ldg(reinterpret_cast<const float4*>(src) + q);
          v[4 * q] = f.x; v[4 * q + 1] = f.y; v[4 * q + 2] = f.z; v[4 * q + 3] = f.w;
        }
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = k0 + i < p.k ? __ldg(src + i) : 0.0f;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) v[i] = 0.0f;
    }
    uint32_t words[kUnitWords];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float a = v[pair_elem<F>(j, 0)], b = v[pair_elem<F>(j, 1)];
      const __nv_bfloat162 hi = __floats2bfloat162_rn(a, b);
      const float ra = a - __low2float(hi), rb = b - __high2float(hi);  // exact
      const __nv_bfloat162 mid = __floats2bfloat162_rn(ra, rb);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(ra - __low2float(mid), rb - __high2float(mid));
      words[j] = bf16x2_bits(hi);
      words[8 + j] = bf16x2_bits(mid);
      words[16 + j] = bf16x2_bits(lo);
    }
    uint4* dst = reinterpret_cast<uint4*>(xs + r * row_words + (c * 4 + t) * kUnitWords);
#pragma unroll
    for (int q = 0; q < kUnitWords / 4; ++q)
      dst[q] = make_uint4(words[4 * q], words[4 * q + 1], words[4 * q + 2], words[4 * q + 3]);
  }
}

// One lane's raw weights of one chunk: rows g and g+8 of each tile (q4 2 words each, fp8 4).
template <MatrixFormat F>
struct Raw {
  static constexpr int kWords = F == MatrixFormat::kQ4 ? 2 : 4;
  static constexpr int kScales = F == MatrixFormat::kQ4 ? kTiles * 2 : 1;
  uint32_t w[kTiles][2][kWords];
  float s[kScales];  // q4: scale of row (tile r, half h) at 2r + h; fp8: the block's, one for all
  __device__ float scale(int r, int h) const { return kScales == 1 ? s[0] : s[(2 * r + h) % kScales]; }
};

template <MatrixFormat F>
__device__ __forceinline__ void load_raw(Raw<F>& raw, const Params& p, int64_t row0, int64_t chunk, int t) {
  const int g = (threadIdx.x & 31) >> 2;
  if constexpr (F == MatrixFormat::kQ4) {
    const int64_t row_bytes = p.chunks * 32;
    const __half* sc = static_cast<const __half*>(p.scales);
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + 16 * r + 8 * h + g;
        if (row < p.n) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(p.codes + row * row_bytes + chunk * 32 + 8 * t));
          raw.w[r][h][0] = v.x;
          raw.w[r][h][1] = v.y;
          raw.s[2 * r + h] = __half2float(__ldg(sc + row * p.chunks + chunk));
        } else {
          raw.w[r][h][0] = raw.w[r][h][1] = 0x88888888u;  // q = 0
          raw.s[2 * r + h] = 0.0f;
        }
      }
  } else {
    const int64_t gc = (p.k + 127) / 128;
    raw.s[0] = __ldg(static_cast<const float*>(p.scales) + (row0 / 128) * gc + chunk / 2);
    const int64_t c0 = chunk * kQuantChunk + 16 * t;
#pragma unroll
    for (int r = 0; r < kTiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + 16 * r + 8 * h + g;
        uint32_t* w = raw.w[r][h];
        const uint8_t* src = p.codes + row * p.k + c0;
        if (row < p.n && p.wvec && c0 + 16 <= p.k) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
          w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t word = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
              if (row < p.n && c0 + 4 * q + b < p.k) word |= uint32_t(__ldg(src + 4 * q + b)) << (8 * b);
            w[q] = word;
          }
        }
      }
  }
}

template <MatrixFormat F>
__device__ __forceinline__ uint32_t weight_pair(const Raw<F>& raw, int r, int h, int j) {
  if constexpr (F == MatrixFormat::kQ4) {
    return q4_pair(raw.w[r][h][0], raw.w[r][h][1], j);
  } else {
    return fp8_pair(raw.w[r][h], j);
  }
}

// Chunks loaded ahead (raw registers in flight per lane: q4 2 x 16 bytes, fp8 2 x 32).
template <MatrixFormat F>
constexpr int chunks_per_step() { return 2; }

template <MatrixFormat F>
__global__ void __launch_bounds__(kWarps * 32, 4) quant_gemv_kernel(const Params p) {
  extern __shared__ uint4 smem_x[];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_x);
  constexpr int U = chunks_per_step<F>();
  const int64_t c0 = int64_t(blockIdx.y) * p.cps;
  const int nck = static_cast<int>(std::min<int64_t>(p.cps, p.chunks - c0));
  const int row_words = nck * 4 * kUnitWords + kRowPadWords;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * kQuantBlockRows + (threadIdx.x >> 5) * (16 * kTiles);

  // The first weights are in flight while the block stages x.
  Raw<F> raw[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < nck) load_raw<F>(raw[u], p, row0, c0 + u, t);
  stage_x<F>(xs, row_words, p, c0, nck);
  __syncthreads();

  float acc[kTiles][4];
#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;

  for (int c = 0; c < nck; c += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c + u >= nck) break;
      const uint4* bp = reinterpret_cast<const uint4*>(xs + g * row_words + ((c + u) * 4 + t) * kUnitWords);
      uint32_t b[kUnitWords];
#pragma unroll
      for (int q = 0; q < kUnitWords / 4; ++q) {
        const uint4 v = bp[q];
        b[4 * q] = v.x; b[4 * q + 1] = v.y; b[4 * q + 2] = v.z; b[4 * q + 3] = v.w;
      }
      // One accumulator chain per (tile, x term): 6 independent chains of 4 MMAs, so the
      // tensor-core latency overlaps; the chunk's sum is (hi + mid) + lo, then scaled.
      float part[kTiles][3][4];
#pragma unroll
      for (int r = 0; r < kTiles; ++r)
#pragma unroll
        for (int term = 0; term < 3; ++term)
#pragma unroll
          for (int i = 0; i < 4; ++i) part[r][term][i] = 0.0f;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        uint32_t a[kTiles][4];
#pragma unroll
        for (int r = 0; r < kTiles; ++r) {
          a[r][0] = weight_pair<F>(raw[u], r, 0, 2 * s);
          a[r][1] = weight_pair<F>(raw[u], r, 1, 2 * s);
          a[r][2] = weight_pair<F>(raw[u], r, 0, 2 * s + 1);
          a[r][3] = weight_pair<F>(raw[u], r, 1, 2 * s + 1);
        }
#pragma unroll
        for (int term = 0; term < 3; ++term)
#pragma unroll
          for (int r = 0; r < kTiles; ++r)
            mma_16816(part[r][term], a[r], b[8 * term + 2 * s], b[8 * term + 2 * s + 1]);
      }
#pragma unroll
      for (int r = 0; r < kTiles; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[r][i] = fmaf(raw[u].scale(r, i >> 1), (part[r][0][i] + part[r][1][i]) + part[r][2][i], acc[r][i]);
      // This slot's registers are free: load the chunk U ahead into it.
      if (c + u + U < nck) load_raw<F>(raw[u], p, row0, c0 + c + u + U, t);
    }
  }

#pragma unroll
  for (int r = 0; r < kTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + 16 * r + 8 * (i >> 1) + g;
      const int64_t xr = 2 * t + (i & 1);
      if (row >= p.n || xr >= p.m) continue;
      if (p.slices == 1) {
        float* o = p.out + xr * p.ldo + row;
        *o = p.accumulate ? *o + acc[r][i] : acc[r][i];
      } else {
        p.ws[(int64_t(blockIdx.y) * p.m + xr) * p.n + row] = acc[r][i];
      }
    }
  if (p.slices == 1 || p.counters == nullptr) return;
  // The last block of this row block to finish adds the slices in slice order (the
  // counter says who is last; it resets it for the next call).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* ctr = p.counters + blockIdx.x;
    last = atomicAdd(ctr, 1u) == static_cast<unsigned>(p.slices - 1);
    if (last) atomicExch(ctr, 0u);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t rb0 = int64_t(blockIdx.x) * kQuantBlockRows;
  for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
    const int64_t row = rb0 + i % kQuantBlockRows, xr = i / kQuantBlockRows;
    if (row >= p.n) continue;
    float v = __ldcg(p.ws + xr * p.n + row);
    for (int64_t s = 1; s < p.slices; ++s) v += __ldcg(p.ws + (s * p.m + xr) * p.n + row);
    float* o = p.out + xr * p.ldo + row;
    *o = p.accumulate ? *o + v : v;
  }
}

// out[xr, row] (+)= sum over slices in order of ws[slice, xr, row].
__global__ void quant_gemv_sum_slices(float* __restrict__ out, int64_t ldo, const float* __restrict__ ws, int64_t m,
                                      int64_t n, int64_t slices, bool accumulate) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = ws[i];
    for (int64_t s = 1; s < slices; ++s) v += ws[s * total + i];
    float* o = out + (i / n) * ldo + i % n;
    *o = accumulate ? *o + v : v;
  }
}

template <MatrixFormat F>
void launch_gemv(cudaStream_t stream, const Params& p, const QuantGemvPlan& plan) {
  const int row_words = static_cast<int>(plan.chunks_per_slice) * 4 * kUnitWords + kRowPadWords;
  const size_t smem = size_t{kQuantGemvRows} * row_words * 4;
  const dim3 grid(static_cast<unsigned>(plan.row_blocks), static_cast<unsigned>(plan.slices));
  // Four blocks of up to 46 KB of x tile per SM: ask for the largest shared-memory carveout.
  static const bool carveout = [] {
    (void)cudaFuncSetAttribute(quant_gemv_kernel<F>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               int{cudaSharedmemCarveoutMaxShared});
    (void)cudaGetLastError();
    return true;
  }();
  (void)carveout;
  quant_gemv_kernel<F><<<grid, kWarps * 32, smem, stream>>>(p);
}

// Slice counters of the fused sum: zero when the module loads, and the last block of
// each row block puts its counter back to zero. A call takes the next `row_blocks`
// counters of the pool (a ring), so calls running at the same time on different
// streams of one process do not share counters unless 2^20 counters go round while
// one of them runs; calls on one stream (CudaOps, its graphs) never overlap.
constexpr int64_t kCounterPool = int64_t{1} << 20;
__device__ unsigned g_slice_counters[kCounterPool];

unsigned* slice_counters(int64_t row_blocks) {
  static std::mutex mu;
  static int64_t next = 0;
  static std::vector<unsigned*> bases;  // per device
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= bases.size()) bases.resize(static_cast<size_t>(device) + 1, nullptr);
  unsigned*& base = bases[static_cast<size_t>(device)];
  if (base == nullptr && cudaGetSymbolAddress(reinterpret_cast<void**>(&base), g_slice_counters) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the caller falls back to the second kernel
    base = nullptr;
    return nullptr;
  }
  if (next + row_blocks > kCounterPool) next = 0;
  unsigned* p = base + next;
  next += row_blocks;
  return p;
}

inline bool aligned_to(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// QuantGemvArgs already checked by quant_gemv (sizes, dense, q4 alignment).
inline void run(cudaStream_t stream, const QuantGemvArgs& a) {
  const int sms = a.sm_count > 0 ? a.sm_count : current_sm_count();
  const QuantGemvPlan plan = quant_gemv_plan(a.n, a.k, sms, a.blocks_per_sm);
  if (plan.slices > 65535 || plan.row_blocks > 0x7fffffff)
    throw StatusError(invalid_argument("quant_gemv: n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) +
                                       " needs too many blocks"));
  if (plan.slices > 1 && a.workspace == nullptr)
    throw StatusError(invalid_argument("quant_gemv: this shape needs a workspace (quant_gemv_workspace_bytes)"));
  Params p{};
  p.codes = static_cast<const uint8_t*>(a.codes);
  p.scales = a.scales;
  p.ws = a.workspace;
  p.counters = plan.slices > 1 && a.fused_sum && plan.row_blocks <= kCounterPool ? slice_counters(plan.row_blocks)
                                                                                 : nullptr;
  p.n = a.n;
  p.k = a.k;
  p.chunks = plan.chunks;
  p.cps = plan.chunks_per_slice;
  p.slices = plan.slices;
  p.accumulate = a.accumulate;
  p.xvec = aligned_to(a.x, 16) && a.ldx % 4 == 0;
  p.wvec = aligned_to(a.codes, 16) && a.k % 16 == 0;
  for (int64_t r0 = 0; r0 < a.m; r0 += kQuantGemvRows) {
    p.m = std::min<int64_t>(kQuantGemvRows, a.m - r0);
    p.out = a.out + r0 * a.ldo;
    p.ldo = a.ldo;
    p.x = a.x + r0 * a.ldx;
    p.ldx = a.ldx;
    if (a.format == MatrixFormat::kQ4) {
      launch_gemv<MatrixFormat::kQ4>(stream, p, plan);
    } else {
      launch_gemv<MatrixFormat::kFp8Block>(stream, p, plan);
    }
    if (plan.slices > 1 && p.counters == nullptr)
      quant_gemv_sum_slices<<<grid_1d(p.m * a.n), 256, 0, stream>>>(p.out, a.ldo, a.workspace, p.m, a.n, plan.slices,
                                                                     a.accumulate);
  }
  check_launch("quant_gemv");
}

}  // namespace
}  // namespace tf::cuda::legacy_gemv
