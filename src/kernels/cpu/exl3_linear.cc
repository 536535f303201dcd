// The EXL3 linear layer on the CPU (see exl3_linear.h).
#include "kernels/cpu/exl3_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/api/exl3_decode.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

constexpr int64_t kBlock = kExl3Hadamard;

}  // namespace

void exl3_matmul(Tensor& out, const Tensor& x, const Exl3Weight& w, const std::string& name) {
  require_host_exl3(w, name);
  check_f32("exl3_matmul x", x);
  const int64_t k = w.in_features(), n = w.out_features();
  if (x.dim() < 1 || x.size(-1) == 0 || x.size(-1) > k) {
    throw StatusError(invalid_argument(name + ": input " + x.describe() + " is wider than the " +
                                       std::to_string(k) + " (padded) inputs of the EXL3 weight, or empty"));
  }
  const int64_t k_in = x.size(-1), rows = x.numel() / k_in;
  if (out.dim() < 1 || out.size(-1) == 0 || out.size(-1) > n) {
    throw StatusError(invalid_argument(name + ": output " + out.describe() + " is wider than the " +
                                       std::to_string(n) + " (padded) outputs of the EXL3 weight, or empty"));
  }
  const int64_t n_out = out.size(-1);
  check_f32("exl3_matmul out", out, rows * n_out);
  if (rows == 0) return;

  const std::vector<float> suh = exl3_f16_vector(w.suh), svh = exl3_f16_vector(w.svh);
  const std::vector<float> bias = w.bias.is_null() ? std::vector<float>() : exl3_f16_vector(w.bias);

  // Rotated input [rows, k].
  std::vector<float> xr(static_cast<size_t>(rows * k), 0.0f);
  const float* xp = x.data<float>();
  parallel_rows(rows, k * 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* dst = xr.data() + t * k;
      for (int64_t c = 0; c < k_in; ++c) dst[c] = xp[t * k_in + c] * suh[c];
      fwht128(dst, k);
    }
  });

  const int64_t words = w.trellis.size(2), tiles_n = w.trellis.size(1);
  const int16_t* trellis = w.trellis.data<int16_t>();
  const float* table = exl3_codebook_table_f32(w.codebook);
  float* op = out.data<float>();
  const int64_t blocks = (n_out + kBlock - 1) / kBlock;  // only the blocks the caller keeps
  parallel_rows(blocks, k * kBlock * (rows + 4), [&](int64_t b, int64_t e) {
    std::vector<float> acc(static_cast<size_t>(rows * kBlock));
    std::vector<float> panel(static_cast<size_t>(kExl3Tile * kBlock));  // 16 rows of W_hat, 128 columns
    for (int64_t blk = b; blk < e; ++blk) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = 0; i < k / kExl3Tile; ++i) {
        for (int64_t jj = 0; jj < kBlock / kExl3Tile; ++jj) {
          const int64_t tile = i * tiles_n + blk * (kBlock / kExl3Tile) + jj;
          exl3_decode_tile_f32(trellis + tile * words, w.bits, table, panel.data() + jj * kExl3Tile, kBlock);
        }
        for (int64_t t = 0; t < rows; ++t) {
          const float* xi = xr.data() + t * k + i * kExl3Tile;
          float* a = acc.data() + t * kBlock;
          for (int64_t r = 0; r < kExl3Tile; ++r) {
            const float xv = xi[r];
            const float* pr = panel.data() + r * kBlock;
            for (int64_t c = 0; c < kBlock; ++c) a[c] += xv * pr[c];
          }
        }
      }
      for (int64_t t = 0; t < rows; ++t) {
        float* a = acc.data() + t * kBlock;
        fwht128(a, kBlock);
        for (int64_t c = 0; c < kBlock; ++c) {
          const int64_t col = blk * kBlock + c;
          if (col >= n_out) break;
          op[t * n_out + col] = a[c] * svh[col] + (bias.empty() ? 0.0f : bias[col]);
        }
      }
    }
  });
}

}  // namespace tf::cpu
