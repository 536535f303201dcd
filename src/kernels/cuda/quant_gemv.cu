// Quantized-matrix GEMV on tensor cores (decode, 1..8 rows of x per weight pass), the
// dequantization kernels (prefill) and cuda::quant_matmul, the backend's
// Ops::quant_matmul. Fragment layout and the nibble / e4m3 -> bf16 pairs:
// quant_gemv_frag.cuh.
//
// The streaming GEMV (quant_gemv_stream): a block of 4 warps owns 32 output rows (two
// 16-row MMA tiles) and its warps split the block's K range between them; when the
// matrix has few 32-row blocks, a cluster of up to 8 blocks (grid y) splits K further
// (stream_splits). One launch, no second summing kernel, no workspace: the warps'
// partial sums meet in shared memory and are added in warp order, the blocks' sums by
// cluster rank 0 through distributed shared memory in rank order. A decode GEMV moves
// little data per SM (17.8 MB over 132 SMs is 135 KB each), so its time is mostly
// latency: each lane keeps a ring of chunks of weights in flight (q4: 4 chunks of 4 rows
// x 8 bytes, fp8: 2 of 4 x 16), issued before the first MMA, and refills a slot as
// soon as it has used it. The kernel is launched with programmatic dependent launch:
// the first weight loads are issued before griddepcontrol.wait, so they overlap the
// tail of the kernel before (weights are never written by a kernel; x and out are
// read only after the wait).
// x (f32, the same few KB for every block) is copied by cp.async into a per-warp ring in
// shared memory 4 chunks ahead, then split in registers into two bf16 terms hi + lo (16
// significant bits, relative error <= 2^-17 per element, far below the q4/fp8 weight
// error): two MMAs per 16 K and tile instead of the three of a full f32 split.
// Instruction count (source estimate, q4, per lane and 64-wide chunk of a warp's 32 rows):
// dequantize 4 rows x 8 pairs x ~3 (shift, lop3, hsub2) ~ 90, x split 8 pairs x 6 ~ 50,
// 16 MMAs, loads and scales ~ 30: ~190 warp instructions per 2048 weights, i.e. ~3 thread
// instructions per weight, under the ~4 at which the H200's ALUs would fall behind its
// HBM, but not by much: the kernel must keep enough warps busy to issue them.
// The slice kernel (K slices over blocks and a second summing kernel, x staged in
// shared memory, quant_gemv_legacy.cuh; also several matrices per launch,
// quant_gemv_many) is what quant_matmul uses by default: the streaming kernel is still
// compute-bound (its probes: loads alone 54%, compute alone slower than the whole slice
// kernel at 4-8 rows); TF_QUANT_GEMV=stream selects it.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/fp8_block_gemm.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_gemv_ring.h"

#include "kernels/cuda/quant_gemv_frag.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/quant_gemv_legacy.cuh"
#include "kernels/cuda/quant_gemv_bop.cuh"

