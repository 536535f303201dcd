// The routed EXL3 experts of a MoE layer in one call, grouped on the device
// (CudaOps::moe_experts_exl3; no host sync, so a decode step can be captured in a CUDA
// graph). Prefill calls (more than 64 tokens) run the grouped body on pieces of 512 tokens,
// or (TF_EXL3_PREFILL=cublas) decode each active expert's W_hat once for cuBLAS
// (exl3_moe_prefill.cu).
//
// Up to 8 tokens (decode) the flat body of exl3_moe_flat.cuh runs instead: three
// launches (gate+up of every active expert in one grid, down with the SwiGLU and its
// input rotation in its prologue, combine), the same arithmetic, so the same bits.
// Beyond 8 tokens (or TF_EXL3_MOE=grouped), the grouped body below.
//
// The layer's experts are uploaded once (exl3_upload_experts): their tensors move to
// the GPU and a device table holds every expert's trellis / suh / svh / bias pointers
// per projection. Per call, six launches:
//   1. route (moe_grouping.cuh, shared with cuda_moe.cu): active experts get slots in
//      ascending id, each (token, j) pair a row (rows of an expert in token order);
//   2. rotate: every row's x * suh (gate and up: their own suh) -> FWHT -> hi/lo fragments;
//   3. grouped GEMV gate + up in one launch: grid (128-column blocks x kMoeSplits, expert
//      slots, 2); each warp streams a column of tiles through its cp.async ring
//      (exl3_stream.cuh) and decodes each tile once for all of the expert's rows (up to 8
//      row tiles of 8 per MMA pass). Launched as a programmatic dependent of the rotation,
//      so its first weight copies overlap it;
//   4. gate/up epilogue: sum splits, FWHT, * svh (+ bias), SwiGLU, then the down
//      projection's input rotation (act * suh_down, FWHT) straight into its fragments
//      (a 128-column block of act is exactly one Hadamard block of down's input);
//   5. grouped GEMV down (programmatic dependent of 4);
//   6. combine: out[t] = 0 + w[t,0] * y(t,0) + w[t,1] * y(t,1) + ... where y(t,j) is the
//      down epilogue (FWHT, * svh, + bias) of the pair's row, in j order, each product
//      and sum rounded on its own (the CPU's scatter_add order).
// A row's arithmetic never depends on the other rows: the k-split count is fixed
// (kMoeSplits) and MMA columns are independent, so a token gives the same bits alone
// or in any batch.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/exl3_launch.cuh"
#include "kernels/cuda/exl3_moe_flat.cuh"
#include "kernels/cuda/exl3_moe_prefill.h"
#include "kernels/cuda/exl3_moe_rows.cuh"
#include "kernels/cuda/exl3_moe_wide.cuh"
#include "kernels/cuda/exl3_stream.cuh"
#include "kernels/cuda/moe_grouping.cuh"

namespace tf::cuda {
namespace {

using exl3::ExpertPtrs;
using exl3::kGemvWarps;
using exl3::kMoeSplits;

constexpr int64_t kMoeMaxTokens = 64;  // one grouped call up to here (decode batches)
// Prefill (more tokens): pieces of this many tokens, one set of six launches per piece for
// all of the layer's experts. The wide GEMV (exl3_moe_wide.cuh, the default) decodes each
// active expert's tiles once per 128 of its rows in the piece and keeps ~72 KB of scratch
// per (token, expert) pair (~590 MB at 1,024 tokens x top-8, reused call to call); the
// decode-sized grouped GEMV (TF_EXL3_PREFILL=pieces) once per 64 rows, with ~170 KB per
// pair, hence its 512-token pieces. H200 prefill-8k, 8-layer 288-expert synthetic (run5s15):
// per expert (Ops' default, TF_EXL3_PREFILL=experts: ~12 launches per active expert) 4,740
// tok/s, grouped pieces of 256 6,465, of 512 7,519. TF_EXL3_PREFILL_PIECE (65..4096)
// overrides both for A/B runs.
constexpr int64_t kPrefillPieceTokens = 512;
constexpr int64_t kWidePieceTokens = 1024;
constexpr int64_t kFlatMaxTokens = 8;  // up to here the flat three-launch body (exl3_moe_flat.cuh)
constexpr int kGate = exl3::kProjGate, kUp = exl3::kProjUp, kDown = exl3::kProjDown;

// What exl3_upload_experts keeps in Exl3ExpertTable::backend_state.
struct DeviceTable {
  Tensor ptrs;  // ExpertPtrs [E] on the device
  int device = -1;
  int64_t experts = 0;
};

// The token grouping (route) is moe_grouping.cuh's, shared with cuda_moe.cu.
using Layout = MoeGroups;

struct GroupedArgs {
  const ExpertPtrs* table;
  int proj0;            // projection of blockIdx.z == 0 (gate and up share a launch)
  const uint4* xr[2];   // per blockIdx.z: the rows' input fragments
  float* part[2];       // per blockIdx.z: partial[split][row][n]
  int64_t tiles_k, tiles_n;
  int per;              // k-tiles per split
  int64_t prows;
  Layout lay;
};

// grid (n_blocks * kMoeSplits, slots, projections): partial[split][row][n] for the rows
// of each slot. Warps stream their tiles through cp.async rings (exl3_stream.cuh); the
// first copies go out before the programmatic-launch wait (the slot table comes from
// the route kernel, which finished before the preceding kernel started).
template <int K, int CB, int RT>
__global__ void __launch_bounds__(kGemvWarps * 32) grouped_gemv_kernel(GroupedArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int slot = blockIdx.y;
  if (slot >= *a.lay.num_active) return;
  const int z = blockIdx.z, proj = a.proj0 + z;
  const int split = blockIdx.x % kMoeSplits, nb = blockIdx.x / kMoeSplits;
  const int e = a.lay.slot_expert[slot], first = a.lay.slot_first[slot], cnt = a.lay.slot_count[slot];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t tn = static_cast<int64_t>(nb) * kGemvWarps + warp;
  const int64_t tk0 = static_cast<int64_t>(split) * a.per;
  const int ntiles = static_cast<int>(min(static_cast<int64_t>(a.per), a.tiles_k - tk0));
  if (ntiles <= 0) return;  // block-uniform
  const int64_t tile_words = 8 * K, n = a.tiles_n * 16, xs = a.tiles_k * 4;
  const exl3::WarpStream<K> ws{a.table[e].trellis[proj] + (tk0 * a.tiles_n + tn) * tile_words,
                               a.tiles_n * tile_words, ntiles,
                               reinterpret_cast<uint32_t*>(smem_raw) + warp * exl3::ring_words<K>()};
  ws.prologue(lane);
  pdl_wait();
  // Passes of 8 * RT rows: one in practice (an expert has at most one row per token, and
  // RT = 8 past 8 tokens); more only when a token names an expert twice.
  for (int r0 = 0; r0 < cnt; r0 += 8 * RT) {
    if (r0 > 0) ws.prologue(lane);
    const int rows = min(cnt - r0, 8 * RT);
    float acc[RT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][i] = 0.0f;
    ws.template run<CB, RT>(a.xr[z] + (first + r0) * xs + tk0 * 4, xs, rows, acc);
    exl3::store_partial<RT>(a.part[z] + (split * a.prows + first + r0) * n, n, tn * 16, rows, acc);
  }
}

template <typename Kernel, typename Args>
void launch_grouped(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, const Args& a) {
  if (const Status st = set_dynamic_smem(kernel, smem, "moe_experts_exl3 (grouped gemv)"); !st.is_ok())
    throw StatusError(st);
  cudaError_t e = cudaSuccess;
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kGemvWarps * 32);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = exl3::pdl_enabled() ? 1 : 0;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, a);
  }
  const Status s = cuda_status(e, "moe_experts_exl3 (grouped gemv launch)");
  if (!s.is_ok()) throw StatusError(s);
}

