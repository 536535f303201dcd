// How close a quantized model's next-token distributions are to a reference's:
// the measures DENSE=q4 / fp8 are reported with (issue #8) — the KL divergence
// KL(p_ref || p_test) of the softmax distributions, per row, and how often the two
// agree on the most likely token (top-1).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

struct LogitAgreement {
  int64_t rows = 0;
  double mean_kl = 0;   // nats, averaged over the rows
  double max_kl = 0;
  double top1 = 0;      // fraction of rows whose argmax agrees
};

// ref, test: host f32 [rows, vocab] logits of the same positions. Errors name the shapes.
Expected<LogitAgreement> compare_logits(const Tensor& ref, const Tensor& test);

}  // namespace tf
