// Sampling on the backend's device (Ops::sample_rows): one token per logits row,
// with exactly the host sampler's math (src/sampling/sampler.h), so that only
// the token ids (and small logprob arrays) leave the device instead of the
// whole [rows, vocab] logits.
//
// What a row gets, in the host sampler's order (logits_processors.h):
//   greedy: argmax of the row, ties to the lowest id;
//   else:   temperature (l / t in f32, skipped at t == 1), min_p (mask l < max + log_min_p),
//           top_k (mask below the k-th largest value), top_p (mask below the smallest
//           value whose strictly-higher mass is < top_p * total), then the Gumbel-max draw
//           argmax_i(l_i + G(seed, position, i)), ties to the lowest id (counter_hash.h).
// Logit bias, banned ids, penalties, logits processors and processed logprobs are
// not here: a caller samples such rows on the host (sequence_sampler.h says which).
//
// Exactness, and where it could differ: temperature (IEEE division), min_p (one
// f32 addition of a host-computed log), top_k (a selection) and greedy are bit-exact
// on every backend. Two steps involve rounding that depends on the backend:
//  - top_p compares sums of exp(l - max) in double; the order of summation differs
//    (host: buckets, device: a parallel reduction), so the sums differ by < 1e-11 of
//    the total. The kept set can only differ when a partial sum lies within that of
//    top_p * total;
//  - the Gumbel keys use the platform's double log (glibc vs CUDA: <= 1 ulp each),
//    so two keys closer than ~1e-14 could order differently.
// Instead of accepting such a rare difference, each backend checks both margins
// (kTopPMargin, gumbel_margin below, far wider than the rounding) and reports a row
// that is too close to call as kUndecided; the caller samples that row on the host.
// Hence: every token a backend decides equals the host sampler's token.
//
// Logprobs (raw mode only: the model's unmodified distribution): logprob = l - lse
// with lse = max + log(sum exp(l - max)) in double; the summation order differs
// between backends, so values may differ from the host's in the last float bits.
#pragma once

#include <cstdint>
#include <limits>

namespace tf {

inline constexpr int32_t kSampleRowsMaxTopLogprobs = 20;

// A top_p decision is taken only when every partial mass it compares is farther
// than kTopPMargin * total from top_p * total (rounding error: < 3e-11 * total
// for a 2^18-token row summed in any order).
inline constexpr double kTopPMargin = 1e-9;
// The Gumbel winner is taken only when it beats the runner-up by more than this
// (double log error <= 1 ulp on each side: ~1e-14 absolute on a key).
constexpr double gumbel_margin(double best_key) {
  return 1e-12 * (1.0 + (best_key < 0 ? -best_key : best_key));
}

struct SampleRowParams {
  bool greedy = false;              // argmax, ties to the lowest id; the fields below unused
  float temperature = 1.0f;         // divides the logits unless it is 1 or <= 0
  float log_min_p = -std::numeric_limits<float>::infinity();  // std::log(min_p) (host f32); -inf: off
  int32_t top_k = 0;                // <= 0 (or >= the row's width): off
  float top_p = 1.0f;               // >= 1: off
  uint64_t seed = 0;                // the choice's seed (sampling/seed.h)
  int64_t position = 0;             // absolute position of the token being chosen
  int32_t vocab_limit = 0;          // ids >= this are never sampled (padding); <= 0: the whole row
  bool logprob = false;             // the chosen token's raw logprob
  int32_t top_logprobs = 0;         // 0..kSampleRowsMaxTopLogprobs raw top logprobs
  // >= 0: scores this token instead of sampling one (a prompt's own tokens): the result's
  // token is it, with its raw logprob and the top logprobs as asked; the fields above it are
  // unused. An id at or past vocab_limit scores -inf (the host masks padding ids so); one
  // past the row is refused.
  int32_t scored_token = -1;
  // The chosen (or scored) token's rank as vLLM counts it: the ids below vocab_limit whose
  // logit is >= the token's (1 for the argmax; ties count against it). Needs logprob.
  bool rank = false;
};

enum class SampleRowStatus : int32_t {
  kOk = 0,
  kUndecided = 1,    // too close to call (see above): sample the row on the host
  kBadLogit = 2,     // NaN or +inf in the row (the host sampler reports which)
  kNothingLeft = 3,  // every token masked (the host sampler reports the error)
};

struct SampleRowResult {
  int32_t token = -1;
  SampleRowStatus status = SampleRowStatus::kUndecided;
  float logprob = 0.0f;             // when params.logprob
  int32_t top_count = 0;            // entries of top_tokens/top_values filled (finite logits only)
  int32_t top_tokens[kSampleRowsMaxTopLogprobs] = {};
  float top_values[kSampleRowsMaxTopLogprobs] = {};  // logprobs, most likely first (ties: lower id)
  int32_t rank = 0;                                  // when params.rank
};

// Order-preserving map of a float to an unsigned key (larger float, larger key;
// -0 sorts just below +0, which compare equal as floats: thresholds built from
// keys keep both). Used for radix selection on every backend.
constexpr uint32_t float_order_key(uint32_t bits) {
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
constexpr uint32_t float_bits_of_order_key(uint32_t key) {
  return (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;
}

}  // namespace tf