template <int K, int CB>
struct GroupedKernels {
  static void launch(bool rows8, dim3 grid, cudaStream_t s, const GroupedArgs& a) {
    const size_t smem = static_cast<size_t>(kGemvWarps) * exl3::ring_words<K>() * 4;
    if (rows8) launch_grouped(grouped_gemv_kernel<K, CB, 8>, grid, smem, s, a);
    else launch_grouped(grouped_gemv_kernel<K, CB, 1>, grid, smem, s, a);
  }
};

// The prefill-sized calls' GEMV (exl3_moe_wide.cuh) for one (K, codebook).
// Passes of 48 rows (6 row tiles; 3 stages of 8 k-tiles: ~96 KB of shared memory at K = 4)
// where experts average few rows, else of 128 (16 row tiles, 3 stages of 4: ~108 KB); 2 blocks
// per SM. H200 prefill-8k, 8 layers x 288 experts, 1,024-token chunks (session 25, run5s25,
// tok/s): 48 rows x 3 stages of 8 at 2 blocks per SM 15,310 / 15,309; x 4 stages of 4 15,157 /
// 15,175; x 4 stages of 4 at 3 blocks per SM (80 registers) 14,678 / 14,664; 32 rows x 4 stages
// of 8 (run3s25) 14,630. TF_EXL3_WIDE=1 runs the many-rows case in 64-row passes (K = 4 mcg
// only; A/B runs).
template <int K, int CB>
struct WideKernels {
  template <int RT, int NS, int MinBlocks, int ST>
  static void run(bool x_half, dim3 grid, cudaStream_t s, const exl3::WideArgs& a) {
    if (x_half)
      launch_grouped(exl3::wide_gemv_kernel<K, CB, RT, NS, MinBlocks, ST, true>, grid,
                     exl3::wide_smem_bytes<K, RT, NS, ST, true>(), s, a);
    else
      launch_grouped(exl3::wide_gemv_kernel<K, CB, RT, NS, MinBlocks, ST, false>, grid,
                     exl3::wide_smem_bytes<K, RT, NS, ST, false>(), s, a);
  }
  // Whether a block of this shape fits the GPU's shared memory (~1 KB static beside it), in
  // either precision (the split one stages twice the fragment bytes).
  template <int RT, int NS, int ST>
  static bool fits() {
    return smem_fits(exl3::wide_smem_bytes<K, RT, NS, ST, false>(), 1024);
  }
  // A GPU with less shared memory per block (sm_120 / sm_121: 99 KB) runs the same passes
  // through a 2-stage ring (the ring's depth does not change the sums).
  static void launch(bool small, int shape, bool x_half, dim3 grid, cudaStream_t s, const exl3::WideArgs& a) {
    if constexpr (K == 4 && CB == exl3::kCbMcg) {
      if (shape == 1 && !small && fits<8, 4, 4>()) return run<8, 4, 2, 4>(x_half, grid, s, a);
    }
    if (small) return fits<6, 3, 8>() ? run<6, 3, 2, 8>(x_half, grid, s, a) : run<6, 2, 2, 8>(x_half, grid, s, a);
    return fits<16, 3, 4>() ? run<16, 3, 2, 4>(x_half, grid, s, a) : run<16, 2, 2, 4>(x_half, grid, s, a);
  }
};

int wide_shape() {
  static const int v = [] {
    const char* e = std::getenv("TF_EXL3_WIDE");
    return e ? std::atoi(e) : 0;
  }();
  return v;
}

// Whether a wide call takes the 48-row passes: experts average at most kWideSmallRows rows
// (TF_EXL3_WIDE_ROWS=48|128 forces one, for A/B).
constexpr int64_t kWideSmallRows = 40;
bool wide_small_passes(int64_t pairs, int64_t experts) {
  static const int forced = [] {
    const char* e = std::getenv("TF_EXL3_WIDE_ROWS");
    return e ? std::atoi(e) : 0;
  }();
  if (forced == 48) return true;
  if (forced == 128) return false;
  return pairs <= kWideSmallRows * std::min(experts, pairs);
}

// grid (h_pad/128, T): out[t, c] = sum_j w[t, j] * y(row(t, j))[c] in j order; Src: the down
// products (SplitPartials or SummedProducts).
template <typename Src>
__global__ void __launch_bounds__(128)
    combine_kernel(float* __restrict__ out, Src pd, int64_t h_pad, int64_t h, const float* __restrict__ w, int k,
                   const ExpertPtrs* __restrict__ table, Layout lay) {
  __shared__ float smem[128];
  const int t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int row = lay.pair_row[t * k + j];
    if (row < 0) continue;  // block-uniform
    const ExpertPtrs& p = table[lay.row_expert[row]];
    const float y = exl3::finish(pd, h_pad, row, c, p.svh[kDown], p.bias[kDown], smem);
    acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], y));
  }
  if (c < h) out[static_cast<int64_t>(t) * h + c] = acc;
}

