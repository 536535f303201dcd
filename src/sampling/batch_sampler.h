// Samples every row of a [rows, vocab] host logits buffer, rows in parallel.
//
// Row r is sampled by seqs[r] (its own seed, history, position), so the
// split of rows over threads changes nothing: each token depends only on
// its own row and sequence state (see sampler.h). Each thread uses its own
// Sampler scratch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "sampling/sequence_sampler.h"

namespace tf {

// logits.size() must equal seqs.size() * vocab; a row whose sequence fails
// (or a shape mismatch) yields an error in its slot, never an abort.
[[nodiscard]] std::vector<Expected<SequenceStep>> sample_batch(std::span<const float> logits, int64_t vocab,
                                                               std::span<SequenceSampler* const> seqs,
                                                               ThreadPool& pool);

}  // namespace tf
