// FP8 block-scale dequantization; see fp8_block_dequant.h for the layout and its sources.
#include "model/fp8_block_dequant.h"

#include <algorithm>
#include <vector>

#include "model/finite_values.h"

namespace tf {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Expected<Tensor> dequantize_fp8_block_rows(const Tensor& codes, const Tensor& scale_inv,
                                           std::array<int64_t, 2> block, int64_t row_begin, int64_t row_end,
                                           const std::string& what) {
  if (codes.dtype() != DType::kF8E4M3 && codes.dtype() != DType::kF8E5M2) {
    return invalid_argument(what + ": expected an FP8 tensor, got " + codes.describe());
  }
  if (codes.dim() != 2 || scale_inv.dim() != 2) {
    return invalid_argument(what + ": FP8 block dequantization needs a 2-D weight and a 2-D scale grid, got " +
                            codes.describe() + " and " + scale_inv.describe());
  }
  if (!dtype_is_float(scale_inv.dtype()) || dtype_size(scale_inv.dtype()) < 2) {
    return invalid_argument(what + ": scale grid must be f32/bf16/f16, got " + scale_inv.describe());
  }
  if (block[0] <= 0 || block[1] <= 0) {
    return invalid_argument(what + ": block size must be positive");
  }
  const int64_t rows = codes.size(0), cols = codes.size(1);
  const Shape grid = {ceil_div(rows, block[0]), ceil_div(cols, block[1])};
  if (scale_inv.shape() != grid) {
    return invalid_argument(what + ": scale grid " + shape_to_string(scale_inv.shape()) + " does not match weight " +
                            shape_to_string(codes.shape()) + " with " + std::to_string(block[0]) + "x" +
                            std::to_string(block[1]) + " blocks (expected " + shape_to_string(grid) + ")");
  }
  if (row_begin < 0 || row_end > rows || row_begin > row_end) {
    return out_of_range(what + ": rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                        ") outside " + shape_to_string(codes.shape()));
  }
  const Tensor scales = scale_inv.to_f32();  // packed [grid0, grid1]
  TF_RETURN_IF_ERROR(check_finite_values(scales, what + ": scale grid"));
  const float* s = scales.data<float>();
  const bool e4m3 = codes.dtype() == DType::kF8E4M3;
  Tensor out = Tensor::empty({row_end - row_begin, cols}, DType::kF32);
  float* dst = out.data<float>();
  const auto* base = static_cast<const uint8_t*>(codes.raw());
  const int64_t rs = codes.stride(0), cs = codes.stride(1);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* srow = s + (r / block[0]) * grid[1];
    const uint8_t* crow = base + r * rs;
    float* drow = dst + (r - row_begin) * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = crow[c * cs];
      const float v = e4m3 ? fp8_e4m3_to_float(code) : fp8_e5m2_to_float(code);
      drow[c] = v * srow[c / block[1]];
    }
  }
  return out;
}

Expected<Tensor> dequantize_fp8_block(const Tensor& codes, const Tensor& scale_inv, std::array<int64_t, 2> block,
                                      const std::string& what) {
  if (codes.dim() < 2 || scale_inv.dim() != codes.dim()) {
    return invalid_argument(what + ": FP8 weight " + codes.describe() + " and scale grid " + scale_inv.describe() +
                            " must have the same rank (>= 2)");
  }
  if (codes.dim() == 2) return dequantize_fp8_block_rows(codes, scale_inv, block, 0, codes.size(0), what);
  if (codes.size(0) != scale_inv.size(0)) {
    return invalid_argument(what + ": leading dimension of weight " + shape_to_string(codes.shape()) +
                            " and scale grid " + shape_to_string(scale_inv.shape()) + " differ");
  }
  Tensor out = Tensor::empty(codes.shape(), DType::kF32);
  const int64_t per = codes.numel() / std::max<int64_t>(codes.size(0), 1);
  for (int64_t i = 0; i < codes.size(0); ++i) {
    TF_ASSIGN_OR_RETURN(Tensor part, dequantize_fp8_block(codes.select(0, i), scale_inv.select(0, i), block,
                                                          what + "[" + std::to_string(i) + "]"));
    std::copy(part.data<float>(), part.data<float>() + per, out.data<float>() + i * per);
  }
  return out;
}

}  // namespace tf
