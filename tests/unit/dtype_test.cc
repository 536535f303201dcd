// Exhaustive checks of the float conversions (OCP FP8 v1.0, IEEE f16, bf16).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tf {
namespace {

bool is_e4m3_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }
bool is_e5m2_nan(uint8_t c) { return (c & 0x7f) > 0x7c; }
bool is_e5m2_inf(uint8_t c) { return (c & 0x7f) == 0x7c; }

TEST(Fp8E4M3, KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_float(0x80)));
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x78), 256.0f);  // exponent 1111 is finite in e4m3fn
}

TEST(Fp8E4M3, AllCodesDecodeAndRoundTrip) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = fp8_e4m3_to_float(code);
    if (is_e4m3_nan(code)) {
      ++nans;
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_TRUE(is_e4m3_nan(float_to_fp8_e4m3(v))) << c;
      continue;
    }
    EXPECT_FALSE(std::isnan(v) || std::isinf(v)) << c;
    EXPECT_EQ(float_to_fp8_e4m3(v), code) << c;
    EXPECT_EQ(float_to_fp8_e4m3(v, Fp8Overflow::kNonSaturating), code) << c;
  }
  EXPECT_EQ(nans, 2);  // only S.1111.111
}

// Between two neighbouring codes the midpoint goes to the even code, and
// anything off the midpoint goes to the nearer one.
template <typename Enc, typename Dec>
void check_rounding(Enc enc, Dec dec, uint8_t max_code, std::function<bool(uint8_t)> valid) {
  for (int sign = 0; sign < 2; ++sign) {
    for (int c = 0; c < max_code; ++c) {
      const uint8_t lo = static_cast<uint8_t>(c | (sign << 7));
      const uint8_t hi = static_cast<uint8_t>((c + 1) | (sign << 7));
      if (!valid(lo) || !valid(hi)) continue;
      const double a = dec(lo), b = dec(hi);
      const double mid = (a + b) / 2;
      const uint8_t even = (lo & 1) ? hi : lo;
      EXPECT_EQ(enc(static_cast<float>(mid)), even) << "between codes " << c << " and " << c + 1;
      const double eps = std::fabs(b - a) / 8;
      EXPECT_EQ(enc(static_cast<float>(mid - (b > a ? eps : -eps))), lo) << c;
      EXPECT_EQ(enc(static_cast<float>(mid + (b > a ? eps : -eps))), hi) << c;
    }
  }
}

TEST(Fp8E4M3, RoundsToNearestEven) {
  check_rounding([](float f) { return float_to_fp8_e4m3(f); }, fp8_e4m3_to_float, 0x7e,
                 [](uint8_t c) { return !is_e4m3_nan(c); });
}

TEST(Fp8E4M3, SaturatesOrOverflows) {
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3(460.0f, Fp8Overflow::kNonSaturating), 0x7e);  // rounds down to 448
  EXPECT_EQ(float_to_fp8_e4m3(464.0f, Fp8Overflow::kNonSaturating), 0x7e);  // tie -> even (448)
  EXPECT_TRUE(is_e4m3_nan(float_to_fp8_e4m3(470.0f, Fp8Overflow::kNonSaturating)));
  EXPECT_TRUE(is_e4m3_nan(float_to_fp8_e4m3(std::numeric_limits<float>::infinity(), Fp8Overflow::kNonSaturating)));
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  // Below half the smallest subnormal: zero, with the sign kept.
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(1.0f, -11)), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);           // tie with 0 -> even (0)
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.5f, -10)), 0x01);
}

// float_to_fp8_e4m3's bit manipulation against the generic minifloat encoder, both overflow
// modes: every 2,053rd bit pattern, every float within 64 ulps of each rounding boundary (the
// midpoints between consecutive codes, 448's upper one included), and the edge values.
TEST(Fp8E4M3, EncodingMatchesTheGenericEncoder) {
  auto same = [](uint32_t u) {
    const float f = bits_float(u);
    for (Fp8Overflow m : {Fp8Overflow::kSaturate, Fp8Overflow::kNonSaturating})
      EXPECT_EQ(float_to_fp8_e4m3(f, m), float_to_fp8_e4m3_reference(f, m)) << std::hex << u;
  };
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 2053) same(static_cast<uint32_t>(u));
  for (int c = 0; c < 0x7e; ++c) {
    const uint32_t mid = float_bits(
        0.5f * (fp8_e4m3_to_float(static_cast<uint8_t>(c)) + fp8_e4m3_to_float(static_cast<uint8_t>(c + 1))));
    for (uint32_t d = 0; d < 64; ++d) {
      same(mid + d);
      same(mid - d);
      same((mid + d) | 0x80000000u);
    }
  }
  for (uint32_t d = 0; d < 64; ++d) same(float_bits(464.0f) + d), same(float_bits(464.0f) - d);
  for (float f : {0.0f, -0.0f, 448.0f, 464.0f, 480.0f, 1e30f, std::ldexp(1.0f, -6), std::ldexp(1.0f, -9),
                  std::ldexp(1.0f, -10), std::ldexp(1.5f, -10), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    same(float_bits(f));
}

TEST(Fp8E5M2, AllCodesDecodeAndRoundTrip) {
  int nans = 0, infs = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = fp8_e5m2_to_float(code);
    if (is_e5m2_nan(code)) {
      ++nans;
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_TRUE(is_e5m2_nan(float_to_fp8_e5m2(v))) << c;
      continue;
    }
    if (is_e5m2_inf(code)) {
      ++infs;
      EXPECT_TRUE(std::isinf(v)) << c;
      EXPECT_EQ(float_to_fp8_e5m2(v, Fp8Overflow::kNonSaturating), code);
      EXPECT_EQ(float_to_fp8_e5m2(v), (code & 0x80) | 0x7b);  // saturating: inf -> max
      continue;
    }
    EXPECT_EQ(float_to_fp8_e5m2(v), code) << c;
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(fp8_e5m2_to_float(0x7b), 57344.0f);
  EXPECT_EQ(fp8_e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_e5m2_to_float(0x3c), 1.0f);
}

TEST(Fp8E5M2, RoundsAndSaturates) {
  check_rounding([](float f) { return float_to_fp8_e5m2(f); }, fp8_e5m2_to_float, 0x7b,
                 [](uint8_t c) { return !is_e5m2_nan(c) && !is_e5m2_inf(c); });
  EXPECT_EQ(float_to_fp8_e5m2(1e9f), 0x7b);
  EXPECT_EQ(float_to_fp8_e5m2(1e9f, Fp8Overflow::kNonSaturating), 0x7c);
  EXPECT_EQ(float_to_fp8_e5m2(-1e9f, Fp8Overflow::kNonSaturating), 0xfc);
  EXPECT_EQ(float_to_fp8_e5m2(61439.0f, Fp8Overflow::kNonSaturating), 0x7b);
}

TEST(Fp8E5M2, AgreesWithF16Truncation) {
  // e5m2 is f16 with the low 8 mantissa bits rounded away: for every f16 value
  // that is exactly an e5m2 value, the codes agree with the top byte.
  for (int h = 0; h < 65536; ++h) {
    if ((h & 0xff) != 0) continue;
    const float v = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    EXPECT_EQ(float_to_fp8_e5m2(v, Fp8Overflow::kNonSaturating), h >> 8) << h;
  }
}

TEST(F16, AllCodesRoundTrip) {
  for (int h = 0; h < 65536; ++h) {
    const float v = f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(v))));
      continue;
    }
    EXPECT_EQ(float_to_f16(v), h) << h;
  }
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // tie above max rounds to inf
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

