#include "sampling/batch_sampler.h"

#include <optional>
#include <string>

namespace tf {

std::vector<Expected<SequenceStep>> sample_batch(std::span<const float> logits, int64_t vocab,
                                                 std::span<SequenceSampler* const> seqs, ThreadPool& pool) {
  const auto rows = static_cast<int64_t>(seqs.size());
  if (vocab <= 0 || static_cast<int64_t>(logits.size()) != rows * vocab) {
    const Status shape = internal_error("sample_batch: logits hold " + std::to_string(logits.size()) +
                                        " values, expected " + std::to_string(rows) + " rows x " +
                                        std::to_string(vocab));
    return std::vector<Expected<SequenceStep>>(seqs.size(), shape);
  }
  std::vector<std::optional<Expected<SequenceStep>>> slots(seqs.size());
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    Sampler sampler;  // per chunk: scratch is never shared between threads
    for (int64_t r = begin; r < end; ++r) {
      const auto row = logits.subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
      SequenceSampler* seq = seqs[static_cast<size_t>(r)];
      slots[static_cast<size_t>(r)] =
          seq ? seq->step(row, sampler) : Expected<SequenceStep>(internal_error("sample_batch: null sequence"));
    }
  });
  std::vector<Expected<SequenceStep>> out;
  out.reserve(slots.size());
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

}  // namespace tf
