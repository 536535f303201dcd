// Device building blocks of the EXL3 GEMV (exl3_gemv.cu) and the grouped EXL3 MoE
// (exl3_moe.cu): the 128-point Hadamard across a block, the activation fragments and
// the warp loop that decodes trellis tiles into MMA fragments.
//
// Computation of y = FWHT(FWHT(x * suh) · W_hat) * svh + bias for up to 8 rows per MMA:
//   1. rotate: xr = FWHT128(x * suh) in f32 (the same butterflies as the CPU), split
//      into fp16 hi + lo (hi = fp16(xr), lo = fp16(xr - hi)), stored per row as the
//      B fragments of mma.m16n8k16: for k-chunk kc (16 inputs) and quad t (lane % 4),
//      a uint4 {hi[2t,2t+1], hi[2t+8,2t+9], lo[2t,2t+1], lo[2t+8,2t+9]};
//   2. gemv: a warp owns one 16-column n-tile and kTilesPerSplit(k) consecutive k-tiles;
//      per tile it decodes W_hat^T's A fragment (exl3_decode.cuh) and issues two MMAs
//      (hi, then lo) into one f32 accumulator per 8-row tile. x · W_hat is thus within
//      ~2^-22 of the f32 product (the hi/lo split), not fp16-rounded as in exllamav3.
//      Partial sums go to partial[split][row][n];
//   3. epilogue: sum the splits in order, FWHT128 across the block, * svh + bias.
// Row independence: a row's arithmetic (its own x, the fixed split of k, MMA columns
// independent of each other) does not depend on the other rows of the call.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/exl3_decode.cuh"

namespace tf::cuda::exl3 {

constexpr int kGemvWarps = 8;  // warps per GEMV block: the 8 n-tiles of one 128-column block
constexpr float kHadamardNorm = 0.08838834764831845f;  // 1/sqrt(128), as the CPU

// In-block FWHT over 128 threads (thread c holds element c); smem: 128 floats.
// The butterflies of kernels/cpu fwht128 in the same order (u + v, u - v), then * 1/sqrt(128).
__device__ __forceinline__ float block_fwht128(float v, float* smem) {
  const int c = threadIdx.x & 127;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, h);
    v = (c & h) ? __fsub_rn(o, v) : __fadd_rn(v, o);
  }
#pragma unroll
  for (int h = 32; h < 128; h <<= 1) {
    __syncthreads();
    smem[c] = v;
    __syncthreads();
    const float o = smem[c ^ h];
    v = (c & h) ? __fsub_rn(o, v) : __fadd_rn(v, o);
  }
  return __fmul_rn(v, kHadamardNorm);
}

// Where input column c (0..k-1) sits in a row's fragments: unit (k-tile, lane quad) and the
// value's fp16 slot in that unit's hi half (the lo half, where kept, is 4 slots further).
struct FragmentPlace {
  int unit, slot;
};
__device__ __forceinline__ FragmentPlace fragment_place(int c) {
  const int i = c & 15;
  return {(c >> 4) * 4 + ((i & 7) >> 1), (i >> 3) * 2 + (i & 1)};
}

// Stores rotated value v of input column c into a row's fragment array (hi and lo halves).
__device__ __forceinline__ void store_fragment_value(uint4* __restrict__ row_frags, int c, float v) {
  const __half hi = __float2half_rn(v);
  const __half lo = __float2half_rn(__fsub_rn(v, __half2float(hi)));
  const FragmentPlace p = fragment_place(c);
  __half* h = reinterpret_cast<__half*>(row_frags + p.unit);
  h[p.slot] = hi;
  h[4 + p.slot] = lo;
}

// The hi half alone (fp16(v)) at its place in a uint2 per lane quad and k-tile: the layout
// above without the lo halves.
__device__ __forceinline__ void store_fragment_hi(uint2* __restrict__ row_frags, int c, float v) {
  const FragmentPlace p = fragment_place(c);
  reinterpret_cast<__half*>(row_frags + p.unit)[p.slot] = __float2half_rn(v);
}