// float_to_f16's bit manipulation against the generic minifloat encoder: every 2,053rd bit
// pattern (both signs, all exponents: normals, f16 subnormals, overflow, inf, NaNs), and every
// float within 64 ulps of each f16 rounding boundary and of the normal/subnormal edges.
TEST(F16, EncodingMatchesTheGenericEncoder) {
  auto same = [](uint32_t u) {
    const float f = bits_float(u);
    EXPECT_EQ(float_to_f16(f), float_to_f16_reference(f)) << std::hex << u;
  };
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 2053) same(static_cast<uint32_t>(u));
  for (int h = 0; h < 0x7c00; ++h) {
    // The midpoint between code h and h + 1, as a float, and its neighbours.
    const float lo = f16_to_float(static_cast<uint16_t>(h)), hi = f16_to_float(static_cast<uint16_t>(h + 1));
    const uint32_t mid = float_bits(0.5f * (lo + hi));
    for (uint32_t d = 0; d < 64; ++d) {
      same(mid + d);
      same(mid - d);
      same((mid + d) | 0x80000000u);
    }
  }
  for (float f :
       {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 1e30f, std::ldexp(1.0f, -14), std::ldexp(1.0f, -24),
        std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    same(float_bits(f));
}

TEST(BF16, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(0x7f800001)))));  // signalling NaN stays NaN
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  for (int h = 0; h < 65536; ++h) {
    const float v = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(v)) { EXPECT_EQ(float_to_bf16(v), h); }
  }
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_from_safetensors_name("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_from_safetensors_name("BF16"), DType::kBF16);
  EXPECT_FALSE(dtype_from_safetensors_name("F4").has_value());
  EXPECT_STREQ(dtype_safetensors_name(DType::kI32), "I32");
}

TEST(DType, ConvertBuffers) {
  const float in[4] = {1.5f, -2.25f, 448.0f, 1000.0f};
  uint8_t e4[4];
  convert_from_f32(in, e4, DType::kF8E4M3, 4);
  float back[4];
  convert_to_f32(e4, DType::kF8E4M3, back, 4);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -2.25f);
  EXPECT_EQ(back[2], 448.0f);
  EXPECT_EQ(back[3], 448.0f);  // saturated
  const int32_t ints[2] = {-7, 9};
  convert_to_f32(ints, DType::kI32, back, 2);
  EXPECT_EQ(back[0], -7.0f);
  EXPECT_EQ(back[1], 9.0f);
}

}  // namespace
}  // namespace tf

namespace tf {
namespace {

// Large conversions are split across cores: the bytes must equal element-wise
// conversion for a length that does not split evenly.
TEST(DtypeConvert, LargeParallelConversionsEqualElementWise) {
  const size_t n = (size_t{1} << 23) + 12345;
  std::vector<float> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(static_cast<int64_t>(i * 2654435761u % 100003) - 50000) / 777.0f;
  std::vector<uint16_t> bf(n);
  convert_from_f32(src.data(), bf.data(), DType::kBF16, n);
  std::vector<float> back(n);
  convert_to_f32(bf.data(), DType::kBF16, back.data(), n);
  for (size_t i = 0; i < n; i += 997) {
    ASSERT_EQ(bf[i], float_to_bf16(src[i])) << i;
    ASSERT_EQ(back[i], bf16_to_float(bf[i])) << i;
  }
  ASSERT_EQ(bf[n - 1], float_to_bf16(src[n - 1]));
  ASSERT_EQ(back[n - 1], bf16_to_float(bf[n - 1]));
}

}  // namespace
}  // namespace tf
