// The q4 ring GEMV (quant_gemv_ring.h): persistent blocks whose producer warps stream whole-K units
// through a shared-memory ring (mbarriers): the weights by one 2D tensor copy per stage (default), 16-byte
// cp.async or a cp.async.bulk per row and stage (QuantGemvArgs::ring_bulk; the same bits); x as MMA
// records, either written by a small x kernel into the workspace and copied per stage (the default), or by
// the block itself into shared memory once (QuantGemvArgs::ring_x).
//
// Why: the slice kernels (quant_gemv_legacy.cuh, quant_gemv_bop.cuh) pay a fixed chain per call
// (x staged per block, __syncthreads, a few chunks per warp, partial sums, a second kernel): ~6-7 us
// plus ~1.4 TB/s at m = 1. Here the weights ask nothing of the consumers: a producer warp keeps up
// to ~200 KB per SM of copies in flight (issued before the dependency wait), and the consumers only
// wait on full slots.
//
// Shared memory per slot (one stage of one unit): weights [U rows][S chunks + pad][32 bytes] (pad 1:
// rows 32 bytes apart in the banks, conflict-free 8-byte reads of 8 rows x 4 lanes; tensor copies with
// QuantGemvArgs::ring_pad take one chunk more per row, else pad 0), x records [S chunks][record] (unless
// x is resident), scales [U rows][S] f16. Records: quant_gemv_ring_chunk.cuh (per operand layout); pairs
// follow qfrag::pair_elem<kQ4>, e and the f16 split as stage_x (quant_gemv_legacy.cuh): hi + lo carry 22
// significant bits of x.
//
// Consumer warp w: rows 16 (w / ksplit) .. + 15 of the unit, part j = w % ksplit: local chunks j,
// j + ksplit, ... of each stage (S a multiple of ksplit, so global chunk c = j mod ksplit), each by
// ring::chunk_mma (weights as the MMA's A operand by default: 4 MMAs per chunk up to 4 x rows).
#include <cuda.h>  // CUtensorMap (types only; the encoder comes through cudaGetDriverEntryPointByVersion)
#include <cudaTypedefs.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_set>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/quant_gemv_frag.cuh"
#include "kernels/cuda/quant_gemv_ring.h"
#include "kernels/cuda/quant_gemv_ring_chunk.cuh"

