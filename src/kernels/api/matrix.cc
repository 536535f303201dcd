// Matrix: constructors, the structural check and the host dequantization that the
// CPU kernels, the quantizer's tests and the quality report share (layouts in matrix.h).
#include "kernels/api/matrix.h"

#include <algorithm>

namespace tf {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* matrix_format_name(MatrixFormat f) {
  switch (f) {
    case MatrixFormat::kDense: return "dense";
    case MatrixFormat::kFp8Block: return "fp8";
    case MatrixFormat::kQ4: return "q4";
  }
  return "?";
}

Matrix Matrix::fp8_block(Tensor codes, Tensor scales) {
  Matrix m;
  m.format_ = MatrixFormat::kFp8Block;
  m.rows_ = codes.dim() == 2 ? codes.size(0) : 0;
  m.cols_ = codes.dim() == 2 ? codes.size(1) : 0;
  m.codes_ = std::move(codes);
  m.scales_ = std::move(scales);
  return m;
}

Matrix Matrix::q4(Tensor codes, Tensor scales, int64_t k) {
  Matrix m;
  m.format_ = MatrixFormat::kQ4;
  m.rows_ = codes.dim() == 2 ? codes.size(0) : 0;
  m.cols_ = k;
  m.codes_ = std::move(codes);
  m.scales_ = std::move(scales);
  return m;
}

int64_t Matrix::size(int d) const {
  if (is_dense()) return dense_.size(d);
  return (d == 0 || d == -2) ? rows_ : cols_;
}

int64_t Matrix::nbytes() const {
  if (is_dense()) return static_cast<int64_t>(dense_.nbytes());
  return static_cast<int64_t>(codes_.nbytes() + scales_.nbytes());
}

std::string Matrix::describe() const {
  if (is_dense()) return dense_.describe();
  return std::string(matrix_format_name(format_)) + shape_to_string(shape()) + " " + device().to_string();
}

Matrix Matrix::with_storage(Tensor a, Tensor b) const {
  Matrix m = *this;
  if (is_dense()) {
    m.dense_ = std::move(a);
  } else {
    m.codes_ = std::move(a);
    m.scales_ = std::move(b);
  }
  return m;
}

Status check_matrix(const Matrix& m, const std::string& what) {
  if (m.is_dense()) {
    const Tensor& t = m.dense();
    if (t.dim() != 2) return invalid_argument(what + ": weight must be 2-D, got " + t.describe());
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16)
      return invalid_argument(what + ": dense weight must be f32 or bf16, got " + t.describe());
    return Status::ok();
  }
  const Tensor& c = m.codes();
  const Tensor& s = m.scales();
  const int64_t n = m.size(0), k = m.size(1);
  if (!c.is_contiguous() || !s.is_contiguous() || c.device() != s.device())
    return invalid_argument(what + ": codes " + c.describe() + " and scales " + s.describe() +
                            " must be packed on one device");
  if (m.format() == MatrixFormat::kFp8Block) {
    const Shape grid = {ceil_div(n, kFp8BlockSize), ceil_div(k, kFp8BlockSize)};
    if (c.dtype() != DType::kF8E4M3 || c.dim() != 2)
      return invalid_argument(what + ": fp8 codes must be 2-D f8_e4m3, got " + c.describe());
    if (s.dtype() != DType::kF32 || s.shape() != grid)
      return invalid_argument(what + ": fp8 scales must be f32" + shape_to_string(grid) + " for weight " +
                              shape_to_string(c.shape()) + ", got " + s.describe());
    return Status::ok();
  }
  const int64_t g = ceil_div(k, kQ4Group);
  if (c.dtype() != DType::kU8 || c.shape() != Shape{n, g * kQ4GroupBytes})
    return invalid_argument(what + ": q4 codes must be u8" + shape_to_string({n, g * kQ4GroupBytes}) + " for K " +
                            std::to_string(k) + ", got " + c.describe());
  if (s.dtype() != DType::kF16 || s.shape() != Shape{n, g})
    return invalid_argument(what + ": q4 scales must be f16" + shape_to_string({n, g}) + ", got " + s.describe());
  return Status::ok();
}

void dequantize_matrix_rows(const Matrix& m, int64_t r0, int64_t r1, float* dst) {
  const int64_t k = m.size(1);
  if (m.is_dense()) {
    const Tensor& t = m.dense();
    for (int64_t r = r0; r < r1; ++r) {
      const char* src = static_cast<const char*>(t.raw()) + r * t.stride(0) * static_cast<int64_t>(t.element_size());
      if (t.stride(1) == 1) {
        convert_to_f32(src, t.dtype(), dst + (r - r0) * k, static_cast<size_t>(k));
      } else {
        for (int64_t c = 0; c < k; ++c)
          dst[(r - r0) * k + c] = load_as_float(src, t.dtype(), static_cast<size_t>(c * t.stride(1)));
      }
    }
    return;
  }
  if (m.format() == MatrixFormat::kFp8Block) {
    const auto* codes = m.codes().data<uint8_t>();
    const float* scales = m.scales().data<float>();
    const int64_t gc = ceil_div(k, kFp8BlockSize);
    for (int64_t r = r0; r < r1; ++r) {
      const float* srow = scales + (r / kFp8BlockSize) * gc;
      const uint8_t* crow = codes + r * k;
      float* d = dst + (r - r0) * k;
      for (int64_t c = 0; c < k; ++c) d[c] = fp8_e4m3_to_float(crow[c]) * srow[c / kFp8BlockSize];
    }
    return;
  }
  const int64_t g = ceil_div(k, kQ4Group);
  const auto* codes = m.codes().data<uint8_t>();
  const auto* scales = m.scales().data<uint16_t>();
  for (int64_t r = r0; r < r1; ++r) {
    float* d = dst + (r - r0) * k;
    for (int64_t gi = 0; gi < g; ++gi) {
      const float s = f16_to_float(scales[r * g + gi]);
      const uint8_t* b = codes + (r * g + gi) * kQ4GroupBytes;
      const int64_t base = gi * kQ4Group, len = std::min(kQ4Group, k - base);
      for (int64_t j = 0; j < len; ++j) {
        const int nib = (j & 1) ? (b[j >> 1] >> 4) : (b[j >> 1] & 15);
        d[base + j] = static_cast<float>(nib - 8) * s;
      }
    }
  }
}

Tensor dequantize_matrix(const Matrix& m) {
  Tensor out = Tensor::empty({m.size(0), m.size(1)}, DType::kF32);
  dequantize_matrix_rows(m, 0, m.size(0), out.data<float>());
  return out;
}

}  // namespace tf