// grid (h_pad/128, T), 256 threads: the flat body's combine (combine_kernel's arithmetic,
// partials indexed by pair; an id outside [0, E) contributes nothing and sets the error
// word). Warp j finishes pair j of the token (the warp FWHT, as the flat down kernel's
// finish: the same bits as finish()), all k at once, then the block sums them in j
// order: one finish's latency instead of k in a row (the serial loop cost ~1 us per
// pair at 1 token, H200 run1s7 fixed-only probe).
// Prefetch (exl3::kPrefetchScales): the first group's svh / bias go to L1 before the wait on the
// down kernel (the ids and the table are older than the flat body's first kernel).
// trigger (combine_trigger()): where the kernel lets its successor launch (programmatic dependent
// launch): 2 after its own wait (default), so the next kernel (the shared expert's down GEMV) issues its
// weight copies while this one combines; 1 before the wait (it may then launch while the down kernel
// still runs); 0 never (it launches when this grid ends). The successor still waits for this grid
// before it reads what it writes. H200 run1s12, decode-1 (45 layers, EXL3 + q4): 0 / 1 / 2 =
// 118.9 / 122.8 / 122.9 tok/s.
constexpr int kCombineWarps = 8;
template <bool Prefetch>
__global__ void __launch_bounds__(kCombineWarps * 32)
    flat_combine_kernel(float* __restrict__ out, const float* __restrict__ pd, int pairs, int64_t h_pad, int64_t h,
                        const float* __restrict__ w, const int* __restrict__ ids, int k, int experts,
                        const ExpertPtrs* __restrict__ table, unsigned* err, int trigger) {
  __shared__ float ys[kCombineWarps][128];
  __shared__ int ok[kCombineWarps];
  const int t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 128;
  if constexpr (Prefetch) {
    if (warp < k) {
      const int e = ids[t * k + warp];
      if (e >= 0 && e < experts) {
        exl3::prefetch_l1_128h(table[e].svh[kDown], c0);
        exl3::prefetch_l1_128h(table[e].bias[kDown], c0);
      }
    }
  }
  if (trigger == 1) pdl_launch_dependents();
  pdl_wait();
  if (trigger == 2) pdl_launch_dependents();
  float acc = 0.0f;
  for (int j0 = 0; j0 < k; j0 += kCombineWarps) {
    const int j = j0 + warp;
    if (j < k) {
      const int pair = t * k + j, e = ids[pair];
      const bool valid = e >= 0 && e < experts;  // warp-uniform
      if (valid) {
        const ExpertPtrs& p = table[e];
        float v[4];
        exl3::flat_finish(pd, pairs, h_pad, pair, c0, p.svh[kDown], p.bias[kDown], v);
#pragma unroll
        for (int q = 0; q < 4; ++q) ys[warp][lane + 32 * q] = v[q];
      } else if (lane == 0 && blockIdx.x == 0) {
        atomicOr(err, kErrMoeExpertId);
      }
      if (lane == 0) ok[warp] = valid ? 1 : 0;
    }
    __syncthreads();
    if (threadIdx.x < 128)
      for (int jj = 0; jj < kCombineWarps && j0 + jj < k; ++jj)
        if (ok[jj]) acc = __fadd_rn(acc, __fmul_rn(w[t * k + j0 + jj], ys[jj][threadIdx.x]));
    __syncthreads();  // ys is rewritten by the next group
  }
  const int64_t c = c0 + threadIdx.x;
  if (threadIdx.x < 128 && c < h) out[static_cast<int64_t>(t) * h + c] = acc;
}

// Launches `kernel` with `smem` dynamic shared memory, as a programmatic dependent of
// the preceding kernel when `pdl` (and PDL is enabled).
template <typename Kernel, typename... Args>
void launch_ex(const char* what, Kernel kernel, dim3 grid, int threads, size_t smem, bool pdl, cudaStream_t stream,
               Args... args) {
  cudaError_t e = cudaSuccess;
  // The opt-in is needed once dynamic + static shared memory pass 48 KB; the flat kernels
  // hold ~0.5 KB of static ids, so opt in with margin (flat gate/up at 6 rows: 24 KB of ring
  // + 24 KB of xf = exactly 48 KB dynamic failed with cudaErrorInvalidValue).
  if (smem + 4096 > 48 * 1024)
    if (const Status st = set_dynamic_smem(kernel, smem, what); !st.is_ok()) throw StatusError(st);
  {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = pdl && exl3::pdl_enabled() ? 1 : 0;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, kernel, args...);
  }
  const Status s = cuda_status(e, what);
  if (!s.is_ok()) throw StatusError(s);
}

// The flat body's default stream flags (exl3_stream.cuh kFmaPack / kStage8 / kDupStates), the
// issue-8 levers: 8-tile ring stages (half the per-stage bookkeeping per tile; with them the
// per-tile rows check goes, exl3_stream.cuh kTrim): H200 run1s8, 1 token 84.3 -> 79.5 us,
// 2 tokens 154.1 -> 144.0 us (the FMA pack and the doubled states were slower in the full
// kernel: 83.7 / 81.2 us, though faster in the decode-only probe: 58.7 -> 53.8 us).
// TF_EXL3_MOE=flat-prev (kExl3MoeFlatPrev) runs the flat body without them for A/B.
// 16-tile stages (run2s8): 1 token 81.5 -> 78.2 us, 2 / 4 / 8 tokens 148.8 / 283.0 / 492.0 ->
// 145.0 / 270.5 / 477.8 us, bit-identical (the default since then).
// + K = 4 hashes from the stream words (kWordHash, lane_hashes_k4: 4 ALU ops per tile to the FMA
// pipe), H200 run4s10, stage16 -> + word hashes: 1 / 2 / 4 / 8 tokens 77.8 / 144.5 / 268.9 / 481.4
// -> 76.3 / 141.5 / 261.3 / 474.7 us, bit-identical (TF_EXL3_MOE=flat-stage16 runs without).
// + no 64-register cap (kUncapped, exl3_moe_flat.cuh flat_min_blocks), H200 run6s10: 1 / 2 / 4 / 8
// tokens 76.3 / 142.6 / 263.2 / 469.3 -> 71.9 / 136.6 / 261.0 / 457.3 us (TF_EXL3_MOE=flat-wordhash:
// word hashes with the cap).
constexpr int kFlatDefaultFlags = exl3::kStage16 | exl3::kWordHash | exl3::kUncapped;
constexpr int kFlatDefault = exl3::kNormal | kFlatDefaultFlags;

