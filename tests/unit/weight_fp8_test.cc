// FP8 block dequantization against hand-computed values, partial edge blocks included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/fp8_block_dequant.h"

namespace tf {
namespace {

Tensor codes_tensor(Shape shape, const std::vector<uint8_t>& codes) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF8E4M3);
  std::memcpy(t.raw(), codes.data(), codes.size());
  return t;
}

// e4m3fn codes used below: 0x38 = 1.0, 0x40 = 2.0, 0xC0 = -2.0, 0x3C = 1.5, 0x7E = 448, 0x01 = 2^-9, 0x00 = 0.
TEST(Fp8BlockDequant, SmallBlocksWithPartialEdges) {
  // [3, 5] with 2x2 blocks -> grid [2, 3]; the last block row (row 2) and the
  // last block column (col 4) are partial.
  Tensor codes = codes_tensor({3, 5}, {0x38, 0x40, 0xC0, 0x3C, 0x7E,   //
                                       0x01, 0x00, 0x38, 0x38, 0x40,   //
                                       0x3C, 0xC0, 0x7E, 0x38, 0x01});
  Tensor scale = Tensor::from_floats({2, 3}, {1.0f, 0.5f, 2.0f,  //
                                              4.0f, 0.25f, -1.0f});
  auto out = dequantize_fp8_block(codes, scale, {2, 2}, "w");
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  const std::vector<float> expected = {
      1.0f * 1, 2.0f * 1, -2.0f * 0.5f, 1.5f * 0.5f, 448.0f * 2,                 //
      0.001953125f * 1, 0.0f, 1.0f * 0.5f, 1.0f * 0.5f, 2.0f * 2,                //
      1.5f * 4, -2.0f * 4, 448.0f * 0.25f, 1.0f * 0.25f, 0.001953125f * -1.0f};  // block row 1
  EXPECT_EQ(out->shape(), (Shape{3, 5}));
  EXPECT_EQ(out->to_vector(), expected);
}

TEST(Fp8BlockDequant, RealBlockSizeEdgeBlocksUseTheirOwnScale) {
  // [130, 129] of 1.0 codes with 128x128 blocks: grid [2, 2]; every element equals its block's scale.
  Tensor codes = codes_tensor({130, 129}, std::vector<uint8_t>(130 * 129, 0x38));
  Tensor scale = Tensor::from_floats({2, 2}, {0.5f, 3.0f, -7.0f, 0.125f});
  auto out = dequantize_fp8_block(codes, scale, {128, 128}, "w");
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  const float* p = out->data<float>();
  EXPECT_EQ(p[0 * 129 + 0], 0.5f);
  EXPECT_EQ(p[127 * 129 + 127], 0.5f);
  EXPECT_EQ(p[127 * 129 + 128], 3.0f);    // partial last column block
  EXPECT_EQ(p[128 * 129 + 0], -7.0f);     // partial last row block
  EXPECT_EQ(p[129 * 129 + 127], -7.0f);
  EXPECT_EQ(p[129 * 129 + 128], 0.125f);  // the corner block (2 x 1 elements)
}

TEST(Fp8BlockDequant, RowRangeKeepsGlobalBlockIndex) {
  // Rows [72, 144) of a [144, 4] fused gate_up matrix cross the block boundary at 128.
  Tensor codes = codes_tensor({144, 4}, std::vector<uint8_t>(144 * 4, 0x40));  // 2.0
  Tensor scale = Tensor::from_floats({2, 1}, {0.25f, 8.0f});
  auto out = dequantize_fp8_block_rows(codes, scale, {128, 128}, 72, 144, "w");
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  ASSERT_EQ(out->shape(), (Shape{72, 4}));
  EXPECT_EQ(out->data<float>()[0], 0.5f);             // global row 72 -> block 0
  EXPECT_EQ(out->data<float>()[55 * 4 + 3], 0.5f);    // global row 127
  EXPECT_EQ(out->data<float>()[56 * 4], 16.0f);       // global row 128 -> block 1
  EXPECT_EQ(out->data<float>()[71 * 4 + 3], 16.0f);   // global row 143
}

TEST(Fp8BlockDequant, BatchedLeadingDimension) {
  Tensor codes = codes_tensor({2, 2, 3}, {0x38, 0x38, 0x38, 0x38, 0x38, 0x38,  //
                                          0x40, 0x40, 0x40, 0x40, 0x40, 0x40});
  Tensor scale = Tensor::from_floats({2, 1, 2}, {1.0f, 3.0f, 5.0f, 7.0f});
  auto out = dequantize_fp8_block(codes, scale, {2, 2}, "experts");
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  EXPECT_EQ(out->to_vector(), (std::vector<float>{1, 1, 3, 1, 1, 3, 10, 10, 14, 10, 10, 14}));
}

TEST(Fp8BlockDequant, WrongGridIsAnErrorNamingTheTensorAndShapes) {
  Tensor codes = codes_tensor({200, 192}, std::vector<uint8_t>(200 * 192, 0x38));
  Tensor scale = Tensor::from_floats({1, 2}, {1.0f, 1.0f});  // needs [2, 2]
  auto out = dequantize_fp8_block(codes, scale, {128, 128}, "layers.0.mlp.gate_proj.weight");
  ASSERT_FALSE(out.has_value());
  const std::string m = out.status().message();
  EXPECT_NE(m.find("layers.0.mlp.gate_proj.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("[1, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[200, 192]"), std::string::npos) << m;
}

TEST(Fp8BlockDequant, ANonFiniteScaleIsAnErrorNamingItsBlock) {
  Tensor codes = codes_tensor({200, 192}, std::vector<uint8_t>(200 * 192, 0x38));
  Tensor scale = Tensor::from_floats({2, 2}, {1.0f, 1.0f, INFINITY, 1.0f});
  auto out = dequantize_fp8_block(codes, scale, {128, 128}, "layers.0.mlp.gate_proj.weight");
  ASSERT_FALSE(out.has_value());
  const std::string m = out.status().message();
  EXPECT_NE(m.find("layers.0.mlp.gate_proj.weight: scale grid: non-finite value"), std::string::npos) << m;
  EXPECT_NE(m.find("[1, 0]"), std::string::npos) << m;
}

TEST(Fp8BlockDequant, RejectsNonFp8AndBadRanges) {
  Tensor f = Tensor::from_floats({2, 2}, {1, 2, 3, 4});
  Tensor scale = Tensor::from_floats({1, 1}, {1.0f});
  EXPECT_FALSE(dequantize_fp8_block(f, scale, {128, 128}, "w").has_value());
  Tensor codes = codes_tensor({2, 2}, {0x38, 0x38, 0x38, 0x38});
  EXPECT_FALSE(dequantize_fp8_block_rows(codes, scale, {128, 128}, 1, 3, "w").has_value());
  EXPECT_FALSE(dequantize_fp8_block(codes, scale, {0, 128}, "w").has_value());
}

}  // namespace
}  // namespace tf
