// Rank-order sums on the host (see rank_order_sum.h). Rank-outer loops over
// blocks keep the inner loop vectorisable without changing the order of the adds.
#include "comm/rank_order_sum.h"

#include <algorithm>

#include "core/dtype.h"

namespace tf {

void rank_order_sum_f32(const float* gathered, int ranks, size_t n, float* out) {
  std::copy(gathered, gathered + n, out);
  for (int r = 1; r < ranks; ++r) {
    const float* row = gathered + static_cast<size_t>(r) * n;
    for (size_t i = 0; i < n; ++i) out[i] += row[i];
  }
}

void rank_order_sum_bf16(const uint16_t* gathered, int ranks, size_t n, uint16_t* out) {
  constexpr size_t kBlock = 1024;
  float acc[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    size_t len = std::min(kBlock, n - start);
    for (size_t i = 0; i < len; ++i) acc[i] = bf16_to_float(gathered[start + i]);
    for (int r = 1; r < ranks; ++r) {
      const uint16_t* row = gathered + static_cast<size_t>(r) * n + start;
      for (size_t i = 0; i < len; ++i) acc[i] += bf16_to_float(row[i]);
    }
    for (size_t i = 0; i < len; ++i) out[start + i] = float_to_bf16(acc[i]);
  }
}

}  // namespace tf
