// DSA indexer kernels: pooled keys (a learned per-channel softmax over the
// k_p members of a pool) and relu-weighted pool scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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

void indexer_token_indices(Tensor& indices, const Tensor& pools, int64_t first_position, int pool_size, bool tail) {
  check_i32("indexer_token_indices pools", pools);
  check_i32("indexer_token_indices indices", indices);
  const int64_t t = indices.dim() == 0 ? 0 : indices.size(0), w = t == 0 ? 0 : indices.numel() / t;
  const int64_t s = t == 0 ? 0 : pools.numel() / t, kp = pool_size;
  if (kp < 1 || pools.numel() != t * s || w < s * kp + (tail ? kp - 1 : 0) || first_position < 0)
    throw StatusError(invalid_argument("indexer_token_indices: indices " + indices.describe() + ", pools " +
                                       pools.describe() + ", pool size " + std::to_string(kp)));
  int32_t* out = indices.data<int32_t>();
  const int32_t* sel = pools.data<int32_t>();
  std::fill_n(out, t * w, -1);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t visible = first_position + i + 1, complete = visible / kp;
    for (int64_t j = 0; j < s; ++j) {
      const int64_t p = sel[i * s + j];
      if (p < 0 || p >= complete) continue;  // a non-candidate picked to fill k: no tokens
      for (int64_t o = 0; o < kp; ++o) out[i * w + j * kp + o] = static_cast<int32_t>(p * kp + o);
    }
    if (tail)
      for (int64_t o = 0; o < visible % kp; ++o) out[i * w + s * kp + o] = static_cast<int32_t>(complete * kp + o);
  }
}

}  // namespace tf::cpu
