// The decode-batch (1-8 tokens) body of moe_experts_exl3: three launches per layer
// instead of the grouped path's six (exl3_moe.cu), with no route, rotate or act kernel.
//
//   F1 flat_gate_up_kernel: grid (gate/up column blocks x kMoeSplits, pairs, 2). Block
//      (nb, split, pair p) reads ids[p] itself; p leads its expert when no earlier pair
//      names the same expert (else the block exits: the leader serves all of the
//      expert's pairs, so each expert's tiles are streamed once per call). The block
//      rotates its own slice of the input rows (x * suh, FWHT per 128 inputs: the
//      Hadamard blocks its k-split touches) into shared memory while its first weight
//      copies are in flight, streams its tiles (exl3_stream.cuh) and writes the partial
//      sums of each pair: part[split][pair][n].
//   F2 flat_down_kernel: grid (down column blocks x kMoeSplits, pairs). Issues its
//      weight copies, waits for F1 (programmatic dependent launch), then builds its own
//      slice of down's input from F1's partials: sum of splits, FWHT, * svh (+ bias) for
//      gate and up, SwiGLU, * suh_down, FWHT (the act kernel of the grouped path, per
//      block: a k-split of down is a whole number of 128-column blocks of act);
//      streams down's tiles into part_down[split][pair][n].
//   F3 (exl3_moe.cu, flat_combine_kernel): out[t] = sum_j w[t,j] * (FWHT(sum of down's
//      splits) * svh + bias) in j order (one warp per j, then the ordered sum).
// Columns: each warp of F1/F2 streams a.cols[proj] n-tiles (kGemvWarps apart) back to back
// through one ring (WarpStream::cols): fewer, longer blocks, so the per-block routing,
// rotation and finish are paid 2-4x less often and the ring does not drain between tiles.
// Every float operation and its order is the grouped path's (same splits, same
// butterflies, same SwiGLU), so a token gets the same bits on either path: the
// grouped path stays the reference for row independence past 8 tokens.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_stream.cuh"

