// The memory-bound inner loop of the EXL3 GEMV (exl3_gemv.cu, fused kernel) and the
// grouped MoE (exl3_moe.cu): one warp streams a column of 16x16 trellis tiles
// (fixed n-tile, consecutive k-tiles) through a private shared-memory ring filled
// with 16-byte cp.async copies, decodes each tile in registers into the A fragment
// of mma.m16n8k16 (exl3_decode.cuh) and multiplies it by up to 8 activation rows.
//
// Why a ring in shared memory: a 16 B load per lane moves 4 tiles (K = 4) per warp
// instruction, but lane l must decode word l of each tile; the ring turns the
// copy layout into the decode layout for free (conflict-free 4 B reads), and
// kStages stages in flight keep ~3 KB per warp outstanding (Little's law needs
// ~30 KB per SM at 4.4 TB/s). The ring's first stages can be issued before the
// kernel waits on its predecessor (programmatic dependent launch): weights never
// depend on earlier kernels.
//
// Activations: `xf` holds, per row, the B fragments of the rotated input (hi/lo
// fp16 split, exl3_gemv.cuh store_fragment_value), k-chunk major; two MMAs per tile
// (hi then lo) accumulate in f32, exactly as the older gemv_warp, so a row's sums
// keep one order whatever the batch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_decode.cuh"

namespace tf::cuda::exl3 {

constexpr int kStageTiles = 4;  // tiles per ring stage (one 16 B copy per lane at K = 4)
constexpr int kStages = 6;      // ring stages per warp

// u32 words of one ring stage / of a warp's whole ring at K bits per weight.
template <int K>
constexpr int stage_words() {
  return kStageTiles * 8 * K;
}
template <int K>
constexpr int ring_words() {
  return kStages * stage_words<K>();
}

// What a streaming kernel does per tile (kNormal); the others exist to time the
// parts alone (exl3_cuda_bench): kLoadOnly streams the trellis and skips decode and
// MMAs, kDecodeOnly decodes and multiplies whatever the ring holds without loading.
enum StreamMode : int { kNormal = 0, kLoadOnly = 1, kDecodeOnly = 2 };

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Programmatic dependent launch (sm_90): wait for the preceding kernel's results /
// let the next kernel start its own prologue. Both are no-ops without PDL.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Whether the EXL3 kernels launch with programmatic stream serialization (host side;
// exl3_gemv.cu: on unless TF_EXL3_PDL=0 or exl3_set_pdl(false)).
bool pdl_enabled();

// Copies tiles [0, min(kStageTiles, left)) of a stage (tile u at tile0 + u * step
// words) into `dst` (tile u at u * 8K words).
template <int K>
__device__ __forceinline__ void load_stage(uint32_t* dst, const uint32_t* __restrict__ tile0, int64_t step, int left,
                                           int lane) {
  constexpr int kChunks = 2 * K;  // 16 B chunks per tile (32K bytes)
#pragma unroll
  for (int c = lane; c < kStageTiles * kChunks; c += 32) {
    const int u = c / kChunks, q = c % kChunks;
    if (u < left) cp_async16(dst + u * 8 * K + q * 4, tile0 + u * step + q * 4);
  }
}

// The lane's A fragment of a tile held in shared memory (8K words).
template <int K, int CB>
__device__ __forceinline__ void decode_smem_tile(const uint32_t* t, int lane, uint32_t (&a)[4]) {
  uint32_t st[8];
  if constexpr (K == 4) {
    // Bit s = 32l - 12: bits 20.. of word l-1 (tail-biting), then word l.
    lane_states_k4(t[(lane + 31) & 31], t[lane], st);
  } else if constexpr (K == 8) {
    const uint2 v = reinterpret_cast<const uint2*>(t)[lane];
    lane_states<K>(t[(2 * lane + 63) & 63], v.x, v.y, 0u, 24, st);
  } else {
    constexpr int nw = 8 * K;
    const int s = lane_first_bit<K>(lane), b = s >> 5;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = b + i;
      w[i] = t[idx >= nw ? idx - nw : idx];
    }
    lane_states<K>(w[0], w[1], w[2], w[3], s & 31, st);
  }
  a[0] = decode_pair<CB>(st[0], st[1]);
  a[1] = decode_pair<CB>(st[4], st[5]);
  a[2] = decode_pair<CB>(st[2], st[3]);
  a[3] = decode_pair<CB>(st[6], st[7]);
}