namespace tf::cuda {
namespace {

// W consumer warps per block (8, or 16: QuantGemvArgs::ring_warps), + the weights producer warp and the
// x producer warp.
template <int W>
constexpr int threads_of() {
  return (W + 2) * 32;
}
constexpr int kRowsPerWarp = 16;
constexpr int kMaxDepth = 16;
constexpr int kChunkBytes = 32;          // one q4 group of one row
// Dynamic shared memory: the device's limit per block (227 KB on sm_90 / sm_100, 99 KB on
// sm_120 / sm_121) less 9 KB for the static barriers and sums.
constexpr int kStaticReserve = 9 * 1024;
int smem_budget() { return static_cast<int>(device_limits().smem_per_block) - kStaticReserve; }

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

using ring::Operand;
using ring::record_bytes;

struct RingSeg {
  float* out;
  int64_t ldo;
  const uint8_t* codes;
  const unsigned short* scales;
  int64_t n, units, unit0;       // unit0: first unit of the segment in the launch
  int ksplit, unit_rows, stage;  // stage: S chunks per stage (a multiple of ksplit)
};

struct RingParams {
  const uint8_t* xf;  // x records [chunks][record_bytes(m)] (written by ring_x_fragments)
  // x_all > 0 (QuantGemvArgs::ring_x): no x kernel; the block writes all chunks' records itself (x_all bytes,
  // after the slots) from x [m][ldx], and the slots carry no x.
  const float* x;
  int64_t ldx, k;
  int x_all;
  bool x_vec;  // x, ldx and k allow 16-byte loads (ring::x_record_item)
  int64_t chunks, units;
  int m, count, depth;
  int w_region, x_region, slot_bytes;  // a slot: weights, then x records, then scales
  bool accumulate;
  // Weights copy (QuantGemvArgs::ring_bulk): 0 16-byte cp.async, 1 a cp.async.bulk per row and stage,
  // 2 one 2D tensor copy per stage (tmap; the slot's rows unpadded, rows past n and chunks past K zeros).
  int copy_mode;
  // Chunks of padding after each row of a slot: 1 (rows 32 bytes apart in the banks), 0 for tensor copies
  // unless QuantGemvArgs::ring_pad (then each row's box takes one chunk more: the next stage's first, or
  // zeros past K).
  int row_pad;
  // Scales copied by cp.async in pieces of this many bytes (4, 8, 16: chunk counts of the rows and
  // stages multiples of 2, 4, 8 and the scales aligned to it), 0: plain loads.
  int scale_piece;
  RingSeg seg[kQuantGemvMaxSegments];
  CUtensorMap tmap[kQuantGemvMaxSegments];  // copy_mode 2: codes as u32 [n][chunks * 8], box [U][(S + pad) * 8]
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_u32(bar)),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ int find_seg(const RingParams& p, int64_t unit) {
  int si = 0;
  for (int i = 1; i < p.count; ++i)
    if (unit >= p.seg[i].unit0) si = i;
  return si;
}

// x rows 0..m-1 of the call into records: one thread per (chunk, row, t), t fastest (4 lanes share
// a chunk's largest |x|). 2^e puts the largest |x| of the (row, chunk) in [2^13, 2^14), as stage_x.
struct XParams {
  const float* x;
  int64_t ldx, k, chunks;
  int m;
  uint8_t* xf;
  bool pdl;
  bool weights_a;  // the record layout of Operand::kWeightsA (else kWeightsB)
  bool x_vec;      // as RingParams::x_vec
};

__global__ void __launch_bounds__(256) ring_x_fragments(const __grid_constant__ XParams xp) {
  const float* x = xp.x;
  const int64_t ldx = xp.ldx, k = xp.k, chunks = xp.chunks;
  const int m = xp.m;
  uint8_t* xf = xp.xf;
  if (xp.pdl) {
    pdl_launch_dependents();  // the GEMV may start streaming its weights now
    pdl_wait();     // x comes from the kernel before
  }
  const int64_t units = chunks * m * 4;
  const int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool on = u < units;
  const int t = static_cast<int>(u & 3), r = on ? static_cast<int>((u >> 2) % m) : 0;
  const int64_t c = on ? (u >> 2) / m : 0;
  uint8_t* rec = xf + c * record_bytes(m);
  if (xp.weights_a)
    ring::x_record_item<Operand::kWeightsA>(x, ldx, k, m, c, r, t, on, xp.x_vec, rec);
  else
    ring::x_record_item<Operand::kWeightsB>(x, ldx, k, m, c, r, t, on, xp.x_vec, rec);
}

// The weights producer's copies of one stage into `slot`, all 32 lanes: the weights by 16-byte
// cp.async pieces (consecutive lanes, consecutive pieces of a row), or (QuantGemvArgs::ring_bulk) a
// cp.async.bulk per row; the scales by cp.async pieces or plain loads. Each lane's cp.asyncs arrive on
// the full barrier when they land (noinc), lane 0 once more after the warp's plain stores.
// run3s9: a bulk copy per row and stage cost ~45 ns of one SM's issue each (4096->8192 at 25 us,
// ~3 us per 64-row stage whatever the copy size): the pieces are what the warp can issue quickly.
__device__ __forceinline__ void ring_copy_weights(const RingParams& p, const RingSeg& sg, int64_t unit,
                                                  int stage_idx, uint8_t* slot, uint64_t* full, int lane) {
  const int64_t row0 = (unit - sg.unit0) * sg.unit_rows;
  const int rows = static_cast<int>(std::min<int64_t>(sg.unit_rows, sg.n - row0));
  const int64_t c0 = int64_t{stage_idx} * sg.stage;
  const int nck = static_cast<int>(std::min<int64_t>(sg.stage, p.chunks - c0));
  const int rs = (sg.stage + p.row_pad) * kChunkBytes;
  const int64_t row_bytes = p.chunks * kChunkBytes;
  const uint8_t* codes = sg.codes + row0 * row_bytes + c0 * kChunkBytes;
  if (p.copy_mode == 2) {
    if (lane == 0) {
      asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(full)),
                   "r"(static_cast<uint32_t>(sg.unit_rows * (sg.stage + p.row_pad) * kChunkBytes))
                   : "memory");
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
          "[%2];\n" ::"r"(smem_u32(slot)),
          "l"(reinterpret_cast<uint64_t>(&p.tmap[&sg - p.seg])), "r"(smem_u32(full)),
          "r"(static_cast<int>(c0 * 8)), "r"(static_cast<int>(row0))
          : "memory");
    }
  } else if (p.copy_mode == 1) {
    if (lane == 0)
      asm volatile("mbarrier.expect_tx.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(full)),
                   "r"(static_cast<uint32_t>(rows * nck * kChunkBytes))
                   : "memory");
    __syncwarp();
    for (int r = lane; r < rows; r += 32)
      bulk_g2s(slot + r * rs, codes + r * row_bytes, static_cast<uint32_t>(nck * kChunkBytes), full);
  } else {
    const int pr = 2 * nck;  // 16-byte pieces per row
    auto piece = [&](int r, int pc) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(slot + r * rs + pc * 16)),
                   "l"(codes + r * row_bytes + pc * 16)
                   : "memory");
    };
    if (pr <= 32) {
      const int per = 32 / pr, lr = lane / pr, pc = lane % pr;  // rows per warp instruction
      if (lr < per)
        for (int r = lr; r < rows; r += per) piece(r, pc);
    } else {
      for (int r = 0; r < rows; ++r)
        for (int pc = lane; pc < pr; pc += 32) piece(r, pc);
    }
  }
  // Scales [row][S] f16: cp.async pieces, else plain loads.
  const unsigned short* src_s = sg.scales + (row0 + lane) * p.chunks + c0;
  auto* stile = reinterpret_cast<unsigned short*>(slot + p.w_region + p.x_region) + lane * sg.stage;
  for (int r = lane; r < rows; r += 32) {
    if (p.scale_piece == 16) {
      for (int j = 0; j < nck; j += 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(stile + j)), "l"(src_s + j)
                     : "memory");
    } else if (p.scale_piece == 8) {
      for (int j = 0; j < nck; j += 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(stile + j)), "l"(src_s + j)
                     : "memory");
    } else if (p.scale_piece == 4) {
      for (int j = 0; j < nck; j += 2)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(stile + j)), "l"(src_s + j)
                     : "memory");
    } else {
      for (int j = 0; j < nck; ++j) stile[j] = __ldg(src_s + j);
    }
    src_s += 32 * p.chunks;
    stile += 32 * sg.stage;
  }
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(full)) : "memory");
  __syncwarp();
  if (lane == 0) mbar_arrive(full);  // after the warp's plain stores (release)
}

