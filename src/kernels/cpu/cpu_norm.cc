// Row norms: RMSNorm (weighted or not), LayerNorm, and KDA's gated RMSNorm.
// Sums run in a fixed order per row (double accumulation for the statistics).
#include <cmath>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {

void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  check_f32("rms_norm x", x);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  check_f32("rms_norm out", out, x.numel());
  const bool has_w = !weight.is_null();
  if (has_w) check_f32("rms_norm weight", weight, d);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const float* wp = has_w ? weight.data<float>() : nullptr;
  parallel_rows(rows, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = xp + r * d;
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
      float* o = op + r * d;
      for (int64_t i = 0; i < d; ++i) o[i] = has_w ? wp[i] * (xr[i] * inv) : xr[i] * inv;
    }
  });
}

void layer_norm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check_f32("layer_norm x", x);
  const int64_t d = x.size(-1), rows = x.numel() / d;
  check_f32("layer_norm out", out, x.numel());
  check_f32("layer_norm weight", weight, d);
  check_f32("layer_norm bias", bias, d);
  parallel_rows(rows, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * d;
      double mean = 0;
      for (int64_t i = 0; i < d; ++i) mean += xr[i];
      mean /= d;
      double var = 0;
      for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= d;
      const float inv = 1.0f / std::sqrt(static_cast<float>(var) + eps);
      float* o = out.data<float>() + r * d;
      for (int64_t i = 0; i < d; ++i)
        o[i] = (xr[i] - static_cast<float>(mean)) * inv * weight.data<float>()[i] + bias.data<float>()[i];
    }
  });
}

void gated_rms_norm(Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps) {
  check_f32("gated_rms_norm x", x);
  const int64_t d = weight.numel(), rows = x.numel() / d;
  check_f32("gated_rms_norm gate", gate, x.numel());
  check_f32("gated_rms_norm out", out, x.numel());
  parallel_rows(rows, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x.data<float>() + r * d;
      const float* gr = gate.data<float>() + r * d;
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = 1.0f / std::sqrt(static_cast<float>(ss / d) + eps);
      float* o = out.data<float>() + r * d;
      for (int64_t i = 0; i < d; ++i)
        o[i] = weight.data<float>()[i] * (xr[i] * inv) * (1.0f / (1.0f + std::exp(-gr[i])));
    }
  });
}

}  // namespace tf::cpu
