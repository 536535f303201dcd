// EXL3 decoding on the host: trellis bitstreams -> 16-bit states -> fp16 W_hat, and
// the dense weight an EXL3 linear stands for (exl3_dequantize: the format's meaning,
// so the loader can dequantize linears it keeps dense; the CPU backend's exl3_matmul
// decodes with the same functions). The reference every other backend is checked against; bit-exact with
// exllamav3's own CUDA decoder (tests/unit/exl3_decode_tests.cc, data from
// tests/data/exl3). Format: /work/shared/spec/exl3.md §2.
//
// Tile bitstream: the 16*K int16 words of tile (i, j) read as 8*K little-endian
// u32 words (t[2w] low half, t[2w+1] high half), each consumed from its MSB
// down. Stream position p (0..255) appends K fresh bits to the state:
// state[p] = (state[p-1] << K | bits[pK, pK+K)) & 0xFFFF, and the stream is
// tail-biting, so state[-1] is the stream's last 16 bits.
// Position p = 8*lane + j holds tile element row = 2*(lane%4) + (j&1) + 8*((j>>1)&1),
// col = lane/4 + 8*(j>>2) (row indexes in_features, col out_features: the mma
// m16n8k16 B-fragment order). Tiles are row-major over (k/16, n/16).
// Codebooks (state x as u32, arithmetic mod 2^32, h() = reinterpret as fp16):
//   3INST: x = x*89226354 + 64248484; MCG: x = x*0xCBAC1FED; then
//          x = (x & 0x8FFF8FFF) ^ 0x3B603B60, value = fp16(h(lo) + h(hi));
//   MUL1:  x = x*0x83DCD12D, s = sum of x's 4 bytes, value = fp16((1024+s)*h(0x1EEE) + h(0xC931)).
// Both sums are exact in f32 (the halves have exponents in [-3, 0]; the MUL1
// product has 22 significant bits), so one f32 -> fp16 rounding equals the
// GPU's single half rounding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"

namespace tf {

inline constexpr int kExl3TileElems = 256;

// fp16 bits of the value a 16-bit trellis state decodes to.
uint16_t exl3_state_value(uint16_t state, Exl3Codebook cb);
// The 65536-entry table of exl3_state_value for a codebook (built once, shared).
const uint16_t* exl3_codebook_table(Exl3Codebook cb);

// Tile element of stream position p (0..255).
struct Exl3TilePos {
  int row;  // 0..15, along in_features
  int col;  // 0..15, along out_features
};
Exl3TilePos exl3_tile_position(int p);

// The 256 states of one tile in stream order; `words` = the tile's 16*bits int16 words.
void exl3_tile_states(const int16_t* words, int bits, uint16_t states[kExl3TileElems]);
// One tile of W_hat as fp16 bits, row-major [16][16].
void exl3_decode_tile(const int16_t* words, int bits, Exl3Codebook cb, uint16_t out[kExl3TileElems]);
// Same, as floats (table: exl3_codebook_table_f32), scattered into a row-major matrix
// with row stride `ld`.
void exl3_decode_tile_f32(const int16_t* words, int bits, const float* table, float* out, int64_t ld);
// exl3_codebook_table's values as floats (built once, shared): the f32 decoders' lookup.
const float* exl3_codebook_table_f32(Exl3Codebook cb);

// Throws StatusError naming `name` unless the weight passes check_exl3_weight and
// lives on the host.
void require_host_exl3(const Exl3Weight& w, const std::string& name);

// Whole-tensor forms (host tensors; the weight must pass require_host_exl3).
// States i16 [k/16, n/16, 256] in stream order (as exllamav3's unpack_trellis gives them).
Tensor exl3_unpack_states(const Exl3Weight& w, const std::string& name = "exl3");
// W_hat f16 [k, n], input-major, before the rotations and scales.
Tensor exl3_decode_w_hat(const Exl3Weight& w, const std::string& name = "exl3");

// In-place normalised 128-point Walsh-Hadamard transform (natural Sylvester
// order, the butterflies u + v, u - v, then * 1/sqrt(128)) of every 128-element
// block of x[0, n*stride) taken with `stride` (n must be a multiple of 128).
void fwht128(float* x, int64_t n, int64_t stride = 1);

// An f16 host tensor's values as floats (suh, svh, bias).
std::vector<float> exl3_f16_vector(const Tensor& t);

// The dense weight W = diag(suh) · Hb_k · W_hat · Hb_n · diag(svh), f32 [k, n]
// (input-major, padded; bias not included), e.g. to load an EXL3 linear dense.
Tensor exl3_dequantize(const Exl3Weight& w, const std::string& name = "exl3");
// The same weight as a dense linear of in_features -> out_features stores it: f32
// [out_features, in_features] (Hugging Face's orientation, the padding dropped).
Tensor exl3_dequantize_linear(const Exl3Weight& w, int64_t in_features, int64_t out_features,
                              const std::string& name = "exl3");

}  // namespace tf