// The flat body's GEMV kernels for one (K, codebook); Mode: exl3_stream.cuh StreamMode.
template <int K, int CB>
struct FlatKernels {
  template <int Mode>
  static void run(bool down, dim3 grid, cudaStream_t s, const exl3::FlatArgs& a) {
    const int per = down ? a.per[kDown] : a.per[a.proj0];
    const size_t smem = exl3::flat_ring_bytes<K, Mode>() + static_cast<size_t>(a.pass_rows) * per * 64;
    if (down) launch_ex("moe_experts_exl3 (flat down)", exl3::flat_down_kernel<K, CB, Mode>, grid, kGemvWarps * 32,
                        smem, true, s, a);
    else launch_ex("moe_experts_exl3 (flat gate/up)", exl3::flat_gate_up_kernel<K, CB, Mode>, grid,
                   kGemvWarps * 32, smem, false, s, a);
  }
  static void launch(int mode, bool down, dim3 grid, cudaStream_t s, const exl3::FlatArgs& a) {
    // The timing-only variants exist for K = 4 mcg, the format of GLM-5.3-Flash's experts.
    // Other formats run the default kernel whatever the mode.
    if constexpr (K == 4 && CB == exl3::kCbMcg) {
      constexpr int kDef = kFlatDefaultFlags;
      if (mode == exl3::kNormal) return run<exl3::kNormal>(down, grid, s, a);
      if (mode == (exl3::kLoadOnly | kDef)) return run<exl3::kLoadOnly | kDef>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | kDef)) return run<exl3::kDecodeOnly | kDef>(down, grid, s, a);
      if (mode == (exl3::kFixedOnly | kDef)) return run<exl3::kFixedOnly | kDef>(down, grid, s, a);
      if (mode == exl3::kOldLoop) return run<exl3::kOldLoop>(down, grid, s, a);
      if (mode == (exl3::kNoRegCap | kDef)) return run<exl3::kNoRegCap | kDef>(down, grid, s, a);
      // The issue-8 levers (exl3_stream.cuh kFmaPack / kStage8) and their probes.
      constexpr int kF = exl3::kFmaPack, kS = exl3::kStage8, kD = exl3::kDupStates;
      if (mode == kF) return run<kF>(down, grid, s, a);
      if (mode == kS) return run<kS>(down, grid, s, a);
      if (mode == (kF | kS)) return run<kF | kS>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | kF)) return run<exl3::kDecodeOnly | kF>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | kF | kS)) return run<exl3::kDecodeOnly | kF | kS>(down, grid, s, a);
      if (mode == (exl3::kLoadOnly | kS)) return run<exl3::kLoadOnly | kS>(down, grid, s, a);
      if (mode == (kF | kD)) return run<kF | kD>(down, grid, s, a);
      if (mode == (kF | kD | kS)) return run<kF | kD | kS>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | kF | kD | kS)) return run<exl3::kDecodeOnly | kF | kD | kS>(down, grid, s, a);
      if (mode == exl3::kStage16) return run<exl3::kStage16>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | exl3::kStage16))
        return run<exl3::kDecodeOnly | exl3::kStage16>(down, grid, s, a);
      // Session 10: interleaved columns, word hashes (exl3_stream.cuh kInterleave2/4, kWordHash),
      // the finish scales before the waits (kPrefetchScales).
      constexpr int k16 = exl3::kStage16, kI2 = exl3::kInterleave2, kI4 = exl3::kInterleave4, kW = exl3::kWordHash;
      constexpr int kP = exl3::kPrefetchScales;
      if (mode == (k16 | kI2)) return run<k16 | kI2>(down, grid, s, a);
      if (mode == (k16 | kI4)) return run<k16 | kI4>(down, grid, s, a);
      if (mode == (k16 | kI2 | kW)) return run<k16 | kI2 | kW>(down, grid, s, a);
      if (mode == (k16 | kI4 | kW)) return run<k16 | kI4 | kW>(down, grid, s, a);
      if (mode == (k16 | kI2 | kW | kF)) return run<k16 | kI2 | kW | kF>(down, grid, s, a);
      if (mode == (k16 | kI4 | kW | kF)) return run<k16 | kI4 | kW | kF>(down, grid, s, a);
      if (mode == (exl3::kDecodeOnly | k16 | kI2 | kW))
        return run<exl3::kDecodeOnly | k16 | kI2 | kW>(down, grid, s, a);
      constexpr int kU = exl3::kUncapped;
      if (mode == (k16 | kW)) return run<k16 | kW>(down, grid, s, a);
      if (mode == (k16 | kI2 | kW | kU)) return run<k16 | kI2 | kW | kU>(down, grid, s, a);
      if (mode == (kDef | kP)) return run<kDef | kP>(down, grid, s, a);
      if (mode == (exl3::kFixedOnly | kDef | kP)) return run<exl3::kFixedOnly | kDef | kP>(down, grid, s, a);
    }
    if constexpr (K >= 6) {
      // A GPU with 99 KB per block (sm_120 / sm_121): the default's 16-tile stages at K >= 6 do
      // not fit beside a pass's rows; the 4-tile ring of kNormal does (the same sums).
      const int per = down ? a.per[kDown] : a.per[a.proj0];
      if (!smem_fits(exl3::flat_ring_bytes<K, kFlatDefault>() + static_cast<size_t>(a.pass_rows) * per * 64, 4096))
        return run<exl3::kNormal>(down, grid, s, a);
    }
    run<kFlatDefault>(down, grid, s, a);
  }
};

// A knob's value: what its setter stored, else (read once) the value of the first name
// environment variable `env` equals, else `fallback`.
int knob(std::atomic<int>& slot, const char* env, std::initializer_list<std::pair<const char*, int>> names,
         int fallback) {
  int v = slot.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv(env);
    v = fallback;
    for (const auto& [name, value] : names)
      if (e && std::strcmp(e, name) == 0) v = value;
    slot.store(v, std::memory_order_relaxed);
  }
  return v;
}

// MoE body knob (exl3_set_moe_variant; TF_EXL3_MOE=grouped at start).
std::atomic<int> g_moe_variant{-1};

int moe_variant() {
  return knob(g_moe_variant, "TF_EXL3_MOE",
              {{"grouped", kExl3MoeGrouped},
               {"flat-prev", kExl3MoeFlatPrev},
               {"flat-stage16", kExl3MoeFlatStage16},
               {"flat-wordhash", kExl3MoeFlatWordHash}},
              kExl3MoeAuto);
}

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Prefill path knob (exl3_set_prefill_path; TF_EXL3_PREFILL=cublas|experts at start).
std::atomic<int> g_prefill_path{-1};

int prefill_path() {
  return knob(g_prefill_path, "TF_EXL3_PREFILL",
              {{"experts", kExl3PrefillExperts}, {"cublas", kExl3PrefillCublas}, {"pieces", kExl3PrefillPieces}},
              kExl3PrefillWide);
}