// Decodes tile (tk, tn), whose 8K words start at `tw`, and stores the lane's eight values
// into W_hat [k, n] (fp16, row-major, n columns). Every lane of the warp must call it.
template <int K, int CB>
__device__ __forceinline__ void decode_tile_to_w_hat(__half* __restrict__ out, const uint32_t* __restrict__ tw,
                                                     int64_t tk, int64_t tn, int64_t n, int lane) {
  const int g = lane >> 2, t = lane & 3;
  uint32_t own[LaneWords<K>::kOwn];
  load_fragment_words<K>(tw, lane, own);
  uint32_t a[4];
  decode_fragment<K, CB>(own, lane, a);
  // a[q] holds positions j = (0,1), (4,5), (2,3), (6,7): row 2t + (j&1) + 8*((j>>1)&1), col g + 8*(j>>2).
  const int jfirst[4] = {0, 4, 2, 6};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = jfirst[q];
    const int row = 2 * t + 8 * ((j >> 1) & 1), col = g + 8 * (j >> 2);
    __half* o = out + (tk * 16 + row) * n + tn * 16 + col;
    o[0] = __ushort_as_half(static_cast<unsigned short>(a[q] & 0xFFFFu));
    o[n] = __ushort_as_half(static_cast<unsigned short>(a[q] >> 16));
  }
}

// Words of one k-step of a warp's column of tiles.
template <int K>
struct TileWords {
  uint32_t w[LaneWords<K>::kOwn];
};

// One warp: tiles (tk0 .. tk0+ntiles-1, tn) of a weight whose tile (tk0, tn) starts at
// `tw0` (words; consecutive k-tiles are `tile_step` words apart), against RT 8-row
// tiles of activations. Row r's fragments start at xr + r * xr_stride (uint4s, at
// k-chunk tk0); rows >= rows are zero. acc[rt] gets the lane's C fragment of row tile rt.
template <int K, int CB, int RT>
__device__ __forceinline__ void gemv_warp(const uint32_t* __restrict__ tw0, int64_t tile_step, int ntiles,
                                          const uint4* __restrict__ xr, int64_t xr_stride, int rows,
                                          float (&acc)[RT][4]) {
  constexpr int U = K == 4 ? 16 : (K == 8 ? 8 : 4);  // tiles whose words are in flight at once (16 registers)
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[rt][i] = 0.0f;
  for (int i0 = 0; i0 < ntiles; i0 += U) {
    TileWords<K> words[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i0 + u < ntiles) load_fragment_words<K>(tw0 + (i0 + u) * tile_step, lane, words[u].w);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i0 + u >= ntiles) break;
      uint32_t a[4];
      decode_fragment<K, CB>(words[u].w, lane, a);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        const int r = rt * 8 + g;
        if (rt * 8 >= rows) break;  // warp-uniform
        const uint4 xv = r < rows ? __ldg(xr + r * xr_stride + (i0 + u) * 4 + t) : make_uint4(0, 0, 0, 0);
        mma_f16_16816(acc[rt], a, xv.x, xv.y);
        mma_f16_16816(acc[rt], a, xv.z, xv.w);
      }
    }
  }
}

// Writes a lane's C fragments: out row r (of the 8-row tile at row0) column n0 + g (+8).
// C layout: c0,c1 = (column g, rows 2t, 2t+1), c2,c3 = (column g+8, rows 2t, 2t+1).
template <int RT>
__device__ __forceinline__ void store_partial(float* __restrict__ part, int64_t n, int64_t n0, int rows,
                                              const float (&acc)[RT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    const int r0 = rt * 8 + 2 * t;
    if (r0 < rows) {
      part[r0 * n + n0 + g] = acc[rt][0];
      part[r0 * n + n0 + g + 8] = acc[rt][2];
    }
    if (r0 + 1 < rows) {
      part[(r0 + 1) * n + n0 + g] = acc[rt][1];
      part[(r0 + 1) * n + n0 + g + 8] = acc[rt][3];
    }
  }
}

}  // namespace tf::cuda::exl3
