// One consumer warp's work on one 64-wide chunk of the q4 ring GEMV (quant_gemv_ring.cu), for the two
// operand layouts (QuantGemvArgs::ring_operand), and the x records each one reads.
//
// A warp owns 16 weight rows of the unit. Lane (g, t) = (lane / 4, lane % 4) holds the 16 weights
// 16t..16t+15 of a row's chunk (8 bytes), k slots as qfrag::pair_elem<kQ4>: MMA q takes pairs 2q, 2q+1.
// x rows are split into f16 hi + lo (of x * 2^e, 2^-e per (row, chunk) beside the record).
//
// kWeightsB (session 9): the weights are the MMA's B operand, two 8-row tiles per warp; x is A: rows
// 0-7 the hi terms of x rows 0-7, rows 8-15 their lo terms. Record: [q][x row][t] 16-byte quads
// {hi 2q, lo 2q, hi 2q+1, lo 2q+1}, then 8 floats 2^-e. 8 MMAs per chunk whatever m.
//
// kWeightsA: the weights are the A operand (the warp's 16 rows, one tile), x is B with column
// n = 2r + h (h: 0 hi, 1 lo) of x row r, 4 x rows per MMA: 4 MMAs per chunk for m <= 4 (half the
// tensor work at decode), 8 for m = 5..8 (a second group of columns, the same A). Lane t's C
// columns 2t, 2t+1 are the hi and lo of x row 4G + t, so hi + lo is summed in the lane. Record:
// [j = 0, 1][column n < 2m][t] 16 bytes = pairs 4j..4j+3 of lane t's 16 elements, then 8 floats.
// A row's bits depend only on its own x row: its columns see the same A and the same MMA chain in
// either group, for every m.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/quant_gemv_frag.cuh"

