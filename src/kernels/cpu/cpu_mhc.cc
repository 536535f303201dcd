// Manifold-constrained hyper-connections: coefficients (sigmoid / Sinkhorn),
// the stream collapse and the re-expansion. M (= hc_mult) is small (4), so
// each row is handled by one thread.
#include <cmath>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {
inline float sigm(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void mhc_coefficients(Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix, const Tensor& base,
                      const Tensor& scale, float hc_eps, int sinkhorn_iters) {
  check_f32("mhc mix", mix);
  const int64_t width = mix.size(-1), rows = mix.numel() / width;
  int64_t m = 1;
  while ((2 + m) * m < width) ++m;
  if ((2 + m) * m != width) throw StatusError(invalid_argument("mhc_coefficients: mix width is not (2+M)*M"));
  check_f32("mhc base", base, width);
  check_f32("mhc scale", scale, 3);
  check_f32("mhc pre", pre, rows * m);
  check_f32("mhc post", post, rows * m);
  check_f32("mhc comb", comb, rows * m * m);
  const float* b = base.data<float>();
  const float* s = scale.data<float>();
  parallel_rows(rows, m * m * sinkhorn_iters * 4, [&](int64_t rb, int64_t re) {
    std::vector<float> c(m * m);
    for (int64_t r = rb; r < re; ++r) {
      const float* l = mix.data<float>() + r * width;
      for (int64_t i = 0; i < m; ++i) {
        pre.data<float>()[r * m + i] = sigm(l[i] * s[0] + b[i]) + hc_eps;
        post.data<float>()[r * m + i] = 2.0f * sigm(l[m + i] * s[1] + b[m + i]);
      }
      // Row softmax of the comb logits, + eps, then alternate column/row
      // normalisation: one column pass, then (iters-1) row+column passes.
      for (int64_t i = 0; i < m; ++i) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < m; ++j) {
          c[i * m + j] = l[2 * m + i * m + j] * s[2] + b[2 * m + i * m + j];
          mx = std::max(mx, c[i * m + j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < m; ++j) sum += (c[i * m + j] = std::exp(c[i * m + j] - mx));
        for (int64_t j = 0; j < m; ++j) c[i * m + j] = c[i * m + j] / sum + hc_eps;
      }
      auto col_norm = [&] {
        for (int64_t j = 0; j < m; ++j) {
          float sum = 0;
          for (int64_t i = 0; i < m; ++i) sum += c[i * m + j];
          for (int64_t i = 0; i < m; ++i) c[i * m + j] /= (sum + hc_eps);
        }
      };
      auto row_norm = [&] {
        for (int64_t i = 0; i < m; ++i) {
          float sum = 0;
          for (int64_t j = 0; j < m; ++j) sum += c[i * m + j];
          for (int64_t j = 0; j < m; ++j) c[i * m + j] /= (sum + hc_eps);
        }
      };
      col_norm();
      for (int it = 0; it < sinkhorn_iters - 1; ++it) {
        row_norm();
        col_norm();
      }
      std::copy(c.begin(), c.end(), comb.data<float>() + r * m * m);
    }
  });
}

void mhc_collapse(Tensor& out, const Tensor& streams, const Tensor& pre) {
  check_f32("mhc_collapse streams", streams);
  check_f32("mhc_collapse pre", pre);
  const int64_t d = out.size(-1), rows = out.numel() / d, m = pre.numel() / rows;
  check_f32("mhc_collapse out", out, rows * d);
  if (streams.numel() != rows * m * d) throw StatusError(invalid_argument("mhc_collapse: stream shape mismatch"));
  parallel_rows(rows, m * d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* p = pre.data<float>() + r * m;
      const float* x = streams.data<float>() + r * m * d;
      float* o = out.data<float>() + r * d;
      for (int64_t i = 0; i < d; ++i) {
        float acc = 0;
        for (int64_t j = 0; j < m; ++j) acc += p[j] * x[j * d + i];
        o[i] = acc;
      }
    }
  });
}

void mhc_expand(Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& residual) {
  check_f32("mhc_expand y", y);
  const int64_t d = y.size(-1), rows = y.numel() / d, m = post.numel() / rows;
  check_f32("mhc_expand post", post, rows * m);
  check_f32("mhc_expand comb", comb, rows * m * m);
  check_f32("mhc_expand residual", residual, rows * m * d);
  check_f32("mhc_expand out", out, rows * m * d);
  if (out.raw() == residual.raw()) throw StatusError(invalid_argument("mhc_expand: out must not alias residual"));
  parallel_rows(rows, m * m * d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* p = post.data<float>() + r * m;
      const float* c = comb.data<float>() + r * m * m;
      const float* res = residual.data<float>() + r * m * d;
      const float* yr = y.data<float>() + r * d;
      float* o = out.data<float>() + r * m * d;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < d; ++k) {
          float acc = 0;
          for (int64_t j = 0; j < m; ++j) acc += c[j * m + i] * res[j * d + k];
          o[i * d + k] = p[i] * yr[k] + acc;
        }
    }
  });
}

}  // namespace tf::cpu
