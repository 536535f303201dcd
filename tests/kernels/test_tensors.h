// Random inputs and exact comparisons shared by the kernel tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace tf {

// An f32 host tensor of normal values (deterministic in `seed`).
inline Tensor randn(const Shape& shape, uint32_t seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, stddev);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// The same bytes (packed host tensors).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A 1-D i32 host tensor holding `v`.
inline Tensor i32_tensor(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// Largest |ref - got| relative to the largest |ref| (floor 1); a NaN or infinity in
// `got` is infinitely wrong. The parity tests' measure.
inline double parity_rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i]) || std::isinf(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

// Largest |ref - got| relative to the largest |ref| (no floor); a size mismatch or a
// NaN or infinity in `got` is infinitely wrong. The quantized-matmul tests' measure.
inline double rel_err_to_max_ref(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  if (a.size() != b.size()) return INFINITY;
  double worst = 0, scale = 1e-30;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

// Like parity_rel_err (floor 1), but a NaN in `got` is right where `ref` has one and
// infinitely wrong elsewhere (an infinity is not flagged); a size mismatch is
// infinitely wrong. The small-op parity tests' measure.
inline double rel_err_nan_matched(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  if (a.size() != b.size()) return INFINITY;
  double worst = 0, scale = 1;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

// MoE routing ids [t, k]: per row, k distinct experts of [0, e), ascending (as moe_route
// gives them); `all_take` (>= 0) is in every row, so one expert serves every token.
inline Tensor moe_route_ids(int64_t t, int64_t k, int64_t e, uint32_t seed, int32_t all_take) {
  std::mt19937 rng(seed);
  Tensor ids = Tensor::empty({t, k}, DType::kI32);
  std::vector<int32_t> pool(static_cast<size_t>(e));
  for (int64_t r = 0; r < t; ++r) {
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> pick(pool.begin(), pool.begin() + k);
    if (all_take >= 0 && std::find(pick.begin(), pick.end(), all_take) == pick.end()) pick[0] = all_take;
    std::sort(pick.begin(), pick.end());
    std::copy(pick.begin(), pick.end(), ids.data<int32_t>() + r * k);
  }
  return ids;
}

}  // namespace tf