namespace tf::cuda {
namespace {

using qfrag::bf16x2_bits;
using qfrag::fp8_pair;
using qfrag::load_lane_chunk;
using qfrag::mma_16816;
using qfrag::pair_elem;
using qfrag::q4_pair;

constexpr int kStreamWarps = 4;                   // warps per block, each a slice of K
constexpr int kStreamBlocksPerSm = 3;             // register budget: 170 per thread
constexpr int kStreamTiles = 2;                   // 16-row MMA tiles per warp (all warps: the same rows)
constexpr int kStreamRows = 16 * kStreamTiles;    // output rows per block
// Chunks of weights in flight per lane: 128 bytes either way (q4 4 x 32, fp8 2 x 64).
template <MatrixFormat F>
constexpr int ring_depth() { return F == MatrixFormat::kQ4 ? 4 : 2; }
constexpr int kStreamMaxSplits = 8;               // blocks of a cluster splitting K (portable cluster size)
static_assert(kFp8BlockSize % kStreamRows == 0, "a block's rows share one fp8 scale row");

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct StreamParams {
  float* out;
  int64_t ldo;
  const float* x;
  int64_t ldx;
  const uint8_t* codes;
  const void* scales;
  int64_t m, n, k, chunks, chunks_per_block, chunks_per_warp;
  int splits;  // blocks of a cluster (grid y) splitting K
  bool accumulate, xvec, wvec;
};

// One chunk of one lane's weights: rows g and g+8 of each tile (q4 2 words each, fp8 4),
// and their scales as loaded (q4: f16 bits per row; fp8: the f32 bits of the block's).
template <MatrixFormat F>
struct Slot {
  static constexpr int kWords = F == MatrixFormat::kQ4 ? 2 : 4;
  static constexpr int kScales = F == MatrixFormat::kQ4 ? kStreamTiles * 2 : 1;
  uint32_t w[kStreamTiles][2][kWords];
  uint32_t s[kScales];
  __device__ float scale(int r, int h) const {
    if constexpr (F == MatrixFormat::kQ4) {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(s[2 * r + h])));
    } else {
      return __uint_as_float(s[0]);
    }
  }
  __device__ uint32_t pair(int r, int h, int j) const {
    if constexpr (F == MatrixFormat::kQ4) {
      return q4_pair(w[r][h][0], w[r][h][1], j);
    } else {
      return fp8_pair(w[r][h], j);
    }
  }
};

template <MatrixFormat F>
__device__ __forceinline__ void load_slot(Slot<F>& sl, const StreamParams& p, int64_t row0, int64_t chunk, int g,
                                          int t) {
  load_lane_chunk<F, kStreamTiles>(sl.w, sl.s, p.codes, p.scales, p.n, p.k, p.chunks, p.wvec, row0, chunk, g, t);
}

// x goes through a per-warp ring in shared memory, kXRing chunks ahead, by cp.async: an
// x read from L2 takes about as long as a chunk's MMAs, and a register prefetch one
// chunk ahead left it on the critical path (run2s6: compute-only probe 15 us for
// 4096->8192). A lane copies and reads back only its own 64 bytes per chunk, so its
// own cp.async.wait_group is the only synchronization.
constexpr int kXRing = 4;
struct XSlot {
  float4 q[4][32];  // [quarter][lane]: 16-byte accesses by consecutive lanes
};

// Starts the copy of x[k0 .. k0+16) of this lane's x row into its place in `slot`
// (zeros past K; plain stores where the 16-byte path does not apply).
__device__ __forceinline__ void stage_x(XSlot& slot, int lane, const StreamParams& p, const float* xrow, int64_t k0) {
  if (p.xvec && k0 + 16 <= p.k) {
#pragma unroll
    for (int q = 0; q < 4; ++q) cp_async16(&slot.q[q][lane], xrow + k0 + 4 * q);
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = k0 + 4 * q + i < p.k ? __ldg(xrow + k0 + 4 * q + i) : 0.0f;
      slot.q[q][lane] = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

__device__ __forceinline__ void read_x(float (&v)[16], const XSlot& slot, int lane, bool has) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 f = has ? slot.q[q][lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    v[4 * q] = f.x;
    v[4 * q + 1] = f.y;
    v[4 * q + 2] = f.z;
    v[4 * q + 3] = f.w;
  }
}

// The lane's 8 pairs of x as bf16 hi and lo terms (hi + lo carries 16 significant bits;
// x - hi is exact in f32).
template <MatrixFormat F>
__device__ __forceinline__ void split_x(const float (&v)[16], uint32_t (&hi)[8], uint32_t (&lo)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float a = v[pair_elem<F>(j, 0)], b = v[pair_elem<F>(j, 1)];
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    hi[j] = bf16x2_bits(h);
    lo[j] = bf16x2_bits(__floats2bfloat162_rn(a - __low2float(h), b - __high2float(h)));
  }
}

