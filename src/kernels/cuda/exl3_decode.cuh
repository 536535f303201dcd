// EXL3 trellis decoding in registers (device code shared by the EXL3 kernels).
//
// Format and the CPU reference: kernels/api/exl3_decode.h, /work/shared/spec/exl3.md §2.
// A 16x16 tile is 8*K u32 words (the i16 trellis read little-endian), a bitstream
// consumed from each word's MSB down. Lane l of a warp decodes stream positions
// 8l..8l+7; their states are the 16-bit windows ending at bits (8l+j+1)*K, which all
// lie in the 7K+16 bits starting at s = 8lK + K - 16 (mod 256K, tail-biting).
// Those eight values are exactly the lane's A fragment of mma.m16n8k16 when the
// tile is used transposed (rows = the tile's 16 output columns, cols = its 16
// inputs), so a decoded tile feeds a tensor-core MMA with no shuffles:
//   a[0] = (v0, v1), a[1] = (v4, v5), a[2] = (v2, v3), a[3] = (v6, v7)   (half2, low first).
//
// Values (bit-exact with the CPU table, exl3_decode.cc):
//   3INST/MCG: x = state * mult (+ add); x = (x & 0x8FFF8FFF) ^ 0x3B603B60; v = h(lo) + h(hi)
//              (one correctly rounded fp16 add = the CPU's exact f32 sum rounded once);
//   MUL1:      x = state * mult; v = fma(h(0x6400 + bytesum(x)), h(0x1EEE), h(0xC931)) in fp16.
// Two values are made at once (decode_pair); K = 4 takes its states from two words with
// a trimmed extraction (lane_states_k4). Integer-ALU ops per tile and lane at K = 4:
// ~11 (states) + 12 (pairs), plus 8 IMAD on the FMA pipe; the flat MoE's default takes the
// hashes straight from the words instead (lane_hashes_k4): 7 + 12, plus 12 IMAD.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/mma_bf16.cuh"  // mma_f16_16816: D += A * B, f16 in, f32 accumulation

namespace tf::cuda::exl3 {

// Codebook ids as template arguments (Exl3Codebook's order).
constexpr int kCb3Inst = 0, kCbMcg = 1, kCbMul1 = 2;

// The hash x = state * mult + add of each codebook.
constexpr uint32_t codebook_mult(int cb) { return cb == kCb3Inst ? 89226354u : cb == kCbMcg ? 0xCBAC1FEDu : 0x83DCD12Du; }
constexpr uint32_t codebook_add(int cb) { return cb == kCb3Inst ? 64248484u : 0u; }

template <int CB>
__device__ __forceinline__ uint32_t codebook_hash(uint32_t s) {
  return s * codebook_mult(CB) + codebook_add(CB);
}

// The multiplier C times (1 - 2^16), the inverse of 0x10001 mod 2^32: for a state s given
// "doubled" as w = s * 0x10001 (its 16 bits in both halves, one byte permute from the stream
// words, lane_states_k4_dup), w * dup_mult(C) = s * C mod 2^32, so the hash needs no clean
// zero-extended state (the extraction saves the mask or the second shift).
constexpr uint32_t dup_mult(uint32_t c) { return c - (c << 16); }

// codebook_hash of the state s from its doubled form w = s * 0x10001.
template <int CB>
__device__ __forceinline__ uint32_t codebook_hash_dup(uint32_t w) {
  return w * dup_mult(codebook_mult(CB)) + codebook_add(CB);
}
static_assert(0x12345u * 0x10001u * dup_mult(0xCBAC1FEDu) == 0x12345u * 0xCBAC1FEDu, "dup_mult");

// (x & 0x8FFF8FFF) ^ 0x3B603B60 as one LOP3 (lut 0x6A = (a & b) ^ c): left to itself the
// compiler emitted an AND and an XOR per hash (H200 SASS count, run2s6), 8 ALU ops per tile.
__device__ __forceinline__ uint32_t mask_xor_3inst(uint32_t x) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(r) : "r"(x), "r"(0x8FFF8FFFu), "r"(0x3B603B60u));
  return r;
}

