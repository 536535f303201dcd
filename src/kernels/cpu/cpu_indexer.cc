// DSA indexer kernels: pooled keys (a learned per-channel softmax over the
// k_p members of a pool) and relu-weighted pool scores.
#include <cmath>
#include <limits>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {

void indexer_pool_keys(Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) {
  check_f32("indexer_pool_keys ape", ape);
  const int64_t kp = ape.size(0), d = ape.size(1), p = keys.numel() / (kp * d);
  check_f32("indexer_pool_keys keys", keys, p * kp * d);
  check_f32("indexer_pool_keys gate", gate, p * kp * d);
  check_f32("indexer_pool_keys out", out, p * d);
  for (int64_t pi = 0; pi < p; ++pi)
    for (int64_t x = 0; x < d; ++x) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < kp; ++i)
        mx = std::max(mx, gate.data<float>()[(pi * kp + i) * d + x] + ape.data<float>()[i * d + x]);
      float sum = 0, acc = 0;
      for (int64_t i = 0; i < kp; ++i) {
        const float e = std::exp(gate.data<float>()[(pi * kp + i) * d + x] + ape.data<float>()[i * d + x] - mx);
        sum += e;
        acc += e * keys.data<float>()[(pi * kp + i) * d + x];
      }
      out.data<float>()[pi * d + x] = acc / sum;
    }
}

void indexer_scores(Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                    const Tensor& candidates, float scale) {
  check_f32("indexer_scores pool_keys", pool_keys);
  check_i32("indexer_scores candidates", candidates);
  const int64_t t = candidates.numel(), d = pool_keys.size(-1), p = pool_keys.numel() / d;
  const int64_t h = weights.numel() / t;
  check_f32("indexer_scores q", q, t * h * d);
  check_f32("indexer_scores weights", weights, t * h);
  check_f32("indexer_scores out", out, t * p);
  parallel_rows(t, p * h * d, [&](int64_t tb, int64_t te) {
    for (int64_t ti = tb; ti < te; ++ti) {
      const int64_t cand = candidates.data<int32_t>()[ti];
      float* o = out.data<float>() + ti * p;
      for (int64_t pi = 0; pi < p; ++pi) {
        if (pi >= cand) {
          o[pi] = std::numeric_limits<float>::lowest();
          continue;
        }
        const float* kv = pool_keys.data<float>() + pi * d;
        float acc = 0;
        for (int64_t hh = 0; hh < h; ++hh) {
          const float* qh = q.data<float>() + (ti * h + hh) * d;
          float s = 0;
          for (int64_t x = 0; x < d; ++x) s += qh[x] * kv[x];
          acc += weights.data<float>()[ti * h + hh] * std::max(0.0f, s * scale);
        }
        o[pi] = acc;
      }
    }
  });
}

}  // namespace tf::cpu
