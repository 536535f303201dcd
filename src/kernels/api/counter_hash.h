// Counter-based randomness for sampling: a draw is a pure function of
// (seed, absolute position, token id), never of a generator's state.
//
// Why: continuous batching puts a request beside different neighbours from
// run to run; a stateful generator (or a batch-wide one) would make the
// reply depend on that. With a counter-based draw the token chosen at
// position p depends only on the request's own seed, p and its logits.
//
// Hash: h = mix(mix(mix(seed) ^ position) ^ token), where mix is the
// SplitMix64 finalizer (Steele, Lea, Flood 2014) applied to x + golden gamma.
// Each stage is a bijection of 64 bits, so distinct (position, token) pairs
// under one seed never collide structurally; the finalizer's avalanche makes
// the 52 bits used for the uniform statistically independent
// (checked by the chi-square tests in tests/unit/sampling_*).
//
// This header lives in kernels/api because the host sampler (src/sampling)
// and the device sampling kernels (sample_rows.h) must compute the very same
// bits: everything here is integer arithmetic or exact double operations, and
// constexpr, so nvcc (--expt-relaxed-constexpr) compiles it for the device too.
// The Gumbel transform itself (two logarithms) is in sampling/counter_hash.h
// and, on the device, in the backend's sampling kernel.
#pragma once

#include <cstdint>

namespace tf {

inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

// SplitMix64: one step of the generator, as a pure function of its input.
[[nodiscard]] constexpr uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + kGoldenGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

[[nodiscard]] constexpr uint64_t counter_hash(uint64_t seed, uint64_t position, uint64_t token) {
  return splitmix64(splitmix64(splitmix64(seed) ^ position) ^ token);
}

// Uniform in the open interval (0, 1): the top 52 bits k, as (k + 0.5) / 2^52.
// With 52 bits, k + 0.5 is exact in a double, so u is never rounded to 0 or 1
// (either would make the Gumbel infinite): 2^-53 <= u <= 1 - 2^-53.
[[nodiscard]] constexpr double hash_to_open_unit(uint64_t h) {
  return (static_cast<double>(h >> 12) + 0.5) * (1.0 / 4503599627370496.0);
}

}  // namespace tf