// fp16 values of hashes xa, xb (codebook_hash of two states) as half2 bits (xa's value in
// the low half).
template <int CB>
__device__ __forceinline__ uint32_t pair_values(uint32_t xa, uint32_t xb) {
  if constexpr (CB == kCbMul1) {
    const uint32_t a = 0x6400u + __dp4a(xa, 0x01010101u, 0u);
    const uint32_t b = 0x6400u + __dp4a(xb, 0x01010101u, 0u);
    const uint32_t ab = a | (b << 16);
    const __half2 r = __hfma2(*reinterpret_cast<const __half2*>(&ab), __halves2half2(__ushort_as_half(0x1EEE), __ushort_as_half(0x1EEE)),
                              __halves2half2(__ushort_as_half(0xC931), __ushort_as_half(0xC931)));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    // Mask/xor each hash (both halves at once), then each value = lo + hi with the halves
    // picked by operand swizzles (one correctly rounded fp16 add, as the CPU's exact f32 sum
    // rounded once), and one permute packs the pair: 3 integer-ALU ops per pair instead of
    // 4 with permute-first (the ALU pipe is what bounds decoding on Hopper).
    const uint32_t ma = mask_xor_3inst(xa), mb = mask_xor_3inst(xb);
    const __half2 ha = *reinterpret_cast<const __half2*>(&ma), hb = *reinterpret_cast<const __half2*>(&mb);
    const __half2 va = __hadd2(__low2half2(ha), __high2half2(ha));
    const __half2 vb = __hadd2(__low2half2(hb), __high2half2(hb));
    const __half2 r = __lows2half2(va, vb);
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// fp16 values of states sa, sb as half2 bits (sa's value in the low half).
// Dup: sa, sb are doubled states (codebook_hash_dup).
template <int CB, bool Dup = false>
__device__ __forceinline__ uint32_t decode_pair(uint32_t sa, uint32_t sb) {
  return pair_values<CB>(Dup ? codebook_hash_dup<CB>(sa) : codebook_hash<CB>(sa),
                         Dup ? codebook_hash_dup<CB>(sb) : codebook_hash<CB>(sb));
}

// pair_values with the pack on the FMA pipe instead of the integer ALU (the pipe that bounds
// the flat MoE loop on Hopper, H200 SASS count run2s7: 30.8 ALU ops per tile): the two
// hadd2 + prmt become three hfma2 with per-half immediates, 2 ALU + 5 FMA-pipe ops per pair
// instead of 3 + 4, same issue count. Same bits as decode_pair (3INST/MCG): every masked half
// is a normal fp16 (exponent field 12..15, so never 0 and never -0), hence
//   v = fma(lo_b, -1, lo_b), fma(lo_b, 1, hi_b)   = (+0, b)      (b = lo_b + hi_b, rounded once);
//   w = fma(hi_a, 1, +0),    fma(hi_a, 0, b)      = (hi_a, b)    (b is never -0: x + y = 0 rounds to +0);
//   r = fma(lo_a, 1, hi_a),  fma(hi_a, 0, b)      = (a, b)       (a = lo_a + hi_a, rounded once).
// MUL1 keeps pair_values (its value path has no pack).
template <int CB>
__device__ __forceinline__ uint32_t pair_values_fma(uint32_t xa, uint32_t xb) {
  if constexpr (CB == kCbMul1) {
    return pair_values<CB>(xa, xb);
  } else {
    const uint32_t ma = mask_xor_3inst(xa), mb = mask_xor_3inst(xb);
    const __half2 ha = *reinterpret_cast<const __half2*>(&ma), hb = *reinterpret_cast<const __half2*>(&mb);
    const __half2 one_zero = __halves2half2(__ushort_as_half(0x3C00), __ushort_as_half(0x0000));
    const __half2 m_one_one = __halves2half2(__ushort_as_half(0xBC00), __ushort_as_half(0x3C00));
    const __half2 v = __hfma2(__low2half2(hb), m_one_one, hb);
    const __half2 w = __hfma2(__high2half2(ha), one_zero, v);
    const __half2 r = __hfma2(ha, one_zero, w);
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

// decode_pair through pair_values_fma.
template <int CB, bool Dup = false>
__device__ __forceinline__ uint32_t decode_pair_fma(uint32_t sa, uint32_t sb) {
  return pair_values_fma<CB>(Dup ? codebook_hash_dup<CB>(sa) : codebook_hash<CB>(sa),
                             Dup ? codebook_hash_dup<CB>(sb) : codebook_hash<CB>(sb));
}

// The 16-bit window at compile-time bit offset O of the 96-bit stream a:b:c (MSB first).
template <int O>
__device__ __forceinline__ uint32_t window16(uint32_t a, uint32_t b, uint32_t c) {
  if constexpr (O < 32) return __funnelshift_l(b, a, O) >> 16;
  else return __funnelshift_l(c, b, O - 32) >> 16;
}

// The lane's eight states from the stream words w0..w3 (w0 = the word holding bit s,
// r = s mod 32), aligned so that bit s is a's MSB.
template <int K>
__device__ __forceinline__ void lane_states(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int r,
                                            uint32_t (&st)[8]) {
  const uint32_t a = __funnelshift_l(w1, w0, r), b = __funnelshift_l(w2, w1, r), c = __funnelshift_l(w3, w2, r);
  st[0] = window16<0 * K>(a, b, c);
  st[1] = window16<1 * K>(a, b, c);
  st[2] = window16<2 * K>(a, b, c);
  st[3] = window16<3 * K>(a, b, c);
  st[4] = window16<4 * K>(a, b, c);
  st[5] = window16<5 * K>(a, b, c);
  st[6] = window16<6 * K>(a, b, c);
  st[7] = window16<7 * K>(a, b, c);
}

// K = 4: the eight states straight from p = word l-1 and o = word l (the lane's window
// starts at bit 20 of p). In the 64-bit stream p:o the states are the 16-bit fields at bits
// 28, 24, .., 0; two funnel shifts (r = bits 20.., q = bits 4..) make the odd-nibble fields
// byte-aligned, so every field but one costs a single shift, mask or zero-filling permute:
// 11 ALU ops (17 via lane_states). The ALU pipe is what bounds decoding on Hopper.
__device__ __forceinline__ void lane_states_k4(uint32_t p, uint32_t o, uint32_t (&st)[8]) {
  const uint32_t r = __funnelshift_r(o, p, 20), q = __funnelshift_r(o, p, 4);
  st[0] = __byte_perm(r, 0u, 0x4421);  // bits 28..43 = r bits 8..23
  st[1] = __funnelshift_r(o, p, 24) & 0xFFFFu;
  st[2] = r & 0xFFFFu;
  st[3] = o >> 16;
  st[4] = __byte_perm(q, 0u, 0x4421);  // bits 12..27 = q bits 8..23
  st[5] = __byte_perm(o, 0u, 0x4421);
  st[6] = q & 0xFFFFu;
  st[7] = o & 0xFFFFu;
}

// lane_states_k4's eight states doubled (s * 0x10001, for codebook_hash_dup): every
// byte-aligned state of p:o is one byte permute of o (and p); the nibble-aligned ones one
// permute of q = bits 4.. (one funnel shift), but st[0] (bits 28..43 reach past q) takes its
// own shift. 10 ALU ops instead of 11.
__device__ __forceinline__ void lane_states_k4_dup(uint32_t p, uint32_t o, uint32_t (&st)[8]) {
  const uint32_t q = __funnelshift_r(o, p, 4);  // bits 4..35
  st[0] = __byte_perm(q, p >> 4, 0x4343);       // bits 28..35 = q byte 3, 36..43 = (p >> 4) byte 0
  st[1] = __byte_perm(o, p, 0x4343);            // bits 24..39
  st[2] = __byte_perm(q, 0u, 0x3232);           // bits 20..35
  st[3] = __byte_perm(o, 0u, 0x3232);           // bits 16..31
  st[4] = __byte_perm(q, 0u, 0x2121);           // bits 12..27
  st[5] = __byte_perm(o, 0u, 0x2121);           // bits 8..23
  st[6] = __byte_perm(q, 0u, 0x1010);           // bits 4..19
  st[7] = __byte_perm(o, 0u, 0x1010);           // bits 0..15
}

// a * b + c (mod 2^32) as one IMAD: keeps the compiler from turning lane_hashes_k4's
// corrections back into shift/mask ALU ops.
__device__ __forceinline__ uint32_t imad(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("mad.lo.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// The codebook hashes of lane_states_k4's eight states, with half the extractions moved to
// the FMA pipe. y_j = bits 4j.. of p:o (32 bits) holds state 7-j in its low half and state
// 3-j in its high half, so hash(state 7-j) = hash(y_j) - (y_j >> 16) * (C << 16) (mod 2^32):
// 3 funnel shifts + 4 shifts = 7 integer-ALU ops (lane_states_k4: 11) and 12 IMAD (8),
// the same issue count, the same hashes bit for bit (the ALU pipe is what bounds the flat
// MoE loop on Hopper, 26.7 ALU ops per tile against 51.4 issue slots, H200 SASS count s8).
static_assert(0x12345678u * 0xCBAC1FEDu + 0x1234u * (0u - (0xCBAC1FEDu << 16)) == 0x5678u * 0xCBAC1FEDu,
              "lane_hashes_k4: hash(low half of y) = hash(y) - (y >> 16) * (C << 16)");
template <int CB>
__device__ __forceinline__ void lane_hashes_k4(uint32_t p, uint32_t o, uint32_t (&x)[8]) {
  constexpr uint32_t mult = codebook_mult(CB), add = codebook_add(CB);
  constexpr uint32_t neg_hi = 0u - (mult << 16);
  const uint32_t y[4] = {o, __funnelshift_r(o, p, 4), __funnelshift_r(o, p, 8), __funnelshift_r(o, p, 12)};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t hi = y[j] >> 16;           // state 3 - j
    x[3 - j] = imad(hi, mult, add);           // its hash
    x[7 - j] = imad(hi, neg_hi, imad(y[j], mult, add));  // state 7 - j = y_j - hi * 2^16
  }
}

// First stream bit and word of lane `lane` in a tile of K bits per weight.
template <int K>
__device__ __forceinline__ int lane_first_bit(int lane) {
  int s = 8 * lane * K + K - 16;
  return s < 0 ? s + 256 * K : s;
}

// Words a lane reads: for K = 4 and 8 the lane's own words are loaded coalesced and
// the one before comes from the neighbouring lane (lane_words_from_own), otherwise
// the four words around bit s are loaded directly (lane_words_generic).
template <int K>
struct LaneWords {
  static constexpr int kOwn = (K == 4 || K == 8) ? K / 4 : 4;  // u32 loads per lane per tile
};

// Generic K: words (b, b+1, b+2, b+3) mod 8K of the tile at `tw`.
template <int K>
__device__ __forceinline__ void load_lane_words_generic(const uint32_t* __restrict__ tw, int lane, uint32_t (&w)[4]) {
  constexpr int nw = 8 * K;
  const int b = lane_first_bit<K>(lane) >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int idx = b + i;
    idx = idx >= nw ? idx - nw : idx;  // b < 8K, so one wrap at most
    w[i] = __ldg(tw + idx);
  }
}

// Decodes one tile into the lane's A fragment. `own` holds kOwn words: for K = 4/8 the
// lane's own words (word l, or words 2l and 2l+1), else the four words from
// load_lane_words_generic. Every lane of the warp must call it (shuffles).
template <int K, int CB>
__device__ __forceinline__ void decode_fragment(const uint32_t (&own)[LaneWords<K>::kOwn], int lane,
                                                uint32_t (&a)[4]) {
  uint32_t st[8];
  if constexpr (K == 4) {
    // s = 32l - 12: bits 20.. of word l-1, then word l.
    const uint32_t prev = __shfl_sync(0xffffffffu, own[0], (lane + 31) & 31);
    lane_states_k4(prev, own[0], st);
  } else if constexpr (K == 8) {
    // s = 64l - 8: bits 24.. of word 2l-1, then words 2l, 2l+1.
    const uint32_t prev = __shfl_sync(0xffffffffu, own[1], (lane + 31) & 31);
    lane_states<K>(prev, own[0], own[1], 0u, 24, st);
  } else {
    lane_states<K>(own[0], own[1], own[2], own[3], lane_first_bit<K>(lane) & 31, st);
  }
  a[0] = decode_pair<CB>(st[0], st[1]);
  a[1] = decode_pair<CB>(st[4], st[5]);
  a[2] = decode_pair<CB>(st[2], st[3]);
  a[3] = decode_pair<CB>(st[6], st[7]);
}

// Loads the lane's words of the tile at `tw` (8K words) for decode_fragment.
template <int K>
__device__ __forceinline__ void load_fragment_words(const uint32_t* __restrict__ tw, int lane,
                                                    uint32_t (&own)[LaneWords<K>::kOwn]) {
  if constexpr (K == 4) {
    own[0] = __ldcs(tw + lane);
  } else if constexpr (K == 8) {
    const uint2 v = __ldcs(reinterpret_cast<const uint2*>(tw) + lane);
    own[0] = v.x;
    own[1] = v.y;
  } else {
    load_lane_words_generic<K>(tw, lane, own);
  }
}

}  // namespace tf::cuda::exl3
