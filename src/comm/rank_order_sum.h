// Deterministic reduction: element i of the result is
//   ((x_0[i] + x_1[i]) + x_2[i]) + ... in f32,
// in rank order, and rounded once to the output dtype. Every backend reduces this
// way, so all ranks (and the CPU and CUDA backends) hold identical bits, and a
// test can compute the exact expected value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tf {

// `gathered` holds `ranks` rows of `n` elements each (row r = rank r's data).
void rank_order_sum_f32(const float* gathered, int ranks, size_t n, float* out);
void rank_order_sum_bf16(const uint16_t* gathered, int ranks, size_t n, uint16_t* out);

}  // namespace tf
