// The pieces of a device-sampled row (Ops::sample_rows, kernels/api/sample_rows.h)
// that every sampling kernel shares: the job, the value processing (temperature,
// thresholds), the row's best (value, id) and best Gumbel keys and their combines.
// The one-block kernels (cuda_sampling.cu) and the grid kernel (cuda_sampling_grid.cu)
// apply the same arithmetic per element, so a token either decides equals the host's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/api/counter_hash.h"
#include "kernels/api/sample_rows.h"

namespace tf::cuda::sampling {

// The largest Gumbel variate hash_to_open_unit allows is < 36.8 (u <= 1 - 2^-53).
constexpr double kMaxGumbel = 37.5;
constexpr double kLn2 = 0.69314718055994530942;

struct RowJob {
  const float* x;
  int64_t n;
  SampleRowParams p;
};

// (value, id) with "better" = larger value, then lower id; id -1 = none.
struct ArgBest {
  float v;
  int64_t id;
};
__device__ __forceinline__ bool better(float v1, int64_t i1, float v2, int64_t i2) {
  if (i2 < 0) return i1 >= 0;
  if (i1 < 0) return false;
  return v1 > v2 || (v1 == v2 && i1 < i2);
}
__device__ __forceinline__ ArgBest combine(ArgBest a, ArgBest b) { return better(a.v, a.id, b.v, b.id) ? a : b; }

// Best key, its id, and the runner-up key.
struct KeyBest {
  double best;
  int64_t id;
  double second;
};
__device__ __forceinline__ KeyBest combine(KeyBest a, KeyBest b) {
  const bool a_wins = a.id >= 0 && (b.id < 0 || a.best > b.best || (a.best == b.best && a.id < b.id));
  KeyBest w = a_wins ? a : b, l = a_wins ? b : a;
  w.second = fmax(w.second, l.id >= 0 ? l.best : -INFINITY);
  w.second = fmax(w.second, l.second);
  return w;
}

__device__ __forceinline__ ArgBest shfl(ArgBest a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.v, o), __shfl_xor_sync(0xffffffffu, a.id, o)};
}
__device__ __forceinline__ KeyBest shfl(KeyBest a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.best, o), __shfl_xor_sync(0xffffffffu, a.id, o),
          __shfl_xor_sync(0xffffffffu, a.second, o)};
}

__device__ __forceinline__ uint32_t order_key(float v) { return float_order_key(__float_as_uint(v)); }

struct Processing {
  bool scale;
  float temperature;
  float threshold;  // values below are removed (min_p, top_k, top_p as found)
  __device__ float value(float raw) const { return scale ? __fdiv_rn(raw, temperature) : raw; }
  // The processed value, or -inf when removed.
  __device__ float kept(float raw) const {
    const float v = value(raw);
    return v >= threshold ? v : -INFINITY;
  }
};

// One value as the top_p pass's first walk sees it: processed (-inf when removed) and, when kept,
// its exp against the row's maximum m, folded into the running minimum `mn` and mass `part`.
struct MassTerm {
  float v;
  double e;
  bool in;
};
__device__ inline MassTerm mass_term(const Processing& pr, float raw, bool valid, double m, float& mn, double& part) {
  MassTerm t{valid ? pr.kept(raw) : -INFINITY, 0.0, false};
  t.in = t.v != -INFINITY;
  if (t.in) {
    mn = fminf(mn, t.v);
    t.e = exp(static_cast<double>(t.v) - m);
    part += t.e;
  }
  return t;
}

// Gumbel-max over the kept tokens. As on the host (sampler.cc), the two logarithms
// are computed only where a token can come near the key of the argmax token (best0, a
// lower bound of the winner's key): E = -log(u) >= w = 1 - u, so
// floor(log2(w)) * ln2 > x + 1e-6 (x = v - best0) proves key < best0 - 1e-6. Such a
// token can neither win nor be within gumbel_margin of the winner, as long as that
// margin is below 1e-6 (keys below ~1e6: skipping is off beyond).
struct GumbelRow {
  double best0;
  bool skipping;
  uint64_t row_hash;  // counter_hash(seed, pos, i) = splitmix64(row_hash ^ i)
};
__device__ inline GumbelRow gumbel_row(const SampleRowParams& p, float pmax, int64_t argmax_id) {
  const uint64_t pos = static_cast<uint64_t>(p.position);
  const double u0 = hash_to_open_unit(counter_hash(p.seed, pos, static_cast<uint64_t>(argmax_id)));
  return {__dadd_rn(static_cast<double>(pmax), -log(-log(u0))),
          gumbel_margin(fabs(static_cast<double>(pmax)) + 40.0) < 1e-7, splitmix64(splitmix64(p.seed) ^ pos)};
}
// Element i with processed value v (-inf: removed) into a thread's best keys; a
// thread's elements come in ascending ids, so equal keys keep the lower id.
__device__ __forceinline__ void gumbel_consider(const GumbelRow& g, int64_t i, float v, KeyBest& kb) {
  if (v == -INFINITY) return;
  const double xd = static_cast<double>(v) - g.best0;
  if (g.skipping && xd < -kMaxGumbel) return;  // (before the hash: it needs no u)
  const double u = hash_to_open_unit(splitmix64(g.row_hash ^ static_cast<uint64_t>(i)));
  if (g.skipping) {
    const double w = 1.0 - u;  // exact: u is a multiple of 2^-53 in (0, 1)
    const int e2 = static_cast<int>((__double_as_longlong(w) >> 52) & 0x7FF) - 1023;
    if (e2 * kLn2 > xd + 1e-6) return;
  }
  const double key = __dadd_rn(static_cast<double>(v), -log(-log(u)));
  if (kb.id < 0 || key > kb.best) {
    kb.second = kb.id < 0 ? kb.second : kb.best;
    kb.best = key;
    kb.id = i;
  } else if (key > kb.second) {
    kb.second = key;
  }
}

}  // namespace tf::cuda::sampling
