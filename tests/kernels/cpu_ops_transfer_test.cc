// The transfer part of the Ops interface on the CPU backend: to_device/to_host give
// packed copies, copy() and copy_many() handle row-strided views, mismatches are errors.
#include <gtest/gtest.h>

#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"

namespace tf {
namespace {

Tensor iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_floats(shape, v);
}

TEST(CpuOpsTransfer, ToDeviceAndToHostArePackedCopies) {
  auto ops = make_cpu_ops();
  const Tensor a = iota({4, 6});
  const Tensor cols = a.slice(1, 1, 4);  // [4, 3], row stride 6
  Tensor up = ops->to_device(cols);
  ASSERT_TRUE(up.is_contiguous());
  ASSERT_EQ(up.shape(), (Shape{4, 3}));
  EXPECT_EQ(up.to_vector(), cols.to_vector());
  EXPECT_NE(up.raw(), cols.raw());  // a copy, not a view
  Tensor down = ops->to_host(up);
  EXPECT_EQ(down.to_vector(), cols.to_vector());
  EXPECT_NE(down.raw(), up.raw());
}

TEST(CpuOpsTransfer, CopyIntoAColumnBlock) {
  auto ops = make_cpu_ops();
  Tensor cat = Tensor::zeros({3, 5}, DType::kF32);
  const Tensor a = iota({3, 2});
  Tensor block = cat.slice(1, 3, 5);
  ops->copy(block, a);
  const std::vector<float> got = cat.to_vector();
  const std::vector<float> want = {0, 0, 0, 0, 1, 0, 0, 0, 2, 3, 0, 0, 0, 4, 5};
  EXPECT_EQ(got, want);
}

TEST(CpuOpsTransfer, MismatchesAreErrorsNamingBothTensors) {
  auto ops = make_cpu_ops();
  Tensor dst = Tensor::empty({2, 3}, DType::kF32);
  const Tensor src = iota({3, 2});
  try {
    ops->copy(dst, src);
    FAIL() << "expected a shape error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("f32[3, 2]"), std::string::npos) << e.what();
  }
  Tensor wrong_type = Tensor::empty({3, 2}, DType::kI32);
  EXPECT_THROW(ops->copy(wrong_type, src), StatusError);
}

TEST(CpuOpsTransfer, CopyManyCopiesEveryPairAndChecksTheCounts) {
  auto ops = make_cpu_ops();
  Tensor cat = Tensor::zeros({3, 5}, DType::kF32);
  Tensor block = cat.slice(1, 3, 5);
  Tensor packed = Tensor::zeros({2, 2}, DType::kF32);
  const Tensor a = iota({3, 2}), b = iota({2, 2});
  ops->copy_many({&block, &packed}, {&a, &b});
  EXPECT_EQ(cat.to_vector(), (std::vector<float>{0, 0, 0, 0, 1, 0, 0, 0, 2, 3, 0, 0, 0, 4, 5}));
  EXPECT_EQ(packed.to_vector(), b.to_vector());
  try {
    ops->copy_many({&block, &packed}, {&a});
    FAIL() << "expected a count error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("2 destinations for 1 sources"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tf