// Probe (benchmarks only, QuantGemvArgs::probe): 0 the GEMV; 1 loads only (the weights
// are streamed and folded into the sums by one XOR per word, no x, no MMA); 2 compute
// only (the ring is loaded once and reused for every chunk: no HBM traffic).
template <MatrixFormat F, int kProbe>
__global__ void __launch_bounds__(kStreamWarps * 32, kStreamBlocksPerSm) quant_gemv_stream(const StreamParams p) {
  __shared__ float red[kStreamWarps][kQuantGemvRows][kStreamRows + 1];
  __shared__ float block_sum[kQuantGemvRows * kStreamRows];  // read by cluster rank 0
  __shared__ XSlot xring[kStreamWarps][kXRing];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t(blockIdx.x) * kStreamRows;
  const int64_t kend = std::min<int64_t>(p.chunks, (int64_t(blockIdx.y) + 1) * p.chunks_per_block);
  const int64_t cb = std::min<int64_t>(int64_t(blockIdx.y) * p.chunks_per_block + warp * p.chunks_per_warp, kend);
  const int nck = static_cast<int>(std::min<int64_t>(p.chunks_per_warp, kend - cb));

  constexpr int kStreamRing = ring_depth<F>();
  // The whole ring is in flight before the first MMA.
  Slot<F> ring[kStreamRing];
#pragma unroll
  for (int u = 0; u < kStreamRing; ++u)
    if (u < nck) load_slot<F>(ring[u], p, row0, cb + u, g, t);
  // Up to here only the weights were read: with programmatic dependent launch this runs
  // while the kernel before still finishes; x and out are read after it has.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const bool has_x = g < p.m;
  const float* xrow = p.x + (has_x ? g : 0) * p.ldx;
  XSlot* xr_ring = xring[warp];
  // One commit group per chunk (empty ones too), so wait_group<kXRing - 1> means "this
  // chunk's x has landed".
#pragma unroll
  for (int u = 0; u < kXRing; ++u) {
    if (kProbe != 1 && has_x && u < nck) stage_x(xr_ring[u], lane, p, xrow, (cb + u) * kQuantChunk + 16 * t);
    cp_async_commit();
  }

  float acc[kStreamTiles][4];
#pragma unroll
  for (int r = 0; r < kStreamTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[r][i] = 0.0f;

  for (int c = 0; c < nck; c += kStreamRing) {
#pragma unroll
    for (int u = 0; u < kStreamRing; ++u) {
      if (c + u >= nck) break;
      if constexpr (kProbe == 1) {
        uint32_t x = 0;
#pragma unroll
        for (int r = 0; r < kStreamTiles; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int q = 0; q < Slot<F>::kWords; ++q) x ^= ring[u].w[r][h][q];
        acc[0][0] = __uint_as_float(__float_as_uint(acc[0][0]) ^ x ^ ring[u].s[0]);
      } else {
        uint32_t bh[8], bl[8];
        {
          cp_async_wait<kXRing - 1>();
          const int xs = (c + u) % kXRing;
          float xv[16];
          read_x(xv, xr_ring[xs], lane, has_x);
          split_x<F>(xv, bh, bl);
          if (has_x && c + u + kXRing < nck)
            stage_x(xr_ring[xs], lane, p, xrow, (cb + c + u + kXRing) * kQuantChunk + 16 * t);
          cp_async_commit();
        }
        // Separate chains for hi and lo (4 independent accumulators per warp).
        float ph[kStreamTiles][4], pl[kStreamTiles][4];
#pragma unroll
        for (int r = 0; r < kStreamTiles; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) ph[r][i] = pl[r][i] = 0.0f;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
#pragma unroll
          for (int r = 0; r < kStreamTiles; ++r) {
            const uint32_t a[4] = {ring[u].pair(r, 0, 2 * s), ring[u].pair(r, 1, 2 * s), ring[u].pair(r, 0, 2 * s + 1),
                                   ring[u].pair(r, 1, 2 * s + 1)};
            mma_16816(ph[r], a, bh[2 * s], bh[2 * s + 1]);
            mma_16816(pl[r], a, bl[2 * s], bl[2 * s + 1]);
          }
        }
#pragma unroll
        for (int r = 0; r < kStreamTiles; ++r)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[r][i] = fmaf(ring[u].scale(r, i >> 1), ph[r][i] + pl[r][i], acc[r][i]);
      }
      // This slot is used: load the chunk kStreamRing ahead into it.
      if (kProbe != 2 && c + u + kStreamRing < nck) load_slot<F>(ring[u], p, row0, cb + c + u + kStreamRing, g, t);
    }
  }

  // C fragment: (row 16r + g (+8 for i >= 2), x row 2t + (i & 1)).
#pragma unroll
  for (int r = 0; r < kStreamTiles; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][2 * t + (i & 1)][16 * r + 8 * (i >> 1) + g] = acc[r][i];
  __syncthreads();
  // The block's sum over its warps, in warp order; then (splits > 1) cluster rank 0 adds
  // the blocks' sums in rank order: the same bits whatever m is.
  for (int i = threadIdx.x; i < kQuantGemvRows * kStreamRows; i += kStreamWarps * 32) {
    const int xr = i / kStreamRows, rr = i % kStreamRows;
    float v = red[0][xr][rr];
#pragma unroll
    for (int w = 1; w < kStreamWarps; ++w) v += red[w][xr][rr];
    block_sum[i] = v;
  }
  if (p.splits > 1) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // a block barrier too
    if (cluster.block_rank() == 0) {
      for (int i = threadIdx.x; i < kQuantGemvRows * kStreamRows; i += kStreamWarps * 32) {
        const int xr = i / kStreamRows, rr = i % kStreamRows;
        const int64_t row = row0 + rr;
        if (row >= p.n || xr >= p.m) continue;
        float v = block_sum[i];
        for (int s = 1; s < p.splits; ++s) v += cluster.map_shared_rank(block_sum, s)[i];
        float* o = p.out + xr * p.ldo + row;
        *o = p.accumulate ? *o + v : v;
      }
    }
    cluster.sync();  // the other blocks' shared memory must outlive rank 0's reads
    return;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kQuantGemvRows * kStreamRows; i += kStreamWarps * 32) {
    const int xr = i / kStreamRows, rr = i % kStreamRows;
    const int64_t row = row0 + rr;
    if (row >= p.n || xr >= p.m) continue;
    float* o = p.out + xr * p.ldo + row;
    *o = p.accumulate ? *o + block_sum[i] : block_sum[i];
  }
}

