#include "model/finite_values.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace tf {
namespace {

std::string index_string(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

}  // namespace

Status check_finite_values(const Tensor& t, const std::string& what) {
  const DType dt = t.dtype();
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) return Status::ok();
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  const int64_t n = c.numel();
  if (dt != DType::kF32) {
    // A branch-free pass first (vectorized): most tensors have no such value.
    const uint16_t* h = c.data<uint16_t>();
    const uint16_t mask = dt == DType::kF16 ? 0x7C00u : 0x7F80u;
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any |= (h[i] & mask) == mask;
    if (!any) return Status::ok();
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = 0.0f;
    if (dt == DType::kF32) {
      v = c.data<float>()[i];
    } else {
      const uint16_t h = c.data<uint16_t>()[i];
      // All-ones exponent: inf or NaN (f16: 5 bits, bf16: 8 bits).
      const bool bad = dt == DType::kF16 ? (h & 0x7C00u) == 0x7C00u : (h & 0x7F80u) == 0x7F80u;
      if (!bad) continue;
      v = dt == DType::kF16 ? f16_to_float(h) : bf16_to_float(h);
    }
    if (std::isfinite(v)) continue;
    return invalid_argument(what + ": non-finite value " + std::to_string(v) + " at " +
                            index_string(c.shape(), i) + " (a damaged file?)");
  }
  return Status::ok();
}

}  // namespace tf
