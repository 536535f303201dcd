// The MoE router: sigmoid scores, correction bias for the choice only,
// group-limited top-k, normalisation and routed scaling. Ties pick the lower index.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {

void moe_route(Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
               int k, bool norm, float scaling) {
  check_f32("moe_route logits", logits);
  const int64_t e = logits.size(-1), t = logits.numel() / e;
  check_f32("moe_route bias", bias, e);
  check_f32("moe_route weights", weights, t * k);
  check_i32("moe_route ids", ids, t * k);
  if (n_group <= 0 || e % n_group != 0 || topk_group > n_group || k > e)
    throw StatusError(invalid_argument("moe_route: bad grouping (n_group, topk_group, k)"));
  const int64_t per = e / n_group;
  parallel_rows(t, e * 8, [&](int64_t tb, int64_t te) {
    std::vector<float> s(e), choice(e), gscore(n_group);
    std::vector<int32_t> order(e), gorder(n_group);
    for (int64_t ti = tb; ti < te; ++ti) {
      const float* l = logits.data<float>() + ti * e;
      for (int64_t i = 0; i < e; ++i) {
        s[i] = 1.0f / (1.0f + std::exp(-l[i]));
        choice[i] = s[i] + bias.data<float>()[i];
      }
      for (int g = 0; g < n_group; ++g) {
        // Sum of the group's two best choice scores (one when the group has one expert).
        float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
        for (int64_t i = g * per; i < (g + 1) * per; ++i) {
          if (choice[i] > b1) {
            b2 = b1;
            b1 = choice[i];
          } else if (choice[i] > b2) {
            b2 = choice[i];
          }
        }
        gscore[g] = per >= 2 ? b1 + b2 : b1;
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::stable_sort(gorder.begin(), gorder.end(), [&](int32_t a, int32_t b) { return gscore[a] > gscore[b]; });
      std::vector<char> keep(n_group, 0);
      for (int g = 0; g < topk_group; ++g) keep[gorder[g]] = 1;
      for (int64_t i = 0; i < e; ++i)
        if (!keep[i / per]) choice[i] = -std::numeric_limits<float>::infinity();
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
      std::sort(order.begin(), order.begin() + k);
      float sum = 0;
      for (int i = 0; i < k; ++i) sum += s[order[i]];
      for (int i = 0; i < k; ++i) {
        float wv = s[order[i]];
        if (norm) wv /= (sum + 1e-20f);
        weights.data<float>()[ti * k + i] = wv * scaling;
        ids.data<int32_t>()[ti * k + i] = order[i];
      }
    }
  });
}

}  // namespace tf::cpu