// RingParams::x_all: every chunk's x record into xall, items (chunk, row, t) dealt to `threads` threads
// (tid 0..threads-1, whole warps) of the block.
template <Operand O>
__device__ __forceinline__ void build_x_records(const RingParams& p, uint8_t* xall, int tid, int threads) {
  const int items = static_cast<int>(p.chunks) * p.m * 4;
  const int rec = record_bytes(p.m);
  for (int i0 = 0; i0 < items; i0 += threads) {
    const int u = i0 + tid;
    const bool on = u < items;
    const int t = u & 3, r = on ? (u >> 2) % p.m : 0, c = on ? (u >> 2) / p.m : 0;
    ring::x_record_item<O>(p.x, p.ldx, p.k, p.m, c, r, t, on, p.x_vec, xall + int64_t{c} * rec);
  }
}

// P: chunks per part per stage (the stage is P * ksplit chunks; its loop unrolled for independent MMAs).
// O, G: the operand layout and its column groups (ring_chunk.cuh; kWeightsB: 1).
template <int P, int W, Operand O = Operand::kWeightsB, int G = 1>
__global__ void __launch_bounds__(threads_of<W>(), 1)
    quant_gemv_ring_kernel(const __grid_constant__ RingParams p) {
  constexpr int kConsumerWarps = W;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t full[kMaxDepth], empty[kMaxDepth];
  __shared__ float red[W * kRowsPerWarp * kQuantGemvRows];  // [part][x row][unit row]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.depth; ++s) {
      // The weights lanes' cp.async arrivals, weights lane 0, the x copy's expect_tx (unless x_all).
      mbar_init(&full[s], 32 + 1 + (p.x_all > 0 ? 0 : 1));
      mbar_init(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  pdl_launch_dependents();  // the next call's x kernel may launch (it waits for this grid before writing)

  if (warp >= kConsumerWarps) {
    // Producers: warp 8 the weights and scales (never written by a kernel: no dependency wait, so
    // the first `depth` stages are requested while the kernels before still run), warp 9 (one lane)
    // the x records after the wait. Both refill a slot once its consumers have released it.
    const bool weights = warp == kConsumerWarps;
    if (!weights) {
      pdl_wait();
      if (p.x_all > 0) {
        build_x_records<O>(p, smem + int64_t{p.depth} * p.slot_bytes, kConsumerWarps * 32 + lane,
                           (kConsumerWarps + 1) * 32);
        asm volatile("bar.sync 2, %0;\n" ::"n"((kConsumerWarps + 1) * 32) : "memory");
        return;
      }
      if (lane != 0) return;
    }
    int it = 0;
    for (int64_t u = blockIdx.x; u < p.units; u += gridDim.x) {
      const RingSeg& sg = p.seg[find_seg(p, u)];
      const int stages = static_cast<int>(ceil_div(p.chunks, sg.stage));
      for (int s = 0; s < stages; ++s, ++it) {
        const int slot = it % p.depth;
        if (it >= p.depth) mbar_wait(&empty[slot], static_cast<uint32_t>((it / p.depth - 1) & 1));
        uint8_t* base = smem + int64_t{slot} * p.slot_bytes;
        if (weights) {
          ring_copy_weights(p, sg, u, s, base, &full[slot], lane);
        } else {
          const int64_t c0 = int64_t{s} * sg.stage;
          const int nck = static_cast<int>(std::min<int64_t>(sg.stage, p.chunks - c0));
          const int rec = record_bytes(p.m);
          mbar_arrive_expect_tx(&full[slot], static_cast<uint32_t>(nck * rec));
          bulk_g2s(base + p.w_region, p.xf + c0 * rec, static_cast<uint32_t>(nck * rec), &full[slot]);
        }
      }
    }
    return;
  }

  // Consumers.
  pdl_wait();  // out (accumulate) and x are written by the kernels before
  const uint8_t* xall = smem + int64_t{p.depth} * p.slot_bytes;
  if (p.x_all > 0) {
    build_x_records<O>(p, smem + int64_t{p.depth} * p.slot_bytes, threadIdx.x, (kConsumerWarps + 1) * 32);
    asm volatile("bar.sync 2, %0;\n" ::"n"((kConsumerWarps + 1) * 32) : "memory");
  }
  const int g = lane >> 2, t = lane & 3;
  const int rec = record_bytes(p.m);
  int slot = 0;
  uint32_t phase = 0;  // of the slot's current fill
  for (int64_t u = blockIdx.x; u < p.units; u += gridDim.x) {
    const RingSeg& sg = p.seg[find_seg(p, u)];
    const int ks = sg.ksplit, part = warp % ks, wrow = kRowsPerWarp * (warp / ks);
    const int stages = static_cast<int>(ceil_div(p.chunks, sg.stage));
    const int rs = (sg.stage + p.row_pad) * kChunkBytes;
    const ring::LaneOffsets lo = ring::lane_offsets<O>(rs, sg.stage, p.m, g, t);
    // Per chunk of this part: the weights, x record and scales pointers advance by these.
    const int w_step = ks * kChunkBytes, x_step = ks * rec;
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int s = 0; s < stages; ++s) {
      const uint8_t* base = smem + int64_t{slot} * p.slot_bytes;
      const int nck = static_cast<int>(std::min<int64_t>(sg.stage, p.chunks - int64_t{s} * sg.stage));
      mbar_wait(&full[slot], phase);
      const uint8_t* wp = base + wrow * rs + part * kChunkBytes;
      const uint8_t* xp = (p.x_all > 0 ? xall + int64_t{s} * sg.stage * rec : base + p.w_region) + part * rec;
      const unsigned short* sp =
          reinterpret_cast<const unsigned short*>(base + p.w_region + p.x_region) + wrow * sg.stage + part;
      if (nck == P * ks) {
        // A whole stage: no exits in the unrolled loop, so the chunks' loads, conversions and MMAs can
        // interleave (the FMAs into acc stay in chunk order).
#pragma unroll
        for (int i = 0; i < P; ++i) {
          ring::chunk_mma<O, G>(acc, lo, wp, xp, sp);
          wp += w_step;
          xp += x_step;
          sp += ks;
        }
      } else {
        // A short stage (the last, or all of a short K): a plain loop (smaller code: fewer instruction misses).
#pragma unroll 1
        for (int i = 0; i < P; ++i) {
          if (part + i * ks >= nck) break;
          ring::chunk_mma<O, G>(acc, lo, wp, xp, sp);
          wp += w_step;
          xp += x_step;
          sp += ks;
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      if (++slot == p.depth) {
        slot = 0;
        phase ^= 1;
      }
    }
    // The parts' sums in part order (acc's rows: ring::acc_x_row / acc_w_row).
    const int ur = sg.unit_rows;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        red[(part * kQuantGemvRows + ring::acc_x_row<O>(b, g, t)) * ur + wrow + ring::acc_w_row<O>(b, i, g, t)] =
            acc[b][i];
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerWarps * 32) : "memory");
    const int64_t row0 = (u - sg.unit0) * ur;
    for (int i = threadIdx.x; i < p.m * ur; i += kConsumerWarps * 32) {
      const int xr = i / ur, r = i % ur;
      if (row0 + r >= sg.n) continue;
      float v = red[xr * ur + r];
      for (int j = 1; j < ks; ++j) v += red[(j * kQuantGemvRows + xr) * ur + r];
      float* o = sg.out + xr * sg.ldo + row0 + r;
      *o = p.accumulate ? *o + v : v;
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerWarps * 32) : "memory");
  }
}

