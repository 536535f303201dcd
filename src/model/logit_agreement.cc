// KL divergence and top-1 agreement of two logit tensors (see logit_agreement.h);
// softmax in double with the max subtracted, so large logits do not overflow.
#include "model/logit_agreement.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tf {

Expected<LogitAgreement> compare_logits(const Tensor& ref, const Tensor& test) {
  if (ref.dim() != 2 || ref.shape() != test.shape() || !ref.device().is_cpu() || !test.device().is_cpu())
    return invalid_argument("compare_logits: reference " + ref.describe() + " and test " + test.describe() +
                            " must be host [rows, vocab] of one shape");
  const Tensor a = ref.to_f32(), b = test.to_f32();
  const int64_t rows = a.size(0), vocab = a.size(1);
  LogitAgreement out;
  out.rows = rows;
  if (rows == 0 || vocab == 0) return out;
  int64_t agree = 0;
  std::vector<double> lp(static_cast<size_t>(vocab)), lq(static_cast<size_t>(vocab));
  auto log_softmax = [vocab](const float* x, std::vector<double>& dst) {
    const double mx = *std::max_element(x, x + vocab);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - mx);
    const double lse = mx + std::log(sum);
    for (int64_t i = 0; i < vocab; ++i) dst[static_cast<size_t>(i)] = x[i] - lse;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* pa = a.data<float>() + r * vocab;
    const float* pb = b.data<float>() + r * vocab;
    log_softmax(pa, lp);
    log_softmax(pb, lq);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    kl = std::max(kl, 0.0);  // rounding can give -1e-17
    out.mean_kl += kl;
    out.max_kl = std::max(out.max_kl, kl);
    agree += (std::max_element(pa, pa + vocab) - pa) == (std::max_element(pb, pb + vocab) - pb);
  }
  out.mean_kl /= static_cast<double>(rows);
  out.top1 = static_cast<double>(agree) / static_cast<double>(rows);
  return out;
}

}  // namespace tf
