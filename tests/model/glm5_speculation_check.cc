#include "glm5_speculation_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tf::test {
namespace {

// The last row's logits of a prefill of ids[0, n) on a new sequence, or null on error.
std::unique_ptr<Glm5Sequence> prefilled(Glm5Model& model, const std::vector<int32_t>& ids, int64_t n,
                                        std::string& error) {
  auto seq = model.new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(ids.data(), static_cast<size_t>(n))};
  auto r = model.step({&e, 1});
  if (!r) {
    error = "prefill: " + r.status().to_string();
    return nullptr;
  }
  return seq;
}

}  // namespace

SpeculationCheck check_speculation(Glm5Model& model, const std::vector<int32_t>& ids, int64_t prefill,
                                   const std::vector<int>& spans, const std::vector<int>& keeps, bool busy) {
  SpeculationCheck out;
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = model.config().vocab_size;
  // A batch-mate decoding a fixed token beside each step (its own results are not checked).
  auto mate = busy ? prefilled(model, ids, prefill, out.error) : nullptr;
  const int32_t mate_token = ids[static_cast<size_t>(prefill)];
  auto step = [&](Glm5Sequence& seq, std::span<const int32_t> tokens, bool speculative) -> Expected<Tensor> {
    std::vector<StepEntry> batch(1);
    batch[0].sequence = &seq;
    batch[0].tokens = tokens;
    batch[0].all_logits = true;
    batch[0].speculative = speculative;
    if (mate) {
      StepEntry m;
      m.sequence = mate.get();
      m.tokens = std::span<const int32_t>(&mate_token, 1);
      batch.push_back(m);
    }
    auto r = model.step(batch);
    if (!r) return r.status();
    Tensor copy = Tensor::empty((*r)[0].logits.shape(), DType::kF32);
    copy.copy_from((*r)[0].logits);
    return copy;
  };

  // Serial decoding: the logits of positions prefill..n-1, one step each.
  auto serial = prefilled(model, ids, prefill, out.error);
  if (!serial) return out;
  std::vector<Tensor> serial_rows;
  for (int64_t p = prefill; p < n; ++p) {
    auto r = step(*serial, std::span<const int32_t>(&ids[static_cast<size_t>(p)], 1), false);
    if (!r) {
      out.error = "serial step: " + r.status().to_string();
      return out;
    }
    serial_rows.push_back(*r);
  }

  auto spec = prefilled(model, ids, prefill, out.error);
  if (!spec) return out;
  size_t round = 0;
  for (int64_t p = prefill; p < n; ++round) {
    const int64_t rows = std::min<int64_t>(spans[round % spans.size()], n - p);
    auto r = step(*spec, std::span<const int32_t>(&ids[static_cast<size_t>(p)], static_cast<size_t>(rows)), true);
    if (!r) {
      out.error = "verify step at " + std::to_string(p) + ": " + r.status().to_string();
      return out;
    }
    ++out.verify_steps;
    for (int64_t j = 0; j < rows; ++j) {
      const float* a = r->data<float>() + j * vocab;
      const float* b = serial_rows[static_cast<size_t>(p - prefill + j)].data<float>();
      ++out.rows_compared;
      if (std::memcmp(a, b, static_cast<size_t>(vocab) * sizeof(float)) != 0) ++out.rows_differing;
      for (int64_t t = 0; t < vocab; ++t) out.max_abs_diff = std::max(out.max_abs_diff, std::fabs(double(a[t]) - b[t]));
    }
    int64_t keep = keeps[round % keeps.size()];
    keep = keep <= 0 ? rows : std::min<int64_t>(keep, rows);
    if (keep < rows) ++out.partial_commits;
    if (Status s = model.commit_speculation(*spec, keep); !s.is_ok()) {
      out.error = "commit at " + std::to_string(p) + ": " + s.to_string();
      return out;
    }
    if (spec->length() != p + keep) {
      out.error = "length " + std::to_string(spec->length()) + " after keeping " + std::to_string(keep) + " at " +
                  std::to_string(p);
      return out;
    }
    p += keep;
  }
  return out;
}

}  // namespace tf::test