bool aligned_to(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

bool pdl_on() {
  static const bool on = [] {
    const char* e = std::getenv("TF_QUANT_PDL");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

}  // namespace

QuantRingPlan quant_ring_plan(int64_t n, int64_t k, int sm_count, int ksplit_override, int warps) {
  const int block_rows = (warps == 16 ? 16 : 8) * kRowsPerWarp;
  const int64_t chunks = std::max<int64_t>(1, ceil_div(k, kQuantChunk));
  const int64_t sms = std::max(sm_count, 1);
  QuantRingPlan best;
  int64_t best_cost = -1;
  for (int ks : {1, 2, 4, 8}) {
    if (ksplit_override > 0 ? ks != ksplit_override : (ks > 1 && chunks < 2 * ks)) continue;
    const int64_t rows = block_rows / ks, units = std::max<int64_t>(1, ceil_div(n, rows));
    // Time ~ the rows of the busiest block (units dealt round-robin to one block per SM); ties to
    // fewer parts (less x per weight byte).
    const int64_t cost = ceil_div(units, sms) * rows;
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best.ksplit = ks;
      best.unit_rows = rows;
      best.units = units;
    }
  }
  return best;
}

int64_t quant_ring_workspace_bytes(int64_t m, int64_t k) {
  if (m <= 0 || k <= 0) return 0;
  return std::max<int64_t>(1, ceil_div(k, kQuantChunk)) *
         record_bytes(static_cast<int>(std::min<int64_t>(m, kQuantGemvRows)));
}

bool quant_ring_supported(const QuantGemvArgs& a, const QuantGemvSegment* segs, int count) {
  if (a.format != MatrixFormat::kQ4 || a.workspace == nullptr || !aligned_to(a.workspace, 16)) return false;
  for (int i = 0; i < count; ++i)
    if (segs[i].n > 0 && !aligned_to(segs[i].codes, 16)) return false;
  return true;
}

// The stages (S of each segment) and the shared-memory slots for m rows: S starts at per_part chunks
// per part and is halved (down to one chunk per part) until at least kMinDepth slots fit; the bits do
// not depend on it. Then the scale copies' piece size.
namespace {
// The driver's tensor-map encoder (no link to libcuda: the runtime hands out its entry point).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// copy_mode 2: each segment's codes as a 2D u32 tensor [n][chunks * 8] with boxes of its stage
// [unit_rows][(S + row_pad) * 8]. False when the encoder is missing or refuses.
bool encode_tensor_maps(RingParams& p) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  for (int i = 0; i < p.count; ++i) {
    const RingSeg& sg = p.seg[i];
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.chunks * 8), static_cast<cuuint64_t>(sg.n)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.chunks * kChunkBytes)};
    const int box_chunks = sg.stage + p.row_pad;
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_chunks * 8), static_cast<cuuint32_t>(sg.unit_rows)};
    const cuuint32_t estr[2] = {1, 1};
    if (box_chunks * 8 > 256 ||
        encode(&p.tmap[i], CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<uint8_t*>(sg.codes), dims, strides,
               box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  return true;
}

constexpr int kMinDepth = 3;
// RingParams::x_all at most (x records of the whole K in shared memory: m = 1 up to K = 16384, 8 up to 2048).
constexpr int64_t kXAllMaxBytes = 76 * 1024;
void layout_slots(RingParams& p, const int (&start_stage)[kQuantGemvMaxSegments], int ring_depth) {
  const int rec = record_bytes(p.m);
  for (int i = 0; i < p.count; ++i) p.seg[i].stage = start_stage[i];
  for (;;) {
    int max_w = 0, max_stage = 1, max_s = 0;
    for (int i = 0; i < p.count; ++i) {
      const RingSeg& sg = p.seg[i];
      max_w = std::max(max_w, sg.unit_rows * (sg.stage + p.row_pad) * kChunkBytes);
      max_stage = std::max(max_stage, sg.stage);
      max_s = std::max(max_s, sg.unit_rows * sg.stage * 2);
    }
    p.w_region = max_w;
    p.x_region = p.x_all > 0 ? 0 : max_stage * rec;
    p.slot_bytes = (p.w_region + p.x_region + max_s + 127) / 128 * 128;
    p.depth = std::min(kMaxDepth, (smem_budget() - p.x_all) / p.slot_bytes);
    bool shrunk = false;
    if (p.depth < kMinDepth) {
      for (int i = 0; i < p.count; ++i) {
        RingSeg& sg = p.seg[i];
        const int parts_per_stage = sg.stage / sg.ksplit;
        if (parts_per_stage > 1) {
          sg.stage = parts_per_stage / 2 * sg.ksplit;
          shrunk = true;
        }
      }
    }
    if (!shrunk) break;
  }
  if (ring_depth > 0) p.depth = std::min(p.depth, ring_depth);
  // Scale pieces: 16, 8 or 4 bytes when the rows' chunk count, every stage and every scales pointer allow.
  int piece = p.chunks % 8 == 0 ? 8 : p.chunks % 4 == 0 ? 4 : p.chunks % 2 == 0 ? 2 : 0;
  for (int i = 0; i < p.count; ++i)
    while (piece > 1 && (p.seg[i].stage % piece != 0 || !aligned_to(p.seg[i].scales, 2 * piece))) piece /= 2;
  p.scale_piece = piece > 1 ? 2 * piece : 0;
}
using RingKernel = void (*)(RingParams);

template <Operand O, int G>
RingKernel ring_kernel_of(int per_part, int warps) {
  if (warps == 16)
    return per_part == 2   ? quant_gemv_ring_kernel<2, 16, O, G>
           : per_part == 8 ? quant_gemv_ring_kernel<8, 16, O, G>
                           : quant_gemv_ring_kernel<4, 16, O, G>;
  return per_part == 2   ? quant_gemv_ring_kernel<2, 8, O, G>
         : per_part == 8 ? quant_gemv_ring_kernel<8, 8, O, G>
                         : quant_gemv_ring_kernel<4, 8, O, G>;
}

// The kernel for per_part (2, 4, 8), the consumer warps, the operand layout and m (kWeightsA: a second
// column group above 4 rows); its shared-memory limit raised once.
RingKernel ring_kernel(int per_part, int warps, Operand op, int m) {
  const RingKernel k = op == Operand::kWeightsB ? ring_kernel_of<Operand::kWeightsB, 1>(per_part, warps)
                       : m > 4                  ? ring_kernel_of<Operand::kWeightsA, 2>(per_part, warps)
                                                : ring_kernel_of<Operand::kWeightsA, 1>(per_part, warps);
  static std::mutex mu;
  static std::unordered_set<const void*> raised;
  const std::lock_guard<std::mutex> lock(mu);
  if (raised.insert(reinterpret_cast<const void*>(k)).second) {
    if (const Status st = set_dynamic_smem(k, smem_budget(), "quant_gemv (ring)"); !st.is_ok()) {
      raised.erase(reinterpret_cast<const void*>(k));
      throw StatusError(st);
    }
  }
  return k;
}

// An env knob read once: unset -> true, else whether it differs from `off`.
bool env_not(const char* name, const char* off) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != off;
}

}  // namespace