// Blocks splitting K (a cluster along grid y): about kStreamBlocksPerSm blocks per SM
// when the matrix has few 32-row blocks, at least 8 chunks (two per warp) per block. A
// function of (n, k, SM count) only. (run2s6, first version of the kernel: 12288->4096
// in clusters of 3 took 37 us where 4096->12288, the same bytes and block count without
// clusters, took 24: the bench's "splits" sweep is there to retune this.)
int stream_splits(int64_t n, int64_t k, int sm_count) {
  const int64_t row_blocks = ceil_div(n, kStreamRows), chunks = ceil_div(k, kQuantChunk);
  const int64_t want = int64_t{kStreamBlocksPerSm} * std::max(sm_count, 1) / row_blocks;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({kStreamMaxSplits, want, chunks / 8})));
}

template <MatrixFormat F, int kProbe>
cudaError_t launch_stream_k(cudaStream_t stream, bool pdl, const StreamParams& p) {
  const dim3 cluster(1, static_cast<unsigned>(p.splits), 1);
  return launch_kernel_ex(quant_gemv_stream<F, kProbe>,
                   dim3(static_cast<unsigned>(ceil_div(p.n, kStreamRows)), static_cast<unsigned>(p.splits)),
                   dim3(kStreamWarps * 32), 0, stream, p.splits > 1 ? &cluster : nullptr, pdl, p);
}

template <MatrixFormat F>
cudaError_t launch_stream_f(cudaStream_t stream, int probe, bool pdl, const StreamParams& p) {
  if (probe == 1) return launch_stream_k<F, 1>(stream, pdl, p);
  if (probe == 2) return launch_stream_k<F, 2>(stream, pdl, p);
  return launch_stream_k<F, 0>(stream, pdl, p);
}

