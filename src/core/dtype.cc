#include "core/dtype.h"

#include <array>
#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace tf {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16: return 2;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

namespace {
struct DTypeNames { DType type; const char* ours; const char* safetensors; };
constexpr DTypeNames kNames[] = {
    {DType::kF32, "f32", "F32"},        {DType::kF16, "f16", "F16"},   {DType::kBF16, "bf16", "BF16"},
    {DType::kF8E4M3, "f8_e4m3", "F8_E4M3"}, {DType::kF8E5M2, "f8_e5m2", "F8_E5M2"},
    {DType::kF64, "f64", "F64"},        {DType::kI8, "i8", "I8"},      {DType::kU8, "u8", "U8"},
    {DType::kI16, "i16", "I16"},        {DType::kU16, "u16", "U16"},   {DType::kI32, "i32", "I32"},
    {DType::kU32, "u32", "U32"},        {DType::kI64, "i64", "I64"},   {DType::kBool, "bool", "BOOL"},
};
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& n : kNames) if (n.type == t) return n.ours;
  return "?";
}
const char* dtype_safetensors_name(DType t) {
  for (const auto& n : kNames) if (n.type == t) return n.safetensors;
  return "?";
}
std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& n : kNames) if (name == n.safetensors) return n.type;
  return std::nullopt;
}
bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF8E4M3 ||
         t == DType::kF8E5M2 || t == DType::kF64;
}

namespace {

// A small binary float format: sign, kExp exponent bits, kMan mantissa bits.
// kIeee: the all-ones exponent holds inf/NaN (f16, e5m2). Otherwise (e4m3fn)
// only the all-ones pattern is NaN and the rest of that exponent is finite.
template <int kExp, int kMan, bool kIeee>
struct MiniFloat {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint32_t kExpMask = (1u << kExp) - 1;
  static constexpr uint32_t kSignBit = 1u << (kExp + kMan);
  static constexpr uint32_t kInfCode = kExpMask << kMan;                  // valid when kIeee
  static constexpr uint32_t kNanCode = kIeee ? kInfCode | (1u << (kMan - 1)) : (kExpMask << kMan) | ((1u << kMan) - 1);
  // Largest finite code (magnitude).
  static constexpr uint32_t kMaxCode = kIeee ? kInfCode - 1 : kNanCode - 1;
  static constexpr int kMinNormalExp = 1 - kBias;

  static float decode(uint32_t code) {
    const bool neg = code & kSignBit;
    const uint32_t e = (code >> kMan) & kExpMask;
    const uint32_t m = code & ((1u << kMan) - 1);
    float v;
    if (kIeee && e == kExpMask) {
      v = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    } else if (!kIeee && e == kExpMask && m == ((1u << kMan) - 1)) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (e == 0) {
      v = std::ldexp(static_cast<float>(m), kMinNormalExp - kMan);
    } else {
      v = std::ldexp(static_cast<float>(m | (1u << kMan)), static_cast<int>(e) - kBias - kMan);
    }
    return neg ? -v : v;
  }

  static uint32_t encode(float f, bool saturate) {
    const uint32_t sign = std::signbit(f) ? kSignBit : 0;
    if (std::isnan(f)) return sign | kNanCode;
    const float max_value = decode(kMaxCode);
    float a = std::fabs(f);
    if (std::isinf(a)) return sign | (saturate ? kMaxCode : (kIeee ? kInfCode : kNanCode));
    // Quantum at a's binade, never finer than the subnormal quantum.
    int e = a == 0.0f ? kMinNormalExp : std::max(std::ilogb(a), kMinNormalExp);
    // Scaled value is exact (power of two); rint rounds to nearest even by default.
    const float scaled = std::ldexp(a, kMan - e);
    const float rounded = std::ldexp(std::nearbyint(scaled), e - kMan);
    if (rounded > max_value) {
      return sign | (saturate ? kMaxCode : (kIeee ? kInfCode : kNanCode));
    }
    if (rounded == 0.0f) return sign;
    int re = std::ilogb(rounded);
    if (re < kMinNormalExp) {  // subnormal
      return sign | static_cast<uint32_t>(std::ldexp(rounded, kMan - kMinNormalExp));
    }
    const uint32_t mant = static_cast<uint32_t>(std::ldexp(rounded, kMan - re)) & ((1u << kMan) - 1);
    return sign | (static_cast<uint32_t>(re + kBias) << kMan) | mant;
  }
};

using F16Format = MiniFloat<5, 10, true>;
using E4M3Format = MiniFloat<4, 3, false>;
using E5M2Format = MiniFloat<5, 2, true>;

template <typename Format>
std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = Format::decode(c);
  return t;
}