// Wide GEMV precision knob (exl3_set_wide_x; TF_EXL3_WIDE_X=split|half at start).
std::atomic<int> g_wide_x{-1};

bool wide_x_half() {
  return knob(g_wide_x, "TF_EXL3_WIDE_X", {{"half", kExl3WideXHalf}, {"split", kExl3WideXSplit}}, kExl3WideXHalf) ==
         kExl3WideXHalf;
}

int64_t prefill_piece_tokens(bool wide) {
  static const int64_t v = [] {
    const char* e = std::getenv("TF_EXL3_PREFILL_PIECE");
    const int64_t n = e ? std::atoll(e) : 0;
    return n > kMoeMaxTokens && n <= 4096 ? n : 0;
  }();
  return v > 0 ? v : wide ? kWidePieceTokens : kPrefillPieceTokens;
}

const DeviceTable& device_table(const CudaContext& ctx, const Exl3ExpertTable& ex) {
  const auto* dt = static_cast<const DeviceTable*>(ex.backend_state.get());
  if (!dt || dt->device != ctx.device || dt->experts != ex.num_experts())
    throw StatusError(invalid_argument("moe_experts_exl3: the experts were not uploaded to cuda:" +
                                       std::to_string(ctx.device) + " (Ops::upload_exl3_experts)"));
  return *dt;
}

// flat_combine_kernel's trigger: TF_EXL3_COMBINE_TRIGGER=0|1|2 (A/B), default 2 (after its wait).
int combine_trigger() {
  static const int v = [] {
    const char* e = std::getenv("TF_EXL3_COMBINE_TRIGGER");
    return e && (e[0] == '0' || e[0] == '1') && e[1] == 0 ? e[0] - '0' : 2;
  }();
  return v;
}

// The flat body (exl3_moe_flat.cuh): tokens * k <= kFlatMaxPairs.
void flat_moe(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
              const Exl3ExpertTable& ex, const ExpertPtrs* table, float limit, int mode, int cols) {
  const int64_t tokens = x.size(0), k = ids.size(1), pairs = tokens * k;
  const Exl3Weight &g0 = ex.gate[0], &u0 = ex.up[0], &d0 = ex.down[0];
  const int64_t h_pad = g0.in_features(), i_pad = g0.out_features();
  // Partials [S][pairs][n] of gate, up (i_pad) and down (h_pad), f32.
  const int64_t gu_bytes = round_up(kMoeSplits * pairs * i_pad * 4, 256);
  Tensor scratch = ctx.scratch(2 * gu_bytes + kMoeSplits * pairs * h_pad * 4);
  char* base = static_cast<char*>(scratch.raw());
  exl3::FlatArgs a;
  a.table = table;
  a.ids = ids.data<int32_t>();
  a.pairs = static_cast<int>(pairs);
  a.k = static_cast<int>(k);
  a.experts = static_cast<int>(ex.num_experts());
  a.x = x.data<float>();
  a.h = ex.hidden;
  a.inter = ex.intermediate;
  a.part[kGate] = reinterpret_cast<float*>(base);
  a.part[kUp] = reinterpret_cast<float*>(base + gu_bytes);
  a.part[kDown] = reinterpret_cast<float*>(base + 2 * gu_bytes);
  const Exl3Weight* ws[3] = {&g0, &u0, &d0};
  for (int p = 0; p < 3; ++p) {
    a.tiles_k[p] = ws[p]->trellis.size(0);
    a.tiles_n[p] = ws[p]->trellis.size(1);
    a.per[p] = static_cast<int>((a.tiles_k[p] + kMoeSplits - 1) / kMoeSplits);
  }
  // Columns per warp (WarpStream::cols): whole column groups, k-splits of equal length and whole
  // stages per k-split (run_v2), or whole interleaved stages for an interleaving mode
  // (WarpStream::interleave_ok; else the kernel falls back to run_v2). The previous loop
  // (kOldLoop) streams one column. Formats other than K = 4 mcg run kFlatDefault whatever the
  // mode, so the columns must suit both.
  auto cols_ok = [&](int m, int p) {
    const int st = exl3::mode_stage_tiles(m), ic = exl3::mode_interleave(m);
    const bool stages_ok = a.per[p] % st == 0 || (ic > 1 && cols % ic == 0 && a.per[p] % (st / ic) == 0);
    return exl3::mode_base(m) != exl3::kOldLoop && a.tiles_k[p] == int64_t{a.per[p]} * kMoeSplits && stages_ok &&
           a.tiles_n[p] % (int64_t{kGemvWarps} * cols) == 0;
  };
  for (int p = 0; p < 3; ++p) a.cols[p] = cols_ok(mode, p) && cols_ok(kFlatDefault, p) ? cols : 1;
  a.cols[kUp] = a.cols[kGate] = std::min(a.cols[kGate], a.cols[kUp]);  // one grid serves both
  a.proj0 = kGate;
  a.pass_rows = static_cast<int>(std::min<int64_t>(exl3::kFlatPassRows, tokens));
  a.limit = limit;
  const unsigned np = static_cast<unsigned>(pairs);
  auto gate_up = [&](const Exl3Weight& w, int proj0, unsigned nproj) {
    a.proj0 = proj0;
    const dim3 grid(static_cast<unsigned>(w.trellis.size(1) / kGemvWarps / a.cols[proj0] * kMoeSplits), np, nproj);
    exl3_dispatch<FlatKernels>(w.bits, w.codebook,
                               [&](auto kernels) { decltype(kernels)::launch(mode, false, grid, ctx.stream, a); });
  };
  if (g0.bits == u0.bits && g0.codebook == u0.codebook) {
    gate_up(g0, kGate, 2);
  } else {
    gate_up(g0, kGate, 1);
    gate_up(u0, kUp, 1);
  }
  const dim3 dgrid(static_cast<unsigned>(d0.trellis.size(1) / kGemvWarps / a.cols[kDown] * kMoeSplits), np, 1);
  exl3_dispatch<FlatKernels>(d0.bits, d0.codebook,
                             [&](auto kernels) { decltype(kernels)::launch(mode, true, dgrid, ctx.stream, a); });
  const bool prefetch = (mode & exl3::kPrefetchScales) != 0;
  launch_ex("moe_experts_exl3 (flat combine)", prefetch ? flat_combine_kernel<true> : flat_combine_kernel<false>,
            dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(tokens)), kCombineWarps * 32, 0, true,
            ctx.stream,
            static_cast<float*>(out.raw()), static_cast<const float*>(a.part[kDown]), a.pairs, h_pad, ex.hidden,
            weights.data<float>(), a.ids, a.k, a.experts, table, ctx.error_word, combine_trigger());
}

}  // namespace