// TF_QUANT_PDL=0 turns programmatic dependent launch off (read once).
bool pdl_default() {
  static const bool on = [] {
    const char* e = std::getenv("TF_QUANT_PDL");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

// Enqueues one pass of up to 8 rows of x.
void launch_stream(cudaStream_t stream, MatrixFormat f, int probe, bool pdl, const StreamParams& p) {
  const cudaError_t e = f == MatrixFormat::kQ4 ? launch_stream_f<MatrixFormat::kQ4>(stream, probe, pdl, p)
                                               : launch_stream_f<MatrixFormat::kFp8Block>(stream, probe, pdl, p);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("quant_gemv: launch failed: ") + cudaGetErrorString(e)));
}

__device__ __forceinline__ float nib(uint32_t word, int j) {
  return __uint_as_float(0x4B000000u | ((word >> (4 * j)) & 15u)) - 8388616.0f;  // q - 8
}

__global__ void dequant_q4_bf16_kernel(__nv_bfloat16* __restrict__ dst, const uint8_t* __restrict__ codes,
                                       const __half* __restrict__ scales, int64_t n, int64_t k) {
  const int64_t groups = (k + 63) / 64, total = n * groups * 32;  // one thread per code byte
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (groups * 32), byte = i % (groups * 32), c = byte * 2;
    const float s = __half2float(scales[r * groups + byte / 32]);
    const uint32_t b = codes[i];
    if (c < k) dst[r * k + c] = __float2bfloat16_rn(nib(b, 0) * s);
    if (c + 1 < k) dst[r * k + c + 1] = __float2bfloat16_rn(nib(b, 1) * s);
  }
}

__global__ void dequant_fp8_bf16_kernel(__nv_bfloat16* __restrict__ dst, const uint8_t* __restrict__ codes,
                                        const float* __restrict__ scales, int64_t n, int64_t k) {
  const int64_t gc = (k + 127) / 128, total = n * k;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(codes[i]), __NV_E4M3);
    dst[i] = __float2bfloat16_rn(__half2float(__half(h)) * scales[(r / 128) * gc + c / 128]);
  }
}

__global__ void f32_to_bf16(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}


bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// The slice path's q4 kernel (QuantGemvArgs::ring): true runs quant_gemv_ring.
bool ring_selected(const QuantGemvArgs& a, const QuantGemvSegment* segs, int count) {
  if (a.format != MatrixFormat::kQ4 || a.ring == 0) return false;
  if (a.ring < 0 && (a.b_operand >= 0 || !quant_ring_default())) return false;
  const bool fits = quant_ring_supported(a, segs, count);
  if (a.ring > 0 && !fits)
    throw StatusError(invalid_argument("quant_gemv: the ring kernel needs a 16-byte aligned workspace and codes"));
  return fits;
}

}  // namespace

int current_sm_count() {
  static std::mutex mu;
  static std::vector<int> cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= cache.size()) cache.resize(static_cast<size_t>(device) + 1, 0);
  int& sms = cache[static_cast<size_t>(device)];
  if (sms == 0 && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) sms = 132;
  return sms;
}

QuantGemvPlan quant_gemv_plan(int64_t n, int64_t k, int sm_count, int blocks_per_sm) {
  QuantGemvPlan plan;
  plan.chunks = std::max<int64_t>(1, ceil_div(k, kQuantChunk));
  plan.row_blocks = std::max<int64_t>(1, ceil_div(n, kQuantBlockRows));
  // About four blocks (16 warps) per SM keep enough weight bytes in flight, all in one
  // wave (slices rounded down: rounding up left 4096->12288 with a second wave of 48
  // blocks); a slice is at least 4 chunks (or all of K) so the partial sums stay a small
  // extra traffic.
  const int64_t per_sm = blocks_per_sm > 0 ? blocks_per_sm : 4;
  const int64_t want_slices = std::max<int64_t>(1, per_sm * std::max(sm_count, 1) / plan.row_blocks);
  int64_t cps = ceil_div(plan.chunks, want_slices);
  cps = std::min<int64_t>(kQuantMaxSliceChunks, std::max(cps, std::min<int64_t>(plan.chunks, 4)));
  plan.slices = ceil_div(plan.chunks, cps);
  plan.chunks_per_slice = ceil_div(plan.chunks, plan.slices);
  return plan;
}