const std::array<float, 256>& e4m3_table() { static const auto t = make_table<E4M3Format>(); return t; }
const std::array<float, 256>& e5m2_table() { static const auto t = make_table<E5M2Format>(); return t; }

}  // namespace

// f16 from bits: the codes of F16Format::encode(f, /*saturate=*/false) (IEEE round to nearest
// even, overflow to inf, NaN -> sign | quiet NaN), without its libm calls: the load-time q4
// quantizer rounds every candidate scale through it. Checked against the generic encoder on
// every float (dtype_tests samples it; the whole range was compared once, session 34).
uint16_t float_to_f16(float f) {
  const uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x38800000u) {                                             // |f| >= 2^-14: a normal f16 or inf
    uint32_t r = a - 0x38000000u;                                     // exponent rebiased 127 -> 15
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;                        // 23 -> 10 mantissa bits, to even
    return static_cast<uint16_t>(sign | std::min(r, 0x7c00u));        // past 65504 (and inf): inf
  }
  // A subnormal f16 (or 0, or 2^-14 by rounding up): |f| * 2^24 (exact) rounded to an integer.
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(round_even_small(bits_float(a) * 16777216.0f)));
}
// A table of the 65,536 codes' values, decoded once by F16Format (the same floats, NaN included).
float f16_to_float(uint16_t h) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t c = 0; c < 65536; ++c) t[c] = F16Format::decode(c);
    return t;
  }();
  return table[h];
}
// The generic encoder itself, for the tests that compare the two.
uint16_t float_to_f16_reference(float f) {
  return static_cast<uint16_t>(F16Format::encode(f, /*saturate=*/false));
}

// e4m3 from bits: the codes of E4M3Format::encode (round to nearest even; NaN -> sign | 0x7f;
// past 448, inf included: 0x7e saturating, else the NaN code), without its libm calls (the
// fp8 block quantizer and the CPU's fp8 latent cache call it per value). Checked against the
// generic encoder on every float, both modes (compared once, session 34; dtype_tests sample it).
uint8_t float_to_fp8_e4m3(float f, Fp8Overflow mode) {
  const uint32_t x = float_bits(f), sign = (x >> 24) & 0x80u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const uint32_t overflow = sign | (mode == Fp8Overflow::kSaturate ? 0x7eu : 0x7fu);
  if (a >= 0x3c800000u) {                                          // |f| >= 2^-6: normal (or too large)
    uint32_t r = a - 0x3c000000u;                                  // exponent rebiased 127 -> 7
    if (r >= 0x0f800000u) return static_cast<uint8_t>(overflow);   // >= 2^24, inf too (smaller: below)
    r = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;                   // 23 -> 3 mantissa bits, to even
    return static_cast<uint8_t>(r > 0x7eu ? overflow : sign | r);  // 0x7f would be 480: past 448
  }
  // A subnormal e4m3 (or 0, or 2^-6 by rounding up): |f| * 2^9 (exact) rounded to an integer.
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(round_even_small(bits_float(a) * 512.0f)));
}
uint8_t float_to_fp8_e4m3_reference(float f, Fp8Overflow mode) {
  return static_cast<uint8_t>(E4M3Format::encode(f, mode == Fp8Overflow::kSaturate));
}
uint8_t float_to_fp8_e5m2(float f, Fp8Overflow mode) {
  return static_cast<uint8_t>(E5M2Format::encode(f, mode == Fp8Overflow::kSaturate));
}
float fp8_e4m3_to_float(uint8_t code) { return e4m3_table()[code]; }
float fp8_e5m2_to_float(uint8_t code) { return e5m2_table()[code]; }

