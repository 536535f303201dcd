// Matmul against weights (x · W^T), per-head matmul, embedding lookup and row
// gather/scatter. Every output element is one dot product with a fixed
// summation order (8 partial sums), so results do not depend on the batch.
#include <string>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

constexpr int64_t kColBlock = 64;

}  // namespace

void matmul(Tensor& out, const Tensor& x, const Tensor& w, bool accumulate) {
  check_f32("matmul x", x);
  check_f32("matmul w", w);
  if (w.dim() != 2) throw StatusError(invalid_argument("matmul: weight must be 2-D, got " + w.describe()));
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(invalid_argument("matmul: x " + x.describe() + " does not match weight " + w.describe()));
  const int64_t rows = x.numel() / k;
  check_f32("matmul out", out, rows * n);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* op = out.data<float>();
  const int64_t col_blocks = (n + kColBlock - 1) / kColBlock;
  parallel_rows(rows * col_blocks, std::min(n, kColBlock) * k, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t r = item / col_blocks, c0 = (item % col_blocks) * kColBlock;
      const int64_t c1 = std::min(n, c0 + kColBlock);
      const float* xr = xp + r * k;
      float* orow = op + r * n;
      for (int64_t c = c0; c < c1; ++c) {
        const float v = dot(xr, wp + c * k, k);
        orow[c] = accumulate ? orow[c] + v : v;
      }
    }
  });
}

void head_matmul(Tensor& out, const Tensor& x, const Tensor& w) {
  check_f32("head_matmul x", x);
  check_f32("head_matmul w", w);
  if (w.dim() != 3) throw StatusError(invalid_argument("head_matmul: weight must be [H, N, K], got " + w.describe()));
  const int64_t h = w.size(0), n = w.size(1), k = w.size(2);
  if (x.numel() % (h * k) != 0)
    throw StatusError(invalid_argument("head_matmul: x " + x.describe() + " does not match " + w.describe()));
  const int64_t rows = x.numel() / (h * k);
  check_f32("head_matmul out", out, rows * h * n);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* op = out.data<float>();
  parallel_rows(rows * h, n * k, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t hh = item % h;
      const float* xr = xp + item * k;
      const float* wh = wp + hh * n * k;
      float* orow = op + item * n;
      for (int64_t c = 0; c < n; ++c) orow[c] = dot(xr, wh + c * k, k);
    }
  });
}

void embedding(Tensor& out, const Tensor& table, const Tensor& ids) {
  check_f32("embedding table", table);
  check_i32("embedding ids", ids);
  const int64_t vocab = table.size(0), d = table.size(1), n = ids.numel();
  check_f32("embedding out", out, n * d);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids.data<int32_t>()[i];
    if (id < 0 || id >= vocab)
      throw StatusError(out_of_range("embedding: token id " + std::to_string(id) + " outside the vocabulary of " +
                                     std::to_string(vocab)));
    std::copy_n(table.data<float>() + id * d, d, out.data<float>() + i * d);
  }
}

void gather_rows(Tensor& out, const Tensor& x, const Tensor& idx) {
  check_f32("gather_rows x", x);
  check_i32("gather_rows idx", idx);
  const int64_t d = x.size(-1), n = idx.numel();
  check_f32("gather_rows out", out, n * d);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(x.data<float>() + idx.data<int32_t>()[i] * d, d, out.data<float>() + i * d);
}

void scatter_add_rows(Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& scale) {
  check_f32("scatter_add_rows out", out);
  check_f32("scatter_add_rows x", x);
  check_i32("scatter_add_rows idx", idx);
  const int64_t d = out.size(-1), n = idx.numel();
  check_f32("scatter_add_rows scale", scale, n);
  for (int64_t i = 0; i < n; ++i) {
    float* o = out.data<float>() + idx.data<int32_t>()[i] * d;
    const float* xr = x.data<float>() + i * d;
    const float s = scale.data<float>()[i];
    for (int64_t c = 0; c < d; ++c) o[c] += s * xr[c];
  }
}

}  // namespace tf::cpu