int64_t quant_gemv_workspace_bytes(int64_t m, int64_t n, int64_t k, int sm_count, int blocks_per_sm) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const QuantGemvPlan plan = quant_gemv_plan(n, k, sm_count, blocks_per_sm);
  const int64_t slices = plan.slices == 1 ? 0 : plan.slices * std::min<int64_t>(m, kQuantGemvRows) * n * 4;
  return std::max(slices, quant_ring_workspace_bytes(m, k));
}

void quant_gemv(cudaStream_t stream, const QuantGemvArgs& a) {
  if (a.format == MatrixFormat::kDense)
    throw StatusError(invalid_argument("quant_gemv: the matrix is dense (use matmul)"));
  if (a.m < 0 || a.n < 0 || a.k <= 0 || a.ldx < a.k || a.ldo < a.n)
    throw StatusError(invalid_argument("quant_gemv: bad sizes m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) +
                                       " k=" + std::to_string(a.k)));
  if (a.m == 0 || a.n == 0) return;
  if (a.format == MatrixFormat::kQ4 && !aligned(a.codes, 8))
    throw StatusError(invalid_argument("quant_gemv: q4 codes must be 8-byte aligned"));
  if (a.legacy) {
    QuantGemvSegment seg;
    seg.out = a.out;
    seg.ldo = a.ldo;
    seg.codes = a.codes;
    seg.scales = a.scales;
    seg.n = a.n;
    if (ring_selected(a, &seg, 1)) {
      quant_gemv_ring(stream, a, &seg, 1);
    } else {
      legacy_gemv::run_many(stream, a, &seg, 1);
    }
    return;
  }
  if (ceil_div(a.n, kStreamRows) > 0x7fffffff)
    throw StatusError(invalid_argument("quant_gemv: n=" + std::to_string(a.n) + " needs too many blocks"));
  StreamParams p{};
  p.codes = static_cast<const uint8_t*>(a.codes);
  p.scales = a.scales;
  p.n = a.n;
  p.k = a.k;
  p.chunks = ceil_div(a.k, kQuantChunk);
  p.splits = a.splits > 0 ? std::min(a.splits, kStreamMaxSplits)
                           : stream_splits(a.n, a.k, a.sm_count > 0 ? a.sm_count : current_sm_count());
  p.chunks_per_block = ceil_div(p.chunks, p.splits);
  p.chunks_per_warp = ceil_div(p.chunks_per_block, kStreamWarps);
  const bool pdl = a.pdl < 0 ? pdl_default() : a.pdl > 0;
  p.accumulate = a.accumulate;
  p.xvec = aligned(a.x, 16) && a.ldx % 4 == 0;
  p.wvec = aligned(a.codes, 16) && a.k % 16 == 0;
  for (int64_t r0 = 0; r0 < a.m; r0 += kQuantGemvRows) {
    p.m = std::min<int64_t>(kQuantGemvRows, a.m - r0);
    p.out = a.out + r0 * a.ldo;
    p.ldo = a.ldo;
    p.x = a.x + r0 * a.ldx;
    p.ldx = a.ldx;
    launch_stream(stream, a.format, a.probe, pdl, p);
  }
  check_launch("quant_gemv");
}

int64_t quant_gemv_many_workspace_bytes(int64_t m, const QuantGemvSegment* segs, int count, int64_t k, int sm_count) {
  const int sms = sm_count > 0 ? sm_count : current_sm_count();
  int64_t floats = 0;  // the segments' slices one after the other (one launch)
  bool any = false;
  for (int i = 0; i < count; ++i)
    if (segs[i].n > 0 && k > 0) {
      floats += legacy_gemv::segment_ws_floats(m, segs[i].n, k, sms, 0);
      any = true;
    }
  return any ? std::max(floats * 4, quant_ring_workspace_bytes(m, k)) : 0;
}

