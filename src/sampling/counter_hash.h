// Counter-based randomness for sampling (the hash itself and why it is
// counter-based: kernels/api/counter_hash.h, shared with the device sampler),
// and the Gumbel variate the host sampler draws from it.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/api/counter_hash.h"

namespace tf {

// A standard Gumbel variate for (seed, position, token): -log(-log(u)).
// argmax_i(logit_i + gumbel_i) is then an exact draw from softmax(logits).
[[nodiscard]] inline double gumbel_noise(uint64_t seed, uint64_t position, uint64_t token) {
  const double u = hash_to_open_unit(counter_hash(seed, position, token));
  return -std::log(-std::log(u));
}

}  // namespace tf