float load_as_float(const void* data, DType t, size_t i) {
  const auto* p = static_cast<const unsigned char*>(data);
  switch (t) {
    case DType::kF32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kF64: { double v; std::memcpy(&v, p + 8 * i, 8); return static_cast<float>(v); }
    case DType::kBF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_to_float(v); }
    case DType::kF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return f16_to_float(v); }
    case DType::kF8E4M3: return fp8_e4m3_to_float(p[i]);
    case DType::kF8E5M2: return fp8_e5m2_to_float(p[i]);
    case DType::kI8: return static_cast<float>(static_cast<int8_t>(p[i]));
    case DType::kU8: case DType::kBool: return static_cast<float>(p[i]);
    case DType::kI16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kU16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kI32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return static_cast<float>(v); }
    case DType::kU32: { uint32_t v; std::memcpy(&v, p + 4 * i, 4); return static_cast<float>(v); }
    case DType::kI64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<float>(v); }
  }
  return 0.0f;
}

namespace {

void convert_to_f32_serial(const void* src, DType from, float* dst, size_t n) {
  if (n == 0) return;  // empty tensors may have null data (memcpy(null, ..., 0) is still UB)
  if (from == DType::kF32) { std::memcpy(dst, src, n * 4); return; }
  if (from == DType::kBF16) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
    return;
  }
  if (from == DType::kF8E4M3) {
    const auto& t = e4m3_table();
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t i = 0; i < n; ++i) dst[i] = t[s[i]];
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = load_as_float(src, from, i);
}

void convert_from_f32_serial(const float* src, void* dst, DType to, size_t n) {
  if (n == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) {
    switch (to) {
      case DType::kF32: std::memcpy(d + 4 * i, &src[i], 4); break;
      case DType::kF64: { double v = src[i]; std::memcpy(d + 8 * i, &v, 8); break; }
      case DType::kBF16: { uint16_t v = float_to_bf16(src[i]); std::memcpy(d + 2 * i, &v, 2); break; }
      case DType::kF16: { uint16_t v = float_to_f16(src[i]); std::memcpy(d + 2 * i, &v, 2); break; }
      case DType::kF8E4M3: d[i] = float_to_fp8_e4m3(src[i]); break;
      case DType::kF8E5M2: d[i] = float_to_fp8_e5m2(src[i]); break;
      default: break;  // integer targets are not produced from floats
    }
  }
}

// Large conversions (loading a checkpoint converts tens of GB) run on every core:
// element-wise, so any split gives the same bytes.
template <typename F>
void split_across_cores(size_t n, F&& part) {
  constexpr size_t kMinPerThread = size_t{1} << 21;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min(cores, n / kMinPerThread);
  if (threads <= 1) {
    part(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const size_t step = (n + threads - 1) / threads;
  for (size_t b = step; b < n; b += step) pool.emplace_back([&part, b, e = std::min(n, b + step)] { part(b, e); });
  part(0, std::min(n, step));
  for (std::thread& t : pool) t.join();
}

}  // namespace

void convert_to_f32(const void* src, DType from, float* dst, size_t n) {
  const size_t es = dtype_size(from);
  split_across_cores(n, [&](size_t b, size_t e) {
    convert_to_f32_serial(static_cast<const unsigned char*>(src) + b * es, from, dst + b, e - b);
  });
}

void convert_from_f32(const float* src, void* dst, DType to, size_t n) {
  const size_t es = dtype_size(to);
  split_across_cores(n, [&](size_t b, size_t e) {
    convert_from_f32_serial(src + b, static_cast<unsigned char*>(dst) + b * es, to, e - b);
  });
}

}  // namespace tf