Status exl3_upload_experts(CudaContext& ctx, Exl3ExpertTable& ex) {
  TF_RETURN_IF_ERROR(check_exl3_expert_table(ex, "EXL3 experts"));
  const Exl3Weight& g0 = ex.gate[0];
  const Exl3Weight& d0 = ex.down[0];
  if (g0.out_features() != d0.in_features() || ex.up[0].out_features() != g0.out_features() ||
      ex.up[0].in_features() != g0.in_features() || d0.out_features() != g0.in_features())
    return invalid_argument("EXL3 experts: gate " + g0.trellis.describe() + ", up " + ex.up[0].trellis.describe() +
                            " and down " + d0.trellis.describe() + " do not chain (padded widths)");
  auto to_dev = [&](Tensor& t) -> Status {
    if (t.is_null() || (t.device().kind == DeviceKind::kCuda && t.device().index == ctx.device)) return Status::ok();
    auto storage = ctx.alloc->allocate(static_cast<size_t>(t.nbytes()));
    if (!storage) return storage.status();
    Tensor d = Tensor::on_storage(*storage, 0, t.shape(), t.dtype());
    TF_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d.raw(), t.raw(), t.nbytes(), cudaMemcpyDefault, ctx.stream),
                                   "EXL3 expert upload"));
    TF_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(ctx.stream), "EXL3 expert upload"));
    t = d;
    return Status::ok();
  };
  const int64_t e = ex.num_experts();
  std::vector<ExpertPtrs> host(static_cast<size_t>(e));
  std::vector<Exl3Weight>* sets[3] = {&ex.gate, &ex.up, &ex.down};
  for (int p = 0; p < 3; ++p)
    for (int64_t i = 0; i < e; ++i) {
      Exl3Weight& w = (*sets[p])[i];
      for (Tensor* t : {&w.trellis, &w.suh, &w.svh, &w.bias}) TF_RETURN_IF_ERROR(to_dev(*t));
      host[i].trellis[p] = w.trellis.data<uint32_t>();
      host[i].suh[p] = static_cast<const __half*>(w.suh.raw());
      host[i].svh[p] = static_cast<const __half*>(w.svh.raw());
      host[i].bias[p] = w.bias.is_null() ? nullptr : static_cast<const __half*>(w.bias.raw());
    }
  auto dt = std::make_shared<DeviceTable>();
  auto storage = ctx.alloc->allocate(host.size() * sizeof(ExpertPtrs));
  if (!storage) return storage.status();
  dt->ptrs = Tensor::on_storage(*storage, 0, {static_cast<int64_t>(host.size() * sizeof(ExpertPtrs))}, DType::kU8);
  TF_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dt->ptrs.raw(), host.data(), host.size() * sizeof(ExpertPtrs),
                                            cudaMemcpyHostToDevice),
                                 "EXL3 expert table upload"));
  dt->device = ctx.device;
  dt->experts = e;
  ex.backend_state = std::move(dt);
  return Status::ok();
}

