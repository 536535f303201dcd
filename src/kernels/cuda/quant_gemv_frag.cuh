// Fragment helpers shared by the quantized GEMV kernels (quant_gemv.cu and the
// earlier kernel kept for comparison, quant_gemv_legacy.cuh): the mma.m16n8k16 wrapper
// and the conversion of a lane's raw weights into bf16 pairs.
//
// Fragments of mma.m16n8k16 (g = lane / 4, t = lane % 4; PTX ISA): A registers
// (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B registers (k 2t..2t+1, n g),
// (k 2t+8.., n g); C (g, 2t..2t+1), (g+8, 2t..2t+1).
// A sum over k does not care which of a chunk's 64 weights sits in which k slot, as
// long as A and B agree. So a lane takes the 16 consecutive weights 16t .. 16t+15 of
// each of its rows per 64-wide chunk (q4: 8 bytes, fp8: 16 bytes: the four lanes of a
// quad read one 32/64-byte run), and K step s of the chunk uses its pairs 2s and 2s+1:
// pair j is the two weights pair_elem(j, 0/1), picked so that a pair is cheap to build
// (q4: nibbles j and j+4 of a word, one mask; fp8: adjacent bytes, one cvt).
//
// q4 nibble -> bf16: (w & 0x000F000F) | 0x43004300 is the pair 128 + q; minus 136 gives
// q - 8 exactly (q4_pair), or the 136 is taken off on the f32 side (q4_pair_biased).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/api/matrix.h"

namespace tf::cuda::qfrag {

// Lane-local weight index (0..15 within the lane's 16 of a chunk) of half h of pair j.
template <MatrixFormat F>
__host__ __device__ constexpr int pair_elem(int j, int h) {
  if constexpr (F == MatrixFormat::kQ4) {
    return j < 4 ? j + 4 * h : j + 4 + 4 * h;  // nibbles (j, j+4) of word 0, (j, j+4) of word 1
  } else {
    return 2 * j + h;  // adjacent bytes
  }
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  // Not volatile: a pure function of its operands, so the compiler may interleave
  // the independent accumulator chains below.
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ uint32_t half2_bits(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }

// q4 nibbles -> f16 pairs for the kernels that feed f16 MMAs (the B-operand and ring kernels):
// nibbles (0, 4) and (1, 5) of v as f16x2 q - 8, exact. (v & 0x000F000F) | 0x6400.. is 1024 + q
// (minus 1032); (v & 0x00F000F0) | 0x6400.. is 1024 + 16q (times 1/16 minus 72, one hfma2).
// Shifting v right by 8 first gives nibbles (2, 6) and (3, 7).
__device__ __forceinline__ uint32_t lop_or_6400(uint32_t w, uint32_t mask) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(w), "r"(mask), "r"(0x64006400u));
  return d;
}
__device__ __forceinline__ void q4_pairs_f16(uint32_t v, uint32_t& p0, uint32_t& p1) {
  uint32_t c1032 = 0x64086408u, c16th = 0x2C002C00u, cm72 = 0xD480D480u;  // f16x2 1032; 1/16; -72
  uint32_t lo = lop_or_6400(v, 0x000F000Fu), hi = lop_or_6400(v, 0x00F000F0u);
  const __half2 a = __hsub2(*reinterpret_cast<__half2*>(&lo), *reinterpret_cast<__half2*>(&c1032));
  const __half2 b = __hfma2(*reinterpret_cast<__half2*>(&hi), *reinterpret_cast<__half2*>(&c16th),
                            *reinterpret_cast<__half2*>(&cm72));
  p0 = half2_bits(a);
  p1 = half2_bits(b);
}

// The same MMA on f16 operands (the fp8 path of the slice kernel: e4m3 -> f16 is one cvt).
__device__ __forceinline__ void mma_16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Pair j of a q4 lane's two words (16 nibbles) as bf16 q - 8.
__device__ __forceinline__ uint32_t q4_pair(uint32_t w0, uint32_t w1, int j) {
  const uint32_t w = j < 4 ? w0 >> (4 * j) : w1 >> (4 * (j - 4));
  uint32_t v = (w & 0x000F000Fu) | 0x43004300u;
  // bf16x2 (136, 136) as a bit pattern: __float2bfloat162_rn(136.0f) is inline asm the
  // compiler does not fold, one cvt per pair.
  uint32_t k136 = 0x43084308u;
  const __nv_bfloat162 r =
      __hsub2(*reinterpret_cast<__nv_bfloat162*>(&v), *reinterpret_cast<__nv_bfloat162*>(&k136));
  return bf16x2_bits(r);
}

