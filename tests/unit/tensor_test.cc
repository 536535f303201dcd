#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/status.h"

namespace tf {
namespace {

Tensor iota(Shape shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Tensor::from_floats(std::move(shape), v);
}

TEST(Tensor, OwningContiguous) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::kBF16);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.owns_memory());
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.describe(), "bf16[2, 3, 4] cpu");
}

TEST(Tensor, SliceSelectTransposeShareMemory) {
  Tensor t = iota({3, 4});
  Tensor col = t.slice(1, 1, 3);  // [3, 2], strides [4, 1]
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.to_vector(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Tensor row = t.select(0, 2);
  EXPECT_EQ(row.to_vector(), (std::vector<float>{8, 9, 10, 11}));
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.shape(), (Shape{4, 3}));
  EXPECT_EQ(tr.contiguous().to_vector(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  t.data<float>()[5] = 100;
  EXPECT_EQ(col.to_vector()[2], 100);  // a view sees the write
  EXPECT_THROW(t.slice(0, 2, 5), StatusError);
}

TEST(Tensor, ReshapeAndUnsqueeze) {
  Tensor t = iota({2, 6});
  Tensor r = t.reshape({3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_THROW(t.reshape({5, 2}), StatusError);
  EXPECT_THROW(t.transpose(0, 1).reshape({12}), StatusError);
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 6}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 6, 1}));
}

TEST(Tensor, DtypeConversionsAndNonOwningViews) {
  Tensor t = Tensor::from_floats({4}, {1.0f, 0.5f, -3.0f, 1000.0f});
  Tensor b = t.to_dtype(DType::kBF16);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{1.0f, 0.5f, -3.0f, 1000.0f}));
  Tensor e = t.to_dtype(DType::kF8E4M3);
  EXPECT_EQ(e.to_vector(), (std::vector<float>{1.0f, 0.5f, -3.0f, 448.0f}));
  float buf[2] = {7, 8};
  Tensor v = Tensor::view_of(buf, {2}, DType::kF32);
  EXPECT_FALSE(v.owns_memory());
  EXPECT_EQ(v.to_vector(), (std::vector<float>{7, 8}));
}

TEST(Tensor, StridedCopy) {
  Tensor src = iota({4, 3}).transpose(0, 1);  // [3, 4] non-contiguous
  Tensor dst = Tensor::empty({3, 4}, DType::kF32);
  dst.copy_from(src);
  EXPECT_EQ(dst.to_vector(), src.contiguous().to_vector());
  Tensor wrong = Tensor::empty({4, 3}, DType::kF32);
  EXPECT_THROW(wrong.copy_from(src), StatusError);
}

}  // namespace
}  // namespace tf
