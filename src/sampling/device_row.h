// The bridge between a request's sampling parameters and the device sampler
// (kernels/api/sample_rows.h): which rows the device may sample, with what
// parameters, and how its result becomes a SampledToken.
//
// A row goes to the device only when the device computes exactly what
// Sampler::sample would: no logit_bias, no banned ids (stop ids before
// min_tokens, bad words), no allowed_token_ids, no repetition/presence/frequency penalty, and logprobs (if
// any) of the raw distribution. Everything else stays on the host, per row. A device result other than kOk
// (undecided, bad logit, nothing left) is also resampled on the host, which gives the exact token or the
// exact error.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "kernels/api/sample_rows.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace tf {

// The device parameters of a row, or nullopt when only the host can sample it.
// vocab_limit: ids >= it are never sampled (the engine's padding rows; <= 0: none).
[[nodiscard]] std::optional<SampleRowParams> device_row_params(const SamplingParams& p, uint64_t seed,
                                                               int64_t position, std::span<const int32_t> banned,
                                                               int32_t vocab_limit);

// The SampledToken of a kOk device result, shaped as Sampler::sample shapes it
// (logprob and top entries only when p.logprobs).
[[nodiscard]] SampledToken sampled_token_of(const SampleRowResult& r, const SamplingParams& p);

}  // namespace tf
