#include "model/finite_values.h"

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace tf {
namespace {

// Element `flat` of a packed tensor as its index, "[i, j]".
std::string index_of(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_to_string(idx);
}

}  // namespace

Status check_finite_values(const Tensor& t, const std::string& what) {
  const DType dt = t.dtype();
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) return Status::ok();
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  const int64_t n = c.numel();
  auto refuse = [&](int64_t i, float v) {
    return invalid_argument(what + ": non-finite value " + std::to_string(v) + " at " +
                            index_of(c.shape(), i) + " (a damaged file?)");
  };
  if (dt == DType::kF32) {
    const float* p = c.data<float>();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return refuse(i, p[i]);
    return Status::ok();
  }
  // 16-bit floats: inf or NaN has an all-ones exponent (f16: 5 bits, bf16: 8 bits). A branch-free
  // pass first (it vectorizes): most tensors have no such value.
  const uint16_t* h = c.data<uint16_t>();
  const uint16_t mask = dt == DType::kF16 ? 0x7C00u : 0x7F80u;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) any |= (h[i] & mask) == mask;
  if (!any) return Status::ok();
  for (int64_t i = 0; i < n; ++i)
    if ((h[i] & mask) == mask) return refuse(i, dt == DType::kF16 ? f16_to_float(h[i]) : bf16_to_float(h[i]));
  return Status::ok();
}

}  // namespace tf