namespace tf::cuda::exl3 {

constexpr int kMoeSplits = 4;  // k-splits of every MoE GEMV (fixed: row independence)
constexpr int kProjGate = 0, kProjUp = 1, kProjDown = 2;
constexpr int kFlatMaxPairs = 64;  // tokens * k of a flat call (8 tokens, top-8)
constexpr int kFlatPassRows = 8;   // rows of one MMA pass (one 8-row tile)

struct ExpertPtrs {
  const uint32_t* trellis[3];
  const __half* suh[3];
  const __half* svh[3];
  const __half* bias[3];  // null when absent
};

struct FlatArgs {
  const ExpertPtrs* table;
  const int* ids;  // [T, k] routing
  int pairs, k, experts;
  const float* x;  // [T, h]
  int64_t h, inter;
  float* part[3];  // partials per projection: [kMoeSplits][pairs][n_pad]
  int64_t tiles_k[3], tiles_n[3];
  int per[3];      // k-tiles per split
  int proj0;       // projection of blockIdx.z == 0 (F1)
  int pass_rows;   // rows of xf in shared memory (<= kFlatPassRows)
  int cols[3];     // 16-column n-tiles each warp streams back to back (WarpStream::cols)
  float limit;     // SwiGLU clamp
};

// Resident blocks per SM the flat kernels are compiled for: at K = 4 the register cap
// (64) lets 4 blocks of 8 warps share an SM instead of 2-3. H200 run1s7 measured no difference
// (112.4 vs 111.7 us, kNoRegCap); on the session-8 loop with word hashes the uncapped kernels
// won at every token count (run6s10, 1 / 2 / 4 / 8 tokens: 76.3 / 142.6 / 263.2 / 469.3 ->
// 71.9 / 136.6 / 261.0 / 457.3 us: at 64 registers the compiler decoded tile after tile, with
// room to overlap them it hides the decode's dependent latencies), so the default (kUncapped)
// runs without the cap; the other modes keep it for A/B against earlier runs.
template <int K, int Mode>
constexpr int flat_min_blocks() {
  return K == 4 && mode_base(Mode) != kNoRegCap && (Mode & kUncapped) == 0 ? 4 : 1;
}

// The warp stream of a flat kernel compiled for Mode (its kStage8 flag sets the ring's shape).
template <int K, int Mode>
using FlatStream = WarpStream<K, mode_stage_tiles(Mode), mode_stages(Mode)>;

// Shared-memory bytes of a flat kernel's block: the warps' rings, then xf.
template <int K, int Mode = kNormal>
constexpr size_t flat_ring_bytes() {
  return static_cast<size_t>(kGemvWarps) * ring_words<K, mode_stage_tiles(Mode), mode_stages(Mode)>() * 4;
}

// The routing of a flat block (every thread must call it): the expert of pair p, or -1
// when p does not lead it (an earlier pair names the same expert: that pair's block
// serves both) or its id is outside [0, experts) (the combine kernel reports that);
// for a leader, list[0 .. *count) = the pairs naming the expert from p on, in order.
// The ids go through shared memory once (up to 64 pairs), not a serial walk per thread.
__device__ __forceinline__ int flat_route(const FlatArgs& a, int p, int* s_ids, int* list, int* count) {
  const int tid = threadIdx.x;
  if (tid < a.pairs) s_ids[tid] = a.ids[tid];
  __syncthreads();
  const int e = s_ids[p];
  if (e < 0 || e >= a.experts) return -1;  // block-uniform
  if (__syncthreads_or(tid < p && s_ids[tid] == e)) return -1;
  if (tid == 0) {
    int n = 0;
    for (int q = p; q < a.pairs; ++q)
      if (s_ids[q] == e) list[n++] = q;
    *count = n;
  }
  __syncthreads();
  return e;
}

// Writes a lane's C fragment (one 8-row tile, rows = list[0..rows)) into part[pair][n].
__device__ __forceinline__ void flat_store(float* __restrict__ part, int64_t n, int64_t n0, const int* list,
                                           int rows, const float (&acc)[1][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if (2 * t < rows) {
    float* o = part + static_cast<int64_t>(list[2 * t]) * n + n0 + g;
    o[0] = acc[0][0];
    o[8] = acc[0][2];
  }
  if (2 * t + 1 < rows) {
    float* o = part + static_cast<int64_t>(list[2 * t + 1]) * n + n0 + g;
    o[0] = acc[0][1];
    o[8] = acc[0][3];
  }
}

// Pulls the 128 halves at v + c0 (256 bytes, two lines) into this SM's L1 (kPrefetchScales:
// a finish's weight-side vectors before a programmatic-launch wait, so the reads after it hit
// L1 instead of waiting on HBM; no registers held across the wait).
__device__ __forceinline__ void prefetch_l1_128h(const __half* v, int64_t c0) {
  const int lane = threadIdx.x & 31;
  if (v && lane < 2) asm volatile("prefetch.global.L1 [%0];" ::"l"(v + c0 + 64 * lane));
}

// Warp version of the grouped path's finish(): lane holds columns c0 + lane + 32q.
__device__ __forceinline__ void flat_finish(const float* __restrict__ part, int pairs, int64_t n, int pair,
                                            int64_t c0, const __half* __restrict__ svh,
                                            const __half* __restrict__ bias, float (&v)[4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = 0.0f;
#pragma unroll
  for (int s = 0; s < kMoeSplits; ++s)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      v[q] = __fadd_rn(v[q], part[(static_cast<int64_t>(s) * pairs + pair) * n + c0 + lane + 32 * q]);
  warp_fwht128(v, kHadamardNorm);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t c = c0 + lane + 32 * q;
    v[q] = __fmul_rn(v[q], __half2float(svh[c]));
    if (bias) v[q] = __fadd_rn(v[q], __half2float(bias[c]));
  }
}

// Stores rotated values of input columns c0 + lane + 32q that fall in this block's k
// range [kc0, kc1) into its row's fragments (k-chunk 0 = column kc0).
__device__ __forceinline__ void flat_store_rotated(uint4* __restrict__ row_frags, int64_t c0, int64_t kc0,
                                                   int64_t kc1, const float (&v)[4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int64_t c = c0 + lane + 32 * q;
    if (c >= kc0 && c < kc1) store_fragment_value(row_frags, static_cast<int>(c - kc0), v[q]);
  }
}

// F1: see the file comment. Mode: exl3_stream.cuh StreamMode (timing variants).
template <int K, int CB, int Mode>
__global__ void __launch_bounds__(kGemvWarps * 32, flat_min_blocks<K, Mode>()) flat_gate_up_kernel(FlatArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int s_ids[kFlatMaxPairs], list[kFlatMaxPairs];
  __shared__ int count;
  const int p = blockIdx.y, proj = a.proj0 + blockIdx.z;
  const int e = flat_route(a, p, s_ids, list, &count);
  if (e < 0) return;  // block-uniform
  const int64_t tiles_k = a.tiles_k[proj], tiles_n = a.tiles_n[proj];
  const int per = a.per[proj];
  const int split = blockIdx.x % kMoeSplits, nb = blockIdx.x / kMoeSplits, cols = a.cols[proj];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Column c of this warp: n-tile (nb * cols + c) * kGemvWarps + warp (the block's warps
  // read kGemvWarps adjacent tiles = 1 KB at K = 4 per k-tile row).
  const int64_t tn = static_cast<int64_t>(nb) * cols * kGemvWarps + warp;
  const int64_t tk0 = static_cast<int64_t>(split) * per;
  const int ntiles = static_cast<int>(min(static_cast<int64_t>(per), tiles_k - tk0));
  if (ntiles <= 0) return;  // block-uniform
  const ExpertPtrs& ep = a.table[e];
  using Stream = FlatStream<K, Mode>;
  const Stream ws{ep.trellis[proj] + (tk0 * tiles_n + tn) * (8 * K), tiles_n * (8 * K), ntiles,
                  reinterpret_cast<uint32_t*>(smem_raw) + warp * ring_words<K, Stream::kStageTiles, Stream::kStages>(),
                  cols,
                               kGemvWarps * 8 * K};
  ws.template prologue<Mode>(lane);
  pdl_launch_dependents();  // F2 may start streaming down's weights
  auto* xf = reinterpret_cast<uint4*>(smem_raw + flat_ring_bytes<K, Mode>());  // [pass_rows][per * 4]
  const int cnt = count;
  const int64_t kc0 = tk0 * 16, kc1 = (tk0 + ntiles) * 16;
  const int ch0 = static_cast<int>(kc0 / 128), nch = static_cast<int>((kc1 + 127) / 128) - ch0;
  const __half* suh = ep.suh[proj];
  for (int r0 = 0; r0 < cnt; r0 += a.pass_rows) {
    if (r0 > 0) {
      __syncthreads();  // every warp is done with the previous pass's xf
      ws.template prologue<Mode>(lane);
    }
    const int rows = min(cnt - r0, a.pass_rows);
    for (int item = warp; item < rows * nch; item += kGemvWarps) {
      const int r = item / nch;
      const int64_t c0 = static_cast<int64_t>(ch0 + item % nch) * 128;
      const float* xrow = a.x + static_cast<int64_t>(list[r0 + r] / a.k) * a.h;
      float v[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t c = c0 + lane + 32 * q;
        v[q] = c < a.h ? __fmul_rn(xrow[c], __half2float(suh[c])) : 0.0f;
      }
      warp_fwht128(v, kHadamardNorm);
      flat_store_rotated(xf + static_cast<int64_t>(r) * per * 4, c0, kc0, kc1, v);
    }
    __syncthreads();
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    float* part = a.part[proj] + static_cast<int64_t>(split) * a.pairs * (tiles_n * 16);
    ws.template stream<CB, 1, Mode>(xf, static_cast<int64_t>(per) * 4, rows, acc, [&](int c, const float(&v)[1][4]) {
      flat_store(part, tiles_n * 16, (tn + c * kGemvWarps) * 16, list + r0, rows, v);
    });
    flat_store(part, tiles_n * 16, (tn + (cols - 1) * kGemvWarps) * 16, list + r0, rows, acc);
  }
}

// F2: see the file comment.
template <int K, int CB, int Mode>
__global__ void __launch_bounds__(kGemvWarps * 32, flat_min_blocks<K, Mode>()) flat_down_kernel(FlatArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ int s_ids[kFlatMaxPairs], list[kFlatMaxPairs];
  __shared__ int count;
  const int p = blockIdx.y;
  // ids were written before F1 started (F1 is launched without early start): safe to
  // read before waiting on F1.
  const int e = flat_route(a, p, s_ids, list, &count);
  if (e < 0) return;  // block-uniform
  const int64_t tiles_k = a.tiles_k[kProjDown], tiles_n = a.tiles_n[kProjDown];
  const int per = a.per[kProjDown];
  const int split = blockIdx.x % kMoeSplits, nb = blockIdx.x / kMoeSplits, cols = a.cols[kProjDown];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Column c of this warp: n-tile (nb * cols + c) * kGemvWarps + warp (the block's warps
  // read kGemvWarps adjacent tiles = 1 KB at K = 4 per k-tile row).
  const int64_t tn = static_cast<int64_t>(nb) * cols * kGemvWarps + warp;
  const int64_t tk0 = static_cast<int64_t>(split) * per;
  const int ntiles = static_cast<int>(min(static_cast<int64_t>(per), tiles_k - tk0));
  if (ntiles <= 0) return;  // block-uniform
  const ExpertPtrs& ep = a.table[e];
  using Stream = FlatStream<K, Mode>;
  const Stream ws{ep.trellis[kProjDown] + (tk0 * tiles_n + tn) * (8 * K), tiles_n * (8 * K), ntiles,
                  reinterpret_cast<uint32_t*>(smem_raw) + warp * ring_words<K, Stream::kStageTiles, Stream::kStages>(),
                  cols,
                               kGemvWarps * 8 * K};
  ws.template prologue<Mode>(lane);  // weights only: before waiting on F1
  pdl_launch_dependents();
  const int cnt = count;
  const int64_t i_pad = tiles_k * 16;
  const int64_t kc0 = tk0 * 16, kc1 = (tk0 + ntiles) * 16;
  const int ch0 = static_cast<int>(kc0 / 128), nch = static_cast<int>((kc1 + 127) / 128) - ch0;
  if constexpr ((Mode & kPrefetchScales) != 0) {
    // The finish's weight-side vectors of the warp's first item (chunk warp % nch: the later
    // items of a warp repeat it whenever nch divides kGemvWarps) into L1 before the wait.
    if (warp < min(cnt, a.pass_rows) * nch) {
      const int64_t c0 = static_cast<int64_t>(ch0 + warp % nch) * 128;
      prefetch_l1_128h(ep.svh[kProjGate], c0);
      prefetch_l1_128h(ep.svh[kProjUp], c0);
      prefetch_l1_128h(ep.bias[kProjGate], c0);
      prefetch_l1_128h(ep.bias[kProjUp], c0);
      prefetch_l1_128h(ep.suh[kProjDown], c0);
    }
  }
  pdl_wait();
  auto* xf = reinterpret_cast<uint4*>(smem_raw + flat_ring_bytes<K, Mode>());
  for (int r0 = 0; r0 < cnt; r0 += a.pass_rows) {
    if (r0 > 0) {
      __syncthreads();
      ws.template prologue<Mode>(lane);
    }
    const int rows = min(cnt - r0, a.pass_rows);
    for (int item = warp; item < rows * nch; item += kGemvWarps) {
      const int r = item / nch, pair = list[r0 + r];
      const int64_t c0 = static_cast<int64_t>(ch0 + item % nch) * 128;
      float g[4], u[4], v[4];
      flat_finish(a.part[kProjGate], a.pairs, i_pad, pair, c0, ep.svh[kProjGate], ep.bias[kProjGate], g);
      flat_finish(a.part[kProjUp], a.pairs, i_pad, pair, c0, ep.svh[kProjUp], ep.bias[kProjUp], u);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t c = c0 + lane + 32 * q;
        float act = 0.0f;
        if (c < a.inter) {
          // As the CPU's swiglu: silu(min(gate, limit)) * clamp(up, -limit, limit).
          const float gc = fminf(g[q], a.limit);
          const float uc = fminf(fmaxf(u[q], -a.limit), a.limit);
          act = gc / (1.0f + expf(-gc)) * uc;
        }
        v[q] = c < a.inter ? __fmul_rn(act, __half2float(ep.suh[kProjDown][c])) : 0.0f;
      }
      warp_fwht128(v, kHadamardNorm);
      flat_store_rotated(xf + static_cast<int64_t>(r) * per * 4, c0, kc0, kc1, v);
    }
    __syncthreads();
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    float* part = a.part[kProjDown] + static_cast<int64_t>(split) * a.pairs * (tiles_n * 16);
    ws.template stream<CB, 1, Mode>(xf, static_cast<int64_t>(per) * 4, rows, acc, [&](int c, const float(&v)[1][4]) {
      flat_store(part, tiles_n * 16, (tn + c * kGemvWarps) * 16, list + r0, rows, v);
    });
    flat_store(part, tiles_n * 16, (tn + (cols - 1) * kGemvWarps) * 16, list + r0, rows, acc);
  }
}

}  // namespace tf::cuda::exl3