// Pair j of a q4 lane's two words as bf16 128 + q (exact): the caller subtracts
// 136 * sum(x) on the f32 side (one shift and one lop3 per pair instead of three ops).
__device__ __forceinline__ uint32_t q4_pair_biased(uint32_t w0, uint32_t w1, int j) {
  const uint32_t w = j < 4 ? w0 >> (4 * j) : w1 >> (4 * (j - 4));
  // One lop3 (a & b) | c (the compiler made two LOP3s of the C++ form: ncu, run of 05:00).
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(w), "n"(0x000F000F), "r"(0x43004300u));
  return d;
}

// Pair j of a q4 lane's two words as f16 q - 8 (exact): 0x6400 | q is 1024 + q, minus 1032.
__device__ __forceinline__ uint32_t q4_pair_f16(uint32_t w0, uint32_t w1, int j) {
  const uint32_t w = j < 4 ? w0 >> (4 * j) : w1 >> (4 * (j - 4));
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(w), "n"(0x000F000F), "r"(0x64006400u));
  uint32_t k1032 = 0x64086408u;  // f16x2 (1032, 1032)
  const __half2 r = __hsub2(*reinterpret_cast<__half2*>(&d), *reinterpret_cast<__half2*>(&k1032));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Pair j of an fp8 lane's four words (16 bytes) as bf16 (e4m3 is exact in bf16).
__device__ __forceinline__ uint32_t fp8_pair(const uint32_t (&w)[4], int j) {
  const auto two = static_cast<__nv_fp8x2_storage_t>(w[j >> 1] >> (16 * (j & 1)));
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return bf16x2_bits(__floats2bfloat162_rn(f.x, f.y));
}

// Pair j of an fp8 lane's four words as f16 (e4m3 is exact in f16): one cvt.
__device__ __forceinline__ uint32_t fp8_pair_f16(const uint32_t (&w)[4], int j) {
  const auto two = static_cast<__nv_fp8x2_storage_t>(w[j >> 1] >> (16 * (j & 1)));
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// One lane's raw weights of one 64-wide chunk for T 16-row MMA tiles: rows
// row0 + 16r + 8h + g, the lane's 16 weights 16t.. (q4: 2 words per row plus its f16 scale
// bits in s[2r + h]; fp8: 4 words per row, the 128x128 block's f32 scale bits in s[0]).
// Rows past n read as zero weights with scale 0; fp8 bytes past k as zero. Both decode
// GEMV kernels load through this.
template <MatrixFormat F, int T>
__device__ __forceinline__ void load_lane_chunk(uint32_t (&w)[T][2][F == MatrixFormat::kQ4 ? 2 : 4], uint32_t* s,
                                                const uint8_t* codes, const void* scales, int64_t n, int64_t k,
                                                int64_t chunks, bool wvec, int64_t row0, int64_t chunk, int g, int t) {
  if constexpr (F == MatrixFormat::kQ4) {
    const int64_t row_bytes = chunks * 32;
    const auto* sc = static_cast<const unsigned short*>(scales);
#pragma unroll
    for (int r = 0; r < T; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + 16 * r + 8 * h + g;
        if (row < n) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(codes + row * row_bytes + chunk * 32 + 8 * t));
          w[r][h][0] = v.x;
          w[r][h][1] = v.y;
          s[2 * r + h] = __ldg(sc + row * chunks + chunk);
        } else {
          w[r][h][0] = w[r][h][1] = 0x88888888u;  // q = 0
          s[2 * r + h] = 0;
        }
      }
  } else {
    const int64_t gc = (k + 127) / 128;
    s[0] = __float_as_uint(__ldg(static_cast<const float*>(scales) + (row0 / 128) * gc + chunk / 2));
    const int64_t c0 = chunk * 64 + 16 * t;
#pragma unroll
    for (int r = 0; r < T; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + 16 * r + 8 * h + g;
        uint32_t* wr = w[r][h];
        const uint8_t* src = codes + row * k + c0;
        if (row < n && wvec && c0 + 16 <= k) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
          wr[0] = v.x; wr[1] = v.y; wr[2] = v.z; wr[3] = v.w;
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            uint32_t word = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
              if (row < n && c0 + 4 * q + b < k) word |= uint32_t(__ldg(src + 4 * q + b)) << (8 * b);
            wr[q] = word;
          }
        }
      }
  }
}

}  // namespace tf::cuda::qfrag
