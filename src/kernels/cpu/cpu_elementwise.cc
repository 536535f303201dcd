// Elementwise and row-wise ops: SwiGLU with the clamp, add, scale, sigmoid,
// softmax, top-k.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {

void swiglu(Tensor& out, const Tensor& gate_up, float limit) {
  check_f32("swiglu gate_up", gate_up);
  const int64_t two_i = gate_up.size(-1), i_dim = two_i / 2, rows = gate_up.numel() / two_i;
  check_f32("swiglu out", out, rows * i_dim);
  parallel_rows(rows, i_dim * 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up.data<float>() + r * two_i;
      const float* u = g + i_dim;
      float* o = out.data<float>() + r * i_dim;
      for (int64_t i = 0; i < i_dim; ++i) {
        const float gc = std::min(g[i], limit);
        const float uc = std::clamp(u[i], -limit, limit);
        o[i] = gc / (1.0f + std::exp(-gc)) * uc;
      }
    }
  });
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_f32("add a", a);
  check_f32("add b", b, a.numel());
  check_f32("add out", out, a.numel());
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
}

void scale(Tensor& out, const Tensor& x, float s) {
  check_f32("scale x", x);
  check_f32("scale out", out, x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = x.data<float>()[i] * s;
}

void sigmoid(Tensor& out, const Tensor& x) {
  check_f32("sigmoid x", x);
  check_f32("sigmoid out", out, x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) out.data<float>()[i] = 1.0f / (1.0f + std::exp(-x.data<float>()[i]));
}

void softmax(Tensor& out, const Tensor& x) {
  check_f32("softmax x", x);
  check_f32("softmax out", out, x.numel());
  const int64_t d = x.size(-1), rows = x.numel() / d;
  parallel_rows(rows, d * 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * d;
      float* o = out.data<float>() + r * d;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < d; ++i) m = std::max(m, xr[i]);
      float sum = 0;
      for (int64_t i = 0; i < d; ++i) sum += (o[i] = std::exp(xr[i] - m));
      for (int64_t i = 0; i < d; ++i) o[i] /= sum;
    }
  });
}

void topk(Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties) {
  check_f32("topk x", x);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (k < 0 || k > d) throw StatusError(invalid_argument("topk: k=" + std::to_string(k) + " exceeds the row width"));
  check_f32("topk values", values, rows * k);
  check_i32("topk indices", indices, rows * k);
  parallel_rows(rows, d * 4, [&](int64_t b, int64_t e) {
    std::vector<std::pair<float, int32_t>> q(d);
    // kTorchCpu: which of several equal values gets picked follows PyTorch's CPU
    // top-k (a partial sort when k*64 <= N, else an nth_element, over (value,
    // index) pairs in index order comparing values only; libstdc++ algorithms),
    // so that ties resolve as in the reference.
    auto greater = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& c) {
      return (std::isnan(a.first) && !std::isnan(c.first)) || a.first > c.first;
    };
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * d;
      for (int64_t i = 0; i < d; ++i) q[i] = {xr[i], static_cast<int32_t>(i)};
      if (k == 0) continue;
      if (ties == TopkTies::kLowerIndex) {
        std::partial_sort(q.begin(), q.begin() + k, q.end(), [](const auto& a, const auto& c) {
          return a.first > c.first || (a.first == c.first && a.second < c.second);
        });
      } else if (static_cast<int64_t>(k) * 64 <= d) {
        std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
      } else {
        std::nth_element(q.begin(), q.begin() + k - 1, q.end(), greater);
      }
      std::sort(q.begin(), q.begin() + k, [](const auto& a, const auto& c) {
        return a.first > c.first || (a.first == c.first && a.second < c.second);
      });
      for (int i = 0; i < k; ++i) {
        values.data<float>()[r * k + i] = q[i].first;
        indices.data<int32_t>()[r * k + i] = q[i].second;
      }
    }
  });
}

}  // namespace tf::cpu