void quant_gemv_many(cudaStream_t stream, const QuantGemvArgs& common, const QuantGemvSegment* segs, int count) {
  if (count < 0 || count > kQuantGemvMaxSegments || (count > 0 && segs == nullptr))
    throw StatusError(invalid_argument("quant_gemv_many: bad segment count " + std::to_string(count)));
  if (!common.legacy) {
    // The streaming kernel: one launch per segment (it needs no workspace).
    for (int i = 0; i < count; ++i) {
      QuantGemvArgs a = common;
      a.out = segs[i].out;
      a.ldo = segs[i].ldo;
      a.codes = segs[i].codes;
      a.scales = segs[i].scales;
      a.n = segs[i].n;
      quant_gemv(stream, a);
    }
    return;
  }
  if (common.format == MatrixFormat::kDense)
    throw StatusError(invalid_argument("quant_gemv_many: the matrices are dense (use matmul)"));
  if (common.m < 0 || common.k <= 0 || common.ldx < common.k)
    throw StatusError(invalid_argument("quant_gemv_many: bad sizes m=" + std::to_string(common.m) +
                                       " k=" + std::to_string(common.k) + " ldx=" + std::to_string(common.ldx)));
  if (common.m == 0 || count == 0) return;
  // One launch for all segments (and one summing launch); the workspace holds their
  // slices one after the other (quant_gemv_many_workspace_bytes), or the ring kernel's x fragments.
  if (ring_selected(common, segs, count)) {
    quant_gemv_ring(stream, common, segs, count);
    return;
  }
  legacy_gemv::run_many(stream, common, segs, count);
}

void quant_dequantize_bf16_rows(cudaStream_t stream, const Matrix& w, int64_t r0, int64_t r1, void* dst) {
  const int64_t k = w.size(1);
  if (r0 < 0 || r1 > w.size(0) || r0 > r1)
    throw StatusError(invalid_argument("quant_dequantize_bf16_rows: rows [" + std::to_string(r0) + ", " +
                                       std::to_string(r1) + ") of " + w.describe()));
  const int64_t n = r1 - r0;
  if (n * k == 0) return;
  auto* d = static_cast<__nv_bfloat16*>(dst);
  if (w.format() == MatrixFormat::kQ4) {
    const int64_t groups = (k + 63) / 64;
    dequant_q4_bf16_kernel<<<grid_1d(n * groups * 32), 256, 0, stream>>>(
        d, w.codes().data<uint8_t>() + r0 * groups * 32, w.scales().data<__half>() + r0 * groups, n, k);
  } else if (w.format() == MatrixFormat::kFp8Block) {
    if (r0 % kFp8BlockSize != 0)
      throw StatusError(invalid_argument("quant_dequantize_bf16_rows: fp8 rows must start a 128-row block, got " +
                                         std::to_string(r0)));
    const int64_t gc = (k + kFp8BlockSize - 1) / kFp8BlockSize;
    dequant_fp8_bf16_kernel<<<grid_1d(n * k), 256, 0, stream>>>(
        d, w.codes().data<uint8_t>() + r0 * k, w.scales().data<float>() + r0 / kFp8BlockSize * gc, n, k);
  } else {
    throw StatusError(invalid_argument("quant_dequantize_bf16: " + w.describe() + " is dense"));
  }
  check_launch("quant_dequantize_bf16_rows");
}

int64_t quant_dequant_chunk_rows(int64_t n, int64_t k, int64_t budget_bytes) {
  const int64_t row_bytes = std::max<int64_t>(1, k) * 2;
  const int64_t blocks = std::max<int64_t>(1, budget_bytes / row_bytes / kFp8BlockSize);
  return std::min(n, blocks * kFp8BlockSize);
}

bool quant_ring_default() {
  // run5s9 (weights by 2D tensor copies): 1.2-1.5x the B-operand kernel at every model shape and m
  // (4096->8192 m=1 16.1 -> 12.9 us, 3 x 4096->8192 39.9 -> 30.4). TF_QUANT_RING=0: the B-operand kernel.
  constexpr bool kRingDefault = true;
  static const bool on = [] {
    const char* v = std::getenv("TF_QUANT_RING");
    return v == nullptr ? kRingDefault : std::string(v) != "0";
  }();
  return on;
}