namespace {

// The checks every call passes; the experts' device table.
const ExpertPtrs* check_call(CudaContext& ctx, const Tensor& out, const Tensor& x, const Tensor& ids,
                             const Tensor& weights, const Exl3ExpertTable& ex) {
  const int64_t h = ex.hidden, experts = ex.num_experts();
  check_dev(ctx, "moe_experts_exl3 x", x, DType::kF32);
  if (x.dim() != 2 || x.size(1) != h)
    throw StatusError(invalid_argument("moe_experts_exl3: x " + x.describe() + " is not [T, " + std::to_string(h) + "]"));
  const int64_t tokens = x.size(0);
  check_dev(ctx, "moe_experts_exl3 ids", ids, DType::kI32);
  if (ids.dim() != 2 || ids.size(0) != tokens)
    throw StatusError(invalid_argument("moe_experts_exl3: ids " + ids.describe() + " is not [T, k]"));
  const int64_t pairs = tokens * ids.size(1);
  check_dev(ctx, "moe_experts_exl3 weights", weights, DType::kF32, pairs);
  check_dev(ctx, "moe_experts_exl3 out", out, DType::kF32, tokens * h);
  if (experts > kMoeGroupingMaxExperts)
    throw StatusError(invalid_argument("moe_experts_exl3: " + std::to_string(experts) + " experts (at most " +
                                       std::to_string(kMoeGroupingMaxExperts) + ")"));
  return static_cast<const ExpertPtrs*>(device_table(ctx, ex).ptrs.raw());
}

// One call of the flat or grouped body (at most one prefill piece of tokens); `wide`: a
// prefill piece through the wide GEMV (exl3_moe_wide.cuh), the same bits.
void moe_call(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
              const Exl3ExpertTable& ex, float swiglu_limit, bool wide = false) {
  const ExpertPtrs* table = check_call(ctx, out, x, ids, weights, ex);
  const int64_t h = ex.hidden, inter = ex.intermediate, experts = ex.num_experts();
  const int64_t tokens = x.size(0), k = ids.size(1), pairs = tokens * k;
  if (tokens == 0) return;
  const Exl3Weight &g0 = ex.gate[0], &u0 = ex.up[0], &d0 = ex.down[0];
  const int64_t h_pad = g0.in_features(), i_pad = g0.out_features();

  const int variant = moe_variant();
  // exl3::StreamMode and columns per warp of a flat variant. Default 4 columns per warp
  // (H200 run2s7, 1 / 2 / 4 columns: 1 token 92.5 / 85.1 / 84.2 us, 8 tokens 626 / 548 /
  // 509 us; the shapes that do not split evenly fall back to 1 in flat_moe).
  constexpr int kAutoCols = 4;
  int flat_mode = -1, flat_cols = kAutoCols;
  switch (variant) {
    case kExl3MoeFlat: flat_mode = kFlatDefault; break;
    case kExl3MoeFlatCols1: flat_mode = kFlatDefault, flat_cols = 1; break;
    case kExl3MoeFlatCols2: flat_mode = kFlatDefault, flat_cols = 2; break;
    case kExl3MoeFlatCols4: flat_mode = kFlatDefault, flat_cols = 4; break;
    case kExl3MoeFlatNoRegCap: flat_mode = exl3::kNoRegCap | kFlatDefaultFlags; break;
    case kExl3MoeFlatLoadOnly: flat_mode = exl3::kLoadOnly | kFlatDefaultFlags; break;
    case kExl3MoeFlatDecodeOnly: flat_mode = exl3::kDecodeOnly | kFlatDefaultFlags; break;
    case kExl3MoeFlatFixedOnly: flat_mode = exl3::kFixedOnly | kFlatDefaultFlags; break;
    case kExl3MoeFlatPrev: flat_mode = exl3::kNormal; break;
    case kExl3MoeFlatStage16: flat_mode = exl3::kStage16; break;
    case kExl3MoeFlatStage16DecodeOnly: flat_mode = exl3::kDecodeOnly | exl3::kStage16; break;
    case kExl3MoeFlatOldLoop: flat_mode = exl3::kOldLoop, flat_cols = 1; break;
    case kExl3MoeFlatFmaPack: flat_mode = exl3::kFmaPack; break;
    case kExl3MoeFlatStage8: flat_mode = exl3::kStage8; break;
    case kExl3MoeFlatFmaStage8: flat_mode = exl3::kFmaPack | exl3::kStage8; break;
    case kExl3MoeFlatFmaDecodeOnly: flat_mode = exl3::kDecodeOnly | exl3::kFmaPack; break;
    case kExl3MoeFlatFmaStage8DecodeOnly: flat_mode = exl3::kDecodeOnly | exl3::kFmaPack | exl3::kStage8; break;
    case kExl3MoeFlatStage8LoadOnly: flat_mode = exl3::kLoadOnly | exl3::kStage8; break;
    case kExl3MoeFlatFmaDup: flat_mode = exl3::kFmaPack | exl3::kDupStates; break;
    case kExl3MoeFlatFmaDupStage8: flat_mode = exl3::kFmaPack | exl3::kDupStates | exl3::kStage8; break;
    case kExl3MoeFlatFmaDupStage8DecodeOnly:
      flat_mode = exl3::kDecodeOnly | exl3::kFmaPack | exl3::kDupStates | exl3::kStage8;
      break;
    case kExl3MoeFlatIlp2: flat_mode = exl3::kStage16 | exl3::kInterleave2; break;
    case kExl3MoeFlatIlp4: flat_mode = exl3::kStage16 | exl3::kInterleave4; break;
    case kExl3MoeFlatWordHash: flat_mode = exl3::kStage16 | exl3::kWordHash; break;
    case kExl3MoeFlatIlp2WordHash: flat_mode = exl3::kStage16 | exl3::kInterleave2 | exl3::kWordHash; break;
    case kExl3MoeFlatIlp4WordHash: flat_mode = exl3::kStage16 | exl3::kInterleave4 | exl3::kWordHash; break;
    case kExl3MoeFlatIlp2WordHashUncapped:
      flat_mode = exl3::kStage16 | exl3::kInterleave2 | exl3::kWordHash | exl3::kUncapped;
      break;
    case kExl3MoeFlatIlp2WordHashFma:
      flat_mode = exl3::kStage16 | exl3::kInterleave2 | exl3::kWordHash | exl3::kFmaPack;
      break;
    case kExl3MoeFlatIlp4WordHashFma:
      flat_mode = exl3::kStage16 | exl3::kInterleave4 | exl3::kWordHash | exl3::kFmaPack;
      break;
    case kExl3MoeFlatIlp2Cols2: flat_mode = exl3::kStage16 | exl3::kInterleave2, flat_cols = 2; break;
    case kExl3MoeFlatIlp2WordHashDecodeOnly:
      flat_mode = exl3::kDecodeOnly | exl3::kStage16 | exl3::kInterleave2 | exl3::kWordHash;
      break;
    case kExl3MoeFlatWordHashPrefetch: flat_mode = kFlatDefault | exl3::kPrefetchScales; break;
    case kExl3MoeFlatFixedOnlyPrefetch:
      flat_mode = exl3::kFixedOnly | kFlatDefaultFlags | exl3::kPrefetchScales;
      break;
    default: break;
  }
  if (variant == kExl3MoeAuto && tokens <= kFlatMaxTokens) flat_mode = kFlatDefault;
  if (pairs <= exl3::kFlatMaxPairs && flat_mode >= 0) {
    flat_moe(ctx, out, x, ids, weights, ex, table, swiglu_limit, flat_mode, flat_cols);
    return;
  }

  // Scratch: layout ints, then xr gate/up [P, h_pad * x_bytes], xr down [P, i_pad * x_bytes],
  // partials gate/up [S, P, i_pad], down [S, P, h_pad] (f32; S = kMoeSplits, or 1 when wide:
  // the wide GEMV sums the splits itself). x_half: the wide GEMV takes x in fp16, its fragments
  // the hi halves alone (2 B per input, else 4); read once, so the fragments' layout and the
  // kernels that read them agree.
  const int64_t splits = wide ? 1 : kMoeSplits;
  const bool x_half = wide && wide_x_half();
  const int64_t x_bytes = x_half ? 2 : 4;
  const int64_t slots = moe_max_slots(experts, pairs);
  const int64_t n_ints = moe_groups_ints(experts, pairs, 0);
  int64_t off = round_up(n_ints * 4, 256);
  const int64_t xg_off = off;
  off += round_up(pairs * h_pad * x_bytes, 256);
  const int64_t xu_off = off;
  off += round_up(pairs * h_pad * x_bytes, 256);
  const int64_t xd_off = off;
  off += round_up(pairs * i_pad * x_bytes, 256);
  const int64_t pg_off = off;
  off += round_up(splits * pairs * i_pad * 4, 256);
  const int64_t pu_off = off;
  off += round_up(splits * pairs * i_pad * 4, 256);
  const int64_t pd_off = off;
  off += round_up(splits * pairs * h_pad * 4, 256);
  Tensor scratch = ctx.scratch(off);
  char* base = static_cast<char*>(scratch.raw());
  const Layout lay = moe_groups_at(reinterpret_cast<int*>(base), experts, pairs, 0);
  char* xg = base + xg_off;
  char* xu = base + xu_off;
  char* xd = base + xd_off;
  auto* pg = reinterpret_cast<float*>(base + pg_off);
  auto* pu = reinterpret_cast<float*>(base + pu_off);
  auto* pd = reinterpret_cast<float*>(base + pd_off);

  launch_moe_grouping(ids.data<int32_t>(), tokens, k, experts, 0, lay, ctx.error_word, ctx.stream);
  check_launch("moe_experts_exl3 (route)");
  // f(sink): sink(p, k_pad) makes the fragment sink of x_half's layout at scratch p.
  auto with_sinks = [&](auto&& f) {
    if (x_half)
      f([](char* p, int64_t k_pad) { return exl3::HalfFragmentSink{reinterpret_cast<uint2*>(p), k_pad}; });
    else
      f([](char* p, int64_t k_pad) { return exl3::FragmentSink{reinterpret_cast<uint4*>(p), k_pad}; });
  };
  with_sinks([&](auto sink) {
    exl3::rotate_rows_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(pairs), 2), 128,
                               0, ctx.stream>>>(sink(xg, h_pad), sink(xu, h_pad), x.data<float>(), h, 0,
                                                table, lay);
  });
  check_launch("moe_experts_exl3 (rotate)");
  const bool rows8 = tokens > 8;  // grouped GEMV: 8 row tiles per pass (else 1)
  // One launch per projection group (gate and up together when their formats agree): the
  // wide GEMV into split-summed products, else the grouped one into kMoeSplits partials.
  auto gemv = [&](const Exl3Weight& w, int proj0, int nproj, const char* xr0, const char* xr1, float* p0,
                  float* p1) {
    const int64_t tiles_k = w.trellis.size(0), tiles_n = w.trellis.size(1);
    const int per = static_cast<int>((tiles_k + kMoeSplits - 1) / kMoeSplits);
    if (wide) {
      const exl3::WideArgs a{table, proj0, {xr0, xr1}, {p0, p1}, tiles_k, tiles_n, per, lay};
      const dim3 grid(static_cast<unsigned>(tiles_n / kGemvWarps), static_cast<unsigned>(slots),
                      static_cast<unsigned>(nproj));
      const bool small = wide_small_passes(pairs, experts);
      exl3_dispatch<WideKernels>(w.bits, w.codebook, [&](auto kernels) {
        decltype(kernels)::launch(small, wide_shape(), x_half, grid, ctx.stream, a);
      });
      return;
    }
    const uint4* xq[2] = {reinterpret_cast<const uint4*>(xr0), reinterpret_cast<const uint4*>(xr1)};
    const GroupedArgs a{table, proj0, {xq[0], xq[1]}, {p0, p1}, tiles_k, tiles_n, per, pairs, lay};
    const dim3 grid(static_cast<unsigned>(tiles_n / kGemvWarps * kMoeSplits), static_cast<unsigned>(slots),
                    static_cast<unsigned>(nproj));
    exl3_dispatch<GroupedKernels>(w.bits, w.codebook, [&](auto kernels) {
      decltype(kernels)::launch(rows8, grid, ctx.stream, a);
    });
  };
  if (g0.bits == u0.bits && g0.codebook == u0.codebook) {
    gemv(g0, kGate, 2, xg, xu, pg, pu);
  } else {
    gemv(g0, kGate, 1, xg, nullptr, pg, nullptr);
    gemv(u0, kUp, 1, xu, nullptr, pu, nullptr);
  }
  // SwiGLU + down's input rotation, down, combine; products(p): how the epilogues read the GEMV's sums.
  auto rest = [&](auto products) {
    with_sinks([&](auto sink) {
      exl3::act_kernel<<<dim3(static_cast<unsigned>(i_pad / 128), static_cast<unsigned>(pairs)), 128, 0,
                         ctx.stream>>>(sink(xd, i_pad), products(pg), products(pu), i_pad, inter, 0, table,
                                       lay, swiglu_limit);
    });
    check_launch("moe_experts_exl3 (act)");
    gemv(d0, kDown, 1, xd, nullptr, pd, nullptr);
    combine_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(tokens)), 128, 0, ctx.stream>>>(
        out.data<float>(), products(pd), h_pad, h, weights.data<float>(), static_cast<int>(k), table, lay);
    check_launch("moe_experts_exl3 (combine)");
  };
  if (wide) rest([](const float* p) { return exl3::SummedProducts{p}; });
  else rest([&](const float* p) { return exl3::SplitPartials{p, pairs}; });
}

}  // namespace

