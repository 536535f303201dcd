// Matmul against quantized weights (fp8 block-scaled, q4; layouts in
// kernels/api/matrix.h) on the CPU: blocks of output channels are split over the
// thread pool; each block is dequantized to f32 once (per call) and every row of x
// is dotted with it by the same dot() as the dense matmul. So the result equals the
// dense matmul against the dequantized matrix bit for bit, and a row's result does
// not depend on the other rows of the call.
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

// Output channels dequantized together: 16 rows of K=12288 are 768 KiB of f32,
// which stays in L2 while all rows of x go past it.
constexpr int64_t kQuantColBlock = 16;

}  // namespace

void quant_matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) {
  if (Status s = check_matrix(w, "quant_matmul w"); !s.is_ok()) throw StatusError(s);
  if (!w.device().is_cpu()) throw StatusError(invalid_argument("quant_matmul: " + w.describe() + " is not on the host"));
  check_f32("quant_matmul x", x);
  const int64_t n = w.size(0), k = w.size(1);
  if (k == 0 || x.numel() % k != 0)
    throw StatusError(invalid_argument("quant_matmul: x " + x.describe() + " does not match weight " + w.describe()));
  const int64_t rows = x.numel() / k;
  check_f32("quant_matmul out", out, rows * n);
  if (rows == 0 || n == 0) return;
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const int64_t blocks = (n + kQuantColBlock - 1) / kQuantColBlock;
  parallel_rows(blocks, kQuantColBlock * k * (rows + 1), [&](int64_t b, int64_t e) {
    std::vector<float> wbuf(static_cast<size_t>(kQuantColBlock * k));
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t c0 = blk * kQuantColBlock, c1 = std::min(n, c0 + kQuantColBlock);
      dequantize_matrix_rows(w, c0, c1, wbuf.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * k;
        float* orow = op + r * n;
        for (int64_t c = c0; c < c1; ++c) {
          const float v = dot(xr, wbuf.data() + (c - c0) * k, k);
          orow[c] = accumulate ? orow[c] + v : v;
        }
      }
    }
  });
}

}  // namespace tf::cpu
