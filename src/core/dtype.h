// Element types and their exact conversions.
//
// FP8 follows the OCP 8-bit floating point spec (v1.0):
//   e4m3fn: bias 7, no infinities, NaN = S.1111.111, max 448.
//   e5m2:   bias 15, IEEE-like (inf = S.11111.00, NaN = S.11111.{01,10,11}), max 57344.
// float -> fp8 rounds to nearest, ties to even. With Fp8Overflow::kSaturate (the
// default, what NVIDIA's __NV_SATFINITE does) out-of-range values and infinities
// become +-max; with kNonSaturating they become inf (e5m2) or NaN (e4m3fn).
// NaN always stays NaN. float -> bf16/f16 also round to nearest even.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tf {

enum class DType : uint8_t {
  kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kF64,
  kI8, kU8, kI16, kU16, kI32, kU32, kI64, kBool,
};

size_t dtype_size(DType t);
// Our short name ("bf16", "f8_e4m3").
const char* dtype_name(DType t);
// The safetensors name ("BF16", "F8_E4M3") and back; nullopt for names we do not know.
const char* dtype_safetensors_name(DType t);
std::optional<DType> dtype_from_safetensors_name(std::string_view name);
bool dtype_is_float(DType t);

enum class Fp8Overflow { kSaturate, kNonSaturating };

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// bf16 is the top half of an f32; rounding to nearest even, NaN kept quiet.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// x rounded to an integer, ties to even, for |x| < 2^22: adding and subtracting 1.5 * 2^23
// leaves the integer part (plain float arithmetic, no fast-math; it inlines and vectorizes,
// unlike std::nearbyint). Larger |x| come back as some value beyond 2^22 (callers clamp).
inline float round_even_small(float x) { return (x + 12582912.0f) - 12582912.0f; }

uint16_t float_to_f16(float f);
float f16_to_float(uint16_t h);
// float_to_f16 by the generic minifloat encoder (slow; tests compare the two).
uint16_t float_to_f16_reference(float f);

uint8_t float_to_fp8_e4m3(float f, Fp8Overflow mode = Fp8Overflow::kSaturate);
uint8_t float_to_fp8_e5m2(float f, Fp8Overflow mode = Fp8Overflow::kSaturate);
// float_to_fp8_e4m3 by the generic minifloat encoder (slow; tests compare the two).
uint8_t float_to_fp8_e4m3_reference(float f, Fp8Overflow mode);
// Table lookups (exact).
float fp8_e4m3_to_float(uint8_t code);
float fp8_e5m2_to_float(uint8_t code);

// Strong wrappers for typed buffers.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };
struct fp8_e4m3_t { uint8_t bits; };
struct fp8_e5m2_t { uint8_t bits; };

// Reads element i of a buffer of type t as float (float types and integers).
float load_as_float(const void* data, DType t, size_t i);
// Converts n elements of type `from` into f32 (any float type or integer type).
void convert_to_f32(const void* src, DType from, float* dst, size_t n);
// Converts n floats into type `to` (float types only; fp8 saturates).
void convert_from_f32(const float* src, void* dst, DType to, size_t n);

}  // namespace tf