// run7s10 (graph-replayed, rotated weights, session-9 ring -> these defaults, us): m = 1 4096->8192 12.9 ->
// 8.5 (weights as B instead: 10.4, x kernel instead: 10.4, unpadded: 9.0), 2048->4096 5.5 -> 4.1,
// 4096->24576 30.2 -> 18.9, 3 x 4096->8192 (many) 30.4 -> 19.1; m = 8 1.00-1.16x; never slower at the
// model's shapes and m = 1..8. Decode-1 (EXL3 + q4, full geometry) 108.5 -> 114.5-115.7 tok/s.
bool quant_ring_weights_a_default() {
  static const bool on = env_not("TF_QUANT_RING_OPERAND", "b");
  return on;
}

bool quant_ring_pad_default() {
  static const bool on = env_not("TF_QUANT_RING_PAD", "0");
  return on;
}

// Session 51 (bench/RESULTS.md run45b; H100, full geometry, one binary, decode tok/s): the records by the x
// kernel for every call 122.3 / 122.3 at decode-1 against 114.7 / 115.4 when the ring kernel built them where
// one round of its threads did (session 10's default, which the single-GEMV bench still favours at some
// shapes: there the kernel before is the same GEMV, not the one that writes x); decode-4@4k the same
// (377.6-381.1 vs 377.9-379.4). Up to 4 rounds in the kernel was slower still (run45a: 115.0 and 362 vs 117.9
// and 381: that builder was not kept).
bool quant_ring_x_in_kernel_default() {
  static const bool on = [] {
    const char* v = std::getenv("TF_QUANT_RING_X");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

// Session 51 (run45b): decode-1 120.6 -> 122.3 tok/s with the x kernel's loads 16 bytes wide.
bool quant_ring_x_vec_default() {
  static const bool on = env_not("TF_QUANT_RING_X_VEC", "0");
  return on;
}

void quant_gemv_ring(cudaStream_t stream, const QuantGemvArgs& a, const QuantGemvSegment* segs, int count) {
  const int sms = a.sm_count > 0 ? a.sm_count : current_sm_count();
  // Chunks per part per stage: QuantGemvArgs::ring_stage, else 8 for 1-2 parts and 4 for more (run4s9:
  // 4096->8192 17.4 -> 14.7 us, 4096->24576 49.2 -> 40.5 with 8; 8192->4096 (4 parts) 16.8 -> 22.2).
  const int fixed_part = a.ring_stage == 2 || a.ring_stage == 4 || a.ring_stage == 8 ? a.ring_stage : 0;
  int per_part = 2;  // the kernel's unrolled bound: the largest of the segments
  const int warps = a.ring_warps == 16 ? 16 : 8;
  RingParams p{};
  p.chunks = std::max<int64_t>(1, ceil_div(a.k, kQuantChunk));
  p.accumulate = a.accumulate;
  // QuantGemvArgs::ring_bulk: 0 (the default) and 2 one 2D tensor copy per stage (run5s9: 1.2-1.5x the
  // B-operand kernel at every model shape and m), 1 a bulk copy per row, 3 16-byte cp.async.
  p.copy_mode = a.ring_bulk == 1 ? 1 : a.ring_bulk == 3 ? 0 : 2;
  const bool pad = a.ring_pad < 0 ? quant_ring_pad_default() : a.ring_pad > 0;
  p.row_pad = p.copy_mode == 2 && !pad ? 0 : 1;
  const Operand op = (a.ring_operand == 0 ? quant_ring_weights_a_default() : a.ring_operand == 2)
                         ? Operand::kWeightsA
                         : Operand::kWeightsB;
  // x records in the ring kernel: 1 when every builder thread has at most one (run6s10: more rounds of
  // dependent x loads cost more than the x kernel, e.g. 16384->4096 m=1 15.7 -> 18.5 us), 2 whenever they
  // fit.
  const int x_mode = a.ring_x < 0 ? (quant_ring_x_in_kernel_default() ? 1 : 0) : std::min(a.ring_x, 2);
  int start_stage[kQuantGemvMaxSegments] = {};
  for (int i = 0; i < count; ++i) {
    const QuantGemvSegment& s = segs[i];
    if (s.n < 0 || s.ldo < s.n ||
        (s.n > 0 && (s.out == nullptr || s.codes == nullptr || s.scales == nullptr)))
      throw StatusError(invalid_argument("quant_gemv: segment " + std::to_string(i) +
                                         " has bad sizes or pointers (n=" + std::to_string(s.n) +
                                         " ldo=" + std::to_string(s.ldo) + ")"));
    if (s.n == 0) continue;
    const QuantRingPlan plan = quant_ring_plan(s.n, a.k, sms, a.ring_ksplit, warps);
    // S: per_part chunks per part (16 KB of weights per stage at per_part 4), at most the whole K
    // rounded up to the parts.
    int seg_part = fixed_part > 0 ? fixed_part : plan.ksplit <= 2 ? 8 : 4;
    // A padded tensor box holds at most 256 words: S + 1 <= 32 chunks.
    while (p.copy_mode == 2 && p.row_pad > 0 && seg_part > 2 && seg_part * plan.ksplit + 1 > 32) seg_part /= 2;
    per_part = std::max(per_part, seg_part);
    start_stage[p.count] = static_cast<int>(
        std::min<int64_t>(int64_t{seg_part} * plan.ksplit, ceil_div(p.chunks, plan.ksplit) * plan.ksplit));
    RingSeg& sg = p.seg[p.count++];
    sg.codes = static_cast<const uint8_t*>(s.codes);
    sg.scales = static_cast<const unsigned short*>(s.scales);
    sg.n = s.n;
    sg.units = plan.units;
    sg.unit0 = p.units;
    sg.ksplit = plan.ksplit;
    sg.unit_rows = static_cast<int>(plan.unit_rows);
    p.units += plan.units;
  }
  if (p.count == 0) return;
  if (p.units > 0x7fffffff)
    throw StatusError(invalid_argument("quant_gemv: " + std::to_string(p.units) + " units are too many"));
  const bool pdl = a.slice_pdl < 0 ? pdl_on() : a.slice_pdl > 0;
  auto* xf = reinterpret_cast<uint8_t*>(a.workspace);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.units, sms));
  for (int64_t r0 = 0; r0 < a.m; r0 += kQuantGemvRows) {
    p.m = static_cast<int>(std::min<int64_t>(kQuantGemvRows, a.m - r0));
    p.xf = xf;
    p.x = a.x + r0 * a.ldx;
    p.ldx = a.ldx;
    p.k = a.k;
    p.x_vec = quant_ring_x_vec_default() && aligned_to(p.x, 16) && a.ldx % 4 == 0 && a.k % 4 == 0;
    const int64_t x_bytes = p.chunks * record_bytes(p.m);
    const bool one_round = p.chunks * p.m * 4 <= (warps + 1) * 32;
    p.x_all = (x_mode == 2 || (x_mode == 1 && one_round)) && x_bytes <= kXAllMaxBytes
                  ? static_cast<int>(x_bytes)
                  : 0;
    layout_slots(p, start_stage, a.ring_depth);
    if (p.x_all > 0 && p.depth < kMinDepth) {  // a small shared memory: x by stages beside the weights
      p.x_all = 0;
      layout_slots(p, start_stage, a.ring_depth);
    }
    if (p.copy_mode == 2 && !encode_tensor_maps(p)) {
      p.copy_mode = 0;  // no encoder (driver): 16-byte cp.async, the same bits
      p.row_pad = 1;
      layout_slots(p, start_stage, a.ring_depth);
    }
    if (p.depth < 2)
      throw StatusError(resource_exhausted("quant_gemv: a ring stage of " + std::to_string(p.slot_bytes) +
                                           " bytes leaves fewer than 2 in the GPU's shared memory"));
    for (int i = 0, j = 0; i < count; ++i) {
      if (segs[i].n == 0) continue;
      p.seg[j].out = segs[i].out + r0 * segs[i].ldo;
      p.seg[j].ldo = segs[i].ldo;
      ++j;
    }
    if (p.x_all == 0) {
      const int64_t threads = p.chunks * p.m * 4;
      const XParams xp{a.x + r0 * a.ldx,         a.ldx,  a.k, p.chunks, p.m, xf, pdl,
                       op == Operand::kWeightsA, p.x_vec};
      const cudaError_t ex =
          launch_kernel_ex(ring_x_fragments, dim3(grid_1d(threads)), dim3(256), 0, stream, nullptr, pdl, xp);
      if (ex != cudaSuccess)
        throw StatusError(
            internal_error(std::string("quant_gemv (ring): x launch failed: ") + cudaGetErrorString(ex)));
    }
    const size_t smem = size_t(p.depth) * p.slot_bytes + p.x_all;
    const RingKernel kernel = ring_kernel(per_part, warps, op, p.m);
    const cudaError_t e =
        launch_kernel_ex(kernel, dim3(grid), dim3((warps + 2) * 32), smem, stream, nullptr, pdl, p);
    if (e != cudaSuccess)
      throw StatusError(
          internal_error(std::string("quant_gemv (ring): launch failed: ") + cudaGetErrorString(e)));
  }
  check_launch("quant_gemv");
}

}  // namespace tf::cuda