bool exl3_moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Exl3ExpertTable& ex, float swiglu_limit) {
  const int64_t tokens = x.dim() == 2 ? x.size(0) : 0;
  // Up to 64 tokens whatever ctx.exact_rows: these kernels already run on tensor cores and
  // keep rows independent, there is no faster inexact path to hand over to.
  if (tokens <= kMoeMaxTokens) {
    moe_call(ctx, out, x, ids, weights, ex, swiglu_limit);
    return true;
  }
  const int path = prefill_path();
  if (path == kExl3PrefillExperts) return false;
  const int64_t h = ex.hidden;
  const int64_t k = ids.dim() == 2 ? ids.size(1) : 0;
  if (path == kExl3PrefillCublas) {
    const ExpertPtrs* table = check_call(ctx, out, x, ids, weights, ex);
    if (exl3_moe_prefill(ctx, out, x, ids, weights, ex, table, swiglu_limit)) return true;
  }
  // Pieces of the call: a token's rows get the same products (the same k-splits, summed in
  // the same order) in any piece, so its bits do not depend on how the call is cut (from
  // either GEMV with TF_EXL3_WIDE_X=split; by default a wide piece's rows take x in fp16).
  if (ids.dim() != 2 || ids.size(0) != tokens || !ids.is_contiguous())
    throw StatusError(invalid_argument("moe_experts_exl3: ids " + ids.describe() + " is not [T, k]"));
  if (weights.numel() != tokens * k || !weights.is_contiguous() || out.numel() != tokens * h || !out.is_contiguous() ||
      !x.is_contiguous())
    throw StatusError(invalid_argument("moe_experts_exl3: weights " + weights.describe() + " / out " + out.describe() +
                                       " do not match x " + x.describe() + " and ids " + ids.describe()));
  const Tensor w2 = weights.reshape({tokens, k});
  Tensor o2 = out.reshape({tokens, h});
  const bool wide = path == kExl3PrefillWide;
  const int64_t piece = prefill_piece_tokens(wide);
  for (int64_t t0 = 0; t0 < tokens; t0 += piece) {
    const int64_t t1 = std::min(tokens, t0 + piece);
    Tensor o = o2.slice(0, t0, t1);
    // A last piece of decode size goes through the decode-sized kernels (x as the hi/lo pair).
    moe_call(ctx, o, x.slice(0, t0, t1), ids.slice(0, t0, t1), w2.slice(0, t0, t1), ex, swiglu_limit,
             wide && t1 - t0 > kMoeMaxTokens);
  }
  return true;
}

void exl3_set_prefill_path(int path) { g_prefill_path.store(path, std::memory_order_relaxed); }

void exl3_set_moe_variant(int variant) { g_moe_variant.store(variant, std::memory_order_relaxed); }

void exl3_set_wide_x(int precision) { g_wide_x.store(precision, std::memory_order_relaxed); }

}  // namespace tf::cuda