// A warp's column of `ntiles` tiles: tile i at tile0 + i * step (words). Split in two
// so that a kernel can issue the first copies before it waits on its predecessor.
template <int K>
struct WarpStream {
  const uint32_t* tile0;
  int64_t step;
  int ntiles;
  uint32_t* ring;  // ring_words<K>() words of this warp's shared memory

  __device__ __forceinline__ int stages() const { return (ntiles + kStageTiles - 1) / kStageTiles; }

  __device__ __forceinline__ void issue(int s, int lane) const {
    if (s < stages())
      load_stage<K>(ring + (s % kStages) * stage_words<K>(), tile0 + static_cast<int64_t>(s) * kStageTiles * step,
                    step, ntiles - s * kStageTiles, lane);
    cp_async_commit();  // always: the group count stays fixed for wait_group
  }

  // Stages 0 .. kStages-2 (weights only: safe before pdl_wait).
  template <int Mode = kNormal>
  __device__ __forceinline__ void prologue(int lane) const {
    if constexpr (Mode != kDecodeOnly) {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) issue(s, lane);
    }
  }

  // acc[rt] (the lane's C fragment of row tile rt: output columns g, g+8 of the n-tile,
  // rows 8rt + 2t, +1) += tiles^T · x. Row r's fragments: xf + r * xs (uint4s), k-chunk
  // i at i * 4 + t; rows >= `rows` (1 <= rows) hold junk: callers must not store them.
  template <int CB, int RT, int Mode = kNormal>
  __device__ __forceinline__ void run(const uint4* xf, int64_t xs, int rows, float (&acc)[RT][4]) const {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ns = stages();
    for (int s = 0; s < ns; ++s) {
      if constexpr (Mode != kDecodeOnly) {
        issue(s + kStages - 1, lane);
        cp_async_wait<kStages - 1>();
        __syncwarp();
      }
      const uint32_t* st = ring + (s % kStages) * stage_words<K>();
#pragma unroll
      for (int u = 0; u < kStageTiles; ++u) {
        const int i = s * kStageTiles + u;
        if (i >= ntiles) break;  // warp-uniform
        if constexpr (Mode == kLoadOnly) {
          acc[0][0] += static_cast<float>(st[u * 8 * K + lane] >> 31);
        } else {
          uint32_t a[4];
          decode_smem_tile<K, CB>(st + u * 8 * K, lane, a);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            if (rt * 8 >= rows) break;  // warp-uniform
            // Rows past `rows` read a valid row instead of zeros: an MMA's B column only
            // reaches its own output column, which is never stored; this keeps the select,
            // its zeroing and a divergent branch out of the loop (H200 SASS count, run2s6).
            const int r = min(rt * 8 + g, rows - 1);
            const uint4 xv = xf[r * xs + i * 4 + t];
            mma_16816(acc[rt], a, xv.x, xv.y);
            mma_16816(acc[rt], a, xv.z, xv.w);
          }
        }
      }
      if constexpr (Mode != kDecodeOnly) __syncwarp();  // the slot is refilled next iteration
    }
    if constexpr (Mode != kDecodeOnly) cp_async_wait<0>();  // no copy may outlive the ring
  }
};

// 128-point FWHT of one warp's values: lane l holds elements l + 32q in v[q]. The
// butterflies of kernels/cpu fwht128 (u + v, u - v; h = 1, 2, .., 64), then * 1/sqrt(128).
__device__ __forceinline__ void warp_fwht128(float (&v)[4], float norm) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float o = __shfl_xor_sync(0xffffffffu, v[q], h);
      v[q] = (lane & h) ? __fsub_rn(o, v[q]) : __fadd_rn(v[q], o);
    }
  }
#pragma unroll
  for (int h = 1; h < 4; h <<= 1) {  // element bits 32 and 64 = bits 0 and 1 of q
    float n[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) n[q] = (q & h) ? __fsub_rn(v[q ^ h], v[q]) : __fadd_rn(v[q], v[q ^ h]);
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = n[q];
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = __fmul_rn(v[q], norm);
}

}  // namespace tf::cuda::exl3