namespace tf::cuda::ring {

enum class Operand { kWeightsB, kWeightsA };

// Bytes of one x record for m rows (either layout; a multiple of 16).
__host__ __device__ constexpr int record_bytes(int m) { return 256 * m + 32; }

// Writes lane t's part of x row r's record (hi / lo: its 8 f16 pairs each, pair j as pair_elem) and,
// from t == 0, the row's 2^-e.
template <Operand O>
__device__ __forceinline__ void write_x_record(uint8_t* rec, int m, int r, int t, const uint32_t (&hi)[8],
                                               const uint32_t (&lo)[8], float inv_scale) {
  if constexpr (O == Operand::kWeightsB) {
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<uint4*>(rec + q * 64 * m + (r * 4 + t) * 16) =
          make_uint4(hi[2 * q], lo[2 * q], hi[2 * q + 1], lo[2 * q + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      *reinterpret_cast<uint4*>(rec + j * 128 * m + (2 * r * 4 + t) * 16) =
          make_uint4(hi[4 * j], hi[4 * j + 1], hi[4 * j + 2], hi[4 * j + 3]);
      *reinterpret_cast<uint4*>(rec + j * 128 * m + ((2 * r + 1) * 4 + t) * 16) =
          make_uint4(lo[4 * j], lo[4 * j + 1], lo[4 * j + 2], lo[4 * j + 3]);
    }
  }
  if (t == 0) *reinterpret_cast<float*>(rec + 256 * m + 4 * r) = inv_scale;
}

// One item of the records: x row r's elements 16t..16t+15 of chunk c (zeros past k) as f16 hi + lo of
// x * 2^e, 2^e putting the chunk's largest |x| of the row in [2^13, 2^14) (as stage_x of
// quant_gemv_legacy.cuh), written into the chunk's record `rec`. The 4 lanes of a (chunk, row) must be
// lanes 4i..4i+3 of one warp and every lane must call (on = false: no item, no store): they share the max.
// vec: x, ldx and k allow 16-byte loads (x 16-byte aligned, ldx and k multiples of 4): four loads an item
// instead of sixteen (a lane's 16 values are 64 bytes apart from the next lane's, so each scalar load
// instruction touches 32 sectors); the same values.
template <Operand O>
__device__ __forceinline__ void x_record_item(const float* x, int64_t ldx, int64_t k, int m, int64_t c, int r,
                                              int t, bool on, bool vec, uint8_t* rec) {
  const int64_t k0 = c * 64 + 16 * t;
  float v[16];
  const float* src = x + r * ldx + k0;
  if (vec) {
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
      const float4 q = on && k0 + i < k ? __ldg(reinterpret_cast<const float4*>(src + i))
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      v[i] = q.x;
      v[i + 1] = q.y;
      v[i + 2] = q.z;
      v[i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = on && k0 + i < k ? __ldg(src + i) : 0.0f;
  }
  float mx = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) mx = fmaxf(mx, fabsf(v[i]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (!on) return;
  const int be = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFFu);
  const int e = max(-126, min(126, 14 - (be - 126)));
  const float up = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
  uint32_t hi[8], lo[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float a = v[qfrag::pair_elem<MatrixFormat::kQ4>(j, 0)] * up;
    const float b = v[qfrag::pair_elem<MatrixFormat::kQ4>(j, 1)] * up;  // exact
    const __half2 h = __floats2half2_rn(a, b);
    hi[j] = qfrag::half2_bits(h);
    lo[j] = qfrag::half2_bits(__floats2half2_rn(a - __low2float(h), b - __high2float(h)));  // exact difference
  }
  write_x_record<O>(rec, m, r, t, hi, lo, __uint_as_float(static_cast<uint32_t>(127 - e) << 23));
}

// A lane's shared-memory offsets, the same for every chunk of a unit (computed once, so that a chunk costs
// its loads, conversions and MMAs and few address instructions). x columns / rows past m read a valid
// column / row instead of zeros: their MMA columns (A) or C rows (B) are x rows >= m, never stored.
struct LaneOffsets {
  int w0, w1;      // weights of the lane's two rows (B: 8b + g; A: g, g + 8), bytes from the warp's first row
  int x0, x1, xq;  // x quads: A column group 0 / 1 (j = 0; j = 1 at + xq); B the lane's x row (q at + q * xq)
  int xs0, xs1;    // 2^-e (A: x row 4G + t of group 0 / 1; B: x row g) from the record's start
  int s0, s1;      // scales of the lane's two C rows per tile, elements from the warp's first row's
  int s_tile;      // B: elements to the second tile's scales
};

template <Operand O>
__device__ __forceinline__ LaneOffsets lane_offsets(int rs, int stage, int m, int g, int t) {
  LaneOffsets o{};
  if constexpr (O == Operand::kWeightsB) {
    const int xr = min(g, m - 1);
    o.w0 = g * rs + 8 * t;
    o.w1 = (8 + g) * rs + 8 * t;
    o.x0 = o.x1 = (xr * 4 + t) * 16;
    o.xq = 64 * m;
    o.xs0 = o.xs1 = 256 * m + 4 * xr;
    o.s0 = 2 * t * stage;
    o.s1 = o.s0 + stage;
    o.s_tile = 8 * stage;
  } else {
    const int c0 = g < 2 * m ? g : 0, c1 = 8 + g < 2 * m ? 8 + g : 0;
    o.w0 = g * rs + 8 * t;
    o.w1 = (g + 8) * rs + 8 * t;
    o.x0 = (c0 * 4 + t) * 16;
    o.x1 = (c1 * 4 + t) * 16;
    o.xq = 128 * m;
    o.xs0 = 256 * m + 4 * min(t, m - 1);
    o.xs1 = 256 * m + 4 * min(4 + t, m - 1);
    o.s0 = g * stage;
    o.s1 = (g + 8) * stage;
    o.s_tile = 0;
  }
  return o;
}

// The warp's MMAs and scale FMAs for one chunk. w: the slot's weights at the warp's first row and this
// chunk; xr: the chunk's record; sc: the scales at the warp's first row and this chunk. acc: kWeightsB
// [tile b][i] = weight row 8b + 2t + i, x row g; kWeightsA [group G][i] = weight row g + 8i, x row 4G + t.
// G: the kWeightsA column groups (1 or 2).
template <Operand O, int G>
__device__ __forceinline__ void chunk_mma(float (&acc)[2][2], const LaneOffsets& o, const uint8_t* w,
                                          const uint8_t* xr, const unsigned short* sc) {
  if constexpr (O == Operand::kWeightsB) {
    uint4 xq[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) xq[q] = *reinterpret_cast<const uint4*>(xr + o.x0 + q * o.xq);
    const float xscale = *reinterpret_cast<const float*>(xr + o.xs0);
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const uint2 wv = *reinterpret_cast<const uint2*>(w + (b ? o.w1 : o.w0));
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        // MMA q: weight pairs 2q, 2q + 1 (word q / 2, shifted by 8 for odd q).
        const uint32_t word = q < 2 ? wv.x : wv.y;
        uint32_t p0, p1;
        qfrag::q4_pairs_f16(q & 1 ? word >> 8 : word, p0, p1);
        const uint32_t a[4] = {xq[q].x, xq[q].y, xq[q].z, xq[q].w};
        qfrag::mma_16816_f16(d, a, p0, p1);
      }
      const unsigned short* sr = sc + b * o.s_tile;
      const float s0 = __half2float(__ushort_as_half(sr[o.s0])), s1 = __half2float(__ushort_as_half(sr[o.s1]));
      acc[b][0] = fmaf(s0 * xscale, d[0] + d[2], acc[b][0]);  // 2^-e: the product is exact
      acc[b][1] = fmaf(s1 * xscale, d[1] + d[3], acc[b][1]);
    }
  } else {
    const uint2 w0 = *reinterpret_cast<const uint2*>(w + o.w0);
    const uint2 w1 = *reinterpret_cast<const uint2*>(w + o.w1);
    uint32_t a[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t u0 = q < 2 ? w0.x : w0.y, u1 = q < 2 ? w1.x : w1.y;
      uint32_t p0, p1, h0, h1;
      qfrag::q4_pairs_f16(q & 1 ? u0 >> 8 : u0, p0, p1);
      qfrag::q4_pairs_f16(q & 1 ? u1 >> 8 : u1, h0, h1);
      a[q][0] = p0;  // (row g, k 2t..)
      a[q][1] = h0;  // (row g + 8, k 2t..)
      a[q][2] = p1;  // (row g, k 2t + 8..)
      a[q][3] = h1;
    }
    const float s0 = __half2float(__ushort_as_half(sc[o.s0])), s1 = __half2float(__ushort_as_half(sc[o.s1]));
#pragma unroll
    for (int grp = 0; grp < G; ++grp) {
      const uint8_t* xc = xr + (grp ? o.x1 : o.x0);
      const uint4 xb0 = *reinterpret_cast<const uint4*>(xc), xb1 = *reinterpret_cast<const uint4*>(xc + o.xq);
      const float xscale = *reinterpret_cast<const float*>(xr + (grp ? o.xs1 : o.xs0));
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      qfrag::mma_16816_f16(d, a[0], xb0.x, xb0.y);
      qfrag::mma_16816_f16(d, a[1], xb0.z, xb0.w);
      qfrag::mma_16816_f16(d, a[2], xb1.x, xb1.y);
      qfrag::mma_16816_f16(d, a[3], xb1.z, xb1.w);
      acc[grp][0] = fmaf(s0 * xscale, d[0] + d[1], acc[grp][0]);  // columns 2t, 2t + 1: hi + lo
      acc[grp][1] = fmaf(s1 * xscale, d[2] + d[3], acc[grp][1]);
    }
  }
}

// Where acc[i][j] goes in the parts' sum table (x row, unit row relative to the warp's first row).
template <Operand O>
__device__ __forceinline__ int acc_x_row(int i, int g, int t) {
  return O == Operand::kWeightsB ? g : 4 * i + t;
}
template <Operand O>
__device__ __forceinline__ int acc_w_row(int i, int j, int g, int t) {
  return O == Operand::kWeightsB ? 8 * i + 2 * t + j : g + 8 * j;
}

}  // namespace tf::cuda::ring