bool stream_gemv_selected() {
  static const bool on = [] {
    const char* v = std::getenv("TF_QUANT_GEMV");
    return v != nullptr && std::string(v) == "stream";
  }();
  return on;
}

void quant_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) {
  if (Status s = check_matrix(w, "quant_matmul w"); !s.is_ok()) throw StatusError(s);
  if (w.device() != Device::cuda(ctx.device))
    throw StatusError(invalid_argument("quant_matmul: " + w.describe() + " is not on this GPU"));
  check_dev(ctx, "quant_matmul x", x, DType::kF32);
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(invalid_argument("quant_matmul: x " + x.describe() + " does not match weight " + w.describe()));
  const int64_t m = x.numel() / k;
  check_dev(ctx, "quant_matmul out", out, DType::kF32, m * n);
  if (m == 0 || n == 0) return;
  if (m <= ctx.exact_rows) {
    QuantGemvArgs a;
    a.out = out.data<float>();
    a.ldo = n;
    a.x = x.data<float>();
    a.ldx = k;
    a.format = w.format();
    a.codes = w.codes().raw();
    a.scales = w.scales().raw();
    a.m = m;
    a.n = n;
    a.k = k;
    a.accumulate = accumulate;
    // One kernel for every row count (a row's bits must not depend on m). The slice
    // kernel is the default: on the H200 the streaming one was 5-10% faster at 1-2 rows
    // of some shapes but 1.3-2x slower at 4-8 rows (run2s7: slice 19.4 us vs streaming
    // 19.1 at 4096->8192 m=1, 21.4 vs 35.3 at m=8), and PARALLEL defaults to 4.
    // TF_QUANT_GEMV=stream selects the streaming kernel.
    a.legacy = !stream_gemv_selected();
    Tensor ws;
    if (a.legacy) {
      a.sm_count = current_sm_count();
      const int64_t ws_bytes = quant_gemv_workspace_bytes(m, n, k, a.sm_count);
      if (ws_bytes > 0) {
        ws = ctx.scratch(ws_bytes);
        a.workspace = ws.data<float>();
      }
    }
    quant_gemv(ctx.stream, a);
    return;
  }
  // Prefill, fp8: FP8 tensor cores with the block scales (fp8_block_gemm.h; TF_FP8_PREFILL picks
  // ours, cuBLASLt's (fp8_gemm.h) or the dequantize path below).
  if (w.format() == MatrixFormat::kFp8Block) {
    const Fp8PrefillPath path = fp8_prefill_path();
    if (path == Fp8PrefillPath::kMma) {
      fp8_block_gemm_mma(ctx, out, x, w, accumulate);
      return;
    }
    if (path == Fp8PrefillPath::kLt && fp8_block_gemm(ctx, out, x, w, accumulate)) return;
  }
  // Else x -> bf16, and W in chunks of rows (quant_dequant_chunk_rows: the scratch stays
  // ~64 MiB even for lm_head) -> bf16 scratch (the allocator's cached block, reused call to
  // call), each chunk's output columns by cuBLAS with fp32 accumulation.
  Tensor xb = ctx.scratch(m * k * 2);
  f32_to_bf16<<<grid_1d(m * k), 256, 0, ctx.stream>>>(x.data<float>(), xb.data<__nv_bfloat16>(), m * k);
  check_launch("quant_matmul x to bf16");
  const int64_t chunk = quant_dequant_chunk_rows(n, k, kQuantDequantBudget);
  Tensor wb = ctx.scratch(chunk * k * 2);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    quant_dequantize_bf16_rows(ctx.stream, w, r0, r0 + rows, wb.raw());
    const cublasStatus_t st =
        cublasGemmEx(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(k), &alpha, wb.raw(), CUDA_R_16BF,
                     int(k), xb.raw(), CUDA_R_16BF, int(k), &beta, out.data<float>() + r0, CUDA_R_32F, int(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw StatusError(internal_error("quant_matmul: cuBLAS failed with status " + std::to_string(int(st))));
  }
}

}  // namespace tf::cuda
