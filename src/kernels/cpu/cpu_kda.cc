// Kimi Delta Attention: the causal depthwise conv with its state, the forget
// gate, and the delta-rule recurrence in two forms (token by token for decode,
// chunked WY form for prefill). Heads are independent and split across threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// x / sqrt(sum x^2 + eps) (the eps inside the root, as FLA does), times `mult`.
inline void l2norm_into(float* dst, const float* src, int64_t n, float mult) {
  float ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += src[i] * src[i];
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * inv * mult;
}

struct KdaDims {
  int64_t t, h, dk, dv;
};

KdaDims check_kda(const char* op, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& g, const Tensor& beta, const Tensor& state) {
  check_f32(op, q);
  if (state.dim() != 3) throw StatusError(invalid_argument(std::string(op) + ": state must be [H, Dk, Dv]"));
  KdaDims d{0, state.size(0), state.size(1), state.size(2)};
  d.t = q.numel() / (d.h * d.dk);
  check_f32(op, k, d.t * d.h * d.dk);
  check_f32(op, g, d.t * d.h * d.dk);
  check_f32(op, v, d.t * d.h * d.dv);
  check_f32(op, beta, d.t * d.h);
  check_f32(op, out, d.t * d.h * d.dv);
  check_f32(op, state);
  return d;
}

}  // namespace

void causal_conv1d_silu(Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight) {
  check_f32("causal_conv1d x", x);
  check_f32("causal_conv1d weight", weight);
  const int64_t c = weight.size(0), kw = weight.size(1), t = x.numel() / c;
  check_f32("causal_conv1d state", state, (kw - 1) * c);
  check_f32("causal_conv1d out", out, t * c);
  const float* xp = x.data<float>();
  float* sp = state.data<float>();
  const float* wp = weight.data<float>();
  // Row r of the virtual sequence [state; x] (r < kw-1 comes from the state).
  auto row = [&](int64_t r) { return r < kw - 1 ? sp + r * c : xp + (r - (kw - 1)) * c; };
  parallel_rows(c, t * kw, [&](int64_t cb, int64_t ce) {
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t ch = cb; ch < ce; ++ch) {
        float acc = 0;
        for (int64_t j = 0; j < kw; ++j) acc += wp[ch * kw + j] * row(ti + j)[ch];
        out.data<float>()[ti * c + ch] = silu(acc);
      }
  });
  // New state: the last kw-1 rows of [state; x].
  std::vector<float> tail((kw - 1) * c);
  for (int64_t r = 0; r < kw - 1; ++r) std::copy_n(row(t + r), c, tail.data() + r * c);
  std::copy(tail.begin(), tail.end(), sp);
}

void kda_gate(Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound,
              float lower_bound) {
  check_f32("kda_gate f", f);
  const int64_t width = dt_bias.numel(), h = a_log.numel(), dk = width / h, rows = f.numel() / width;
  check_f32("kda_gate g", g, f.numel());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) {
      const float x = f.data<float>()[r * width + i] + dt_bias.data<float>()[i];
      const float a = std::exp(a_log.data<float>()[i / dk]);
      float y;
      if (has_lower_bound) {
        y = lower_bound * (1.0f / (1.0f + std::exp(-(a * x))));
      } else {
        y = -a * (x > 20.0f ? x : std::log(1.0f + std::exp(x)));
      }
      g.data<float>()[r * width + i] = y;
    }
}

void kda_recurrent(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                   const Tensor& beta, Tensor& state) {
  const KdaDims d = check_kda("kda_recurrent", out, q, k, v, g, beta, state);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
  parallel_rows(d.h, d.t * d.dk * d.dv * 4, [&](int64_t hb, int64_t he) {
    std::vector<float> qn(d.dk), kn(d.dk), mem(d.dv);
    for (int64_t h = hb; h < he; ++h) {
      float* s = state.data<float>() + h * d.dk * d.dv;
      for (int64_t t = 0; t < d.t; ++t) {
        const int64_t row = t * d.h + h;
        l2norm_into(qn.data(), q.data<float>() + row * d.dk, d.dk, qscale);
        l2norm_into(kn.data(), k.data<float>() + row * d.dk, d.dk, 1.0f);
        const float* gt = g.data<float>() + row * d.dk;
        const float* vt = v.data<float>() + row * d.dv;
        const float b = beta.data<float>()[row];
        std::fill(mem.begin(), mem.end(), 0.0f);
        for (int64_t i = 0; i < d.dk; ++i) {
          const float decay = std::exp(gt[i]);
          float* si = s + i * d.dv;
          for (int64_t j = 0; j < d.dv; ++j) {
            si[j] *= decay;
            mem[j] += si[j] * kn[i];
          }
        }
        for (int64_t j = 0; j < d.dv; ++j) mem[j] = (vt[j] - mem[j]) * b;  // delta
        float* o = out.data<float>() + row * d.dv;
        std::fill(o, o + d.dv, 0.0f);
        for (int64_t i = 0; i < d.dk; ++i) {
          float* si = s + i * d.dv;
          for (int64_t j = 0; j < d.dv; ++j) {
            si[j] += kn[i] * mem[j];
            o[j] += si[j] * qn[i];
          }
        }
      }
    }
  });
}

void kda_chunked(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, Tensor& state, int chunk_size) {
  const KdaDims d = check_kda("kda_chunked", out, q, k, v, g, beta, state);
  if (chunk_size <= 0) throw StatusError(invalid_argument("kda_chunked: chunk_size must be positive"));
  const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
  const int64_t cs = chunk_size, dk = d.dk, dv = d.dv;
  parallel_rows(d.h, d.t * dk * dv * 8, [&](int64_t hb, int64_t he) {
    // Per-chunk scratch: normalised q/k, cumulative gates, the (I+L)^-1 system,
    // u = T·(β v), w = T·(β k e^G), the new values and the intra-chunk scores.
    std::vector<float> qn(cs * dk), kn(cs * dk), gc(cs * dk), a(cs * cs), u(cs * dv), w(cs * dk),
        vnew(cs * dv), tmp(cs * dk), bet(cs);
    for (int64_t h = hb; h < he; ++h) {
      float* s = state.data<float>() + h * dk * dv;
      for (int64_t c0 = 0; c0 < d.t; c0 += cs) {
        const int64_t n = std::min(cs, d.t - c0);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t row = (c0 + i) * d.h + h;
          l2norm_into(&qn[i * dk], q.data<float>() + row * dk, dk, qscale);
          l2norm_into(&kn[i * dk], k.data<float>() + row * dk, dk, 1.0f);
          const float* gt = g.data<float>() + row * dk;
          for (int64_t x = 0; x < dk; ++x) gc[i * dk + x] = (i ? gc[(i - 1) * dk + x] : 0.0f) + gt[x];
          bet[i] = beta.data<float>()[row];
        }
        // A[i][j] = -β_i Σ_x k_i k_j e^{G_i - G_j} for j < i; then forward substitution.
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float acc = 0;
            if (j < i)
              for (int64_t x = 0; x < dk; ++x)
                acc += kn[i * dk + x] * bet[i] * kn[j * dk + x] * std::exp(gc[i * dk + x] - gc[j * dk + x]);
            a[i * cs + j] = -acc;
          }
        for (int64_t i = 1; i < n; ++i) {
          std::vector<float> rowv(a.begin() + i * cs, a.begin() + i * cs + i);
          for (int64_t j = 0; j < i; ++j) {
            float acc = 0;
            for (int64_t m = 0; m < i; ++m) acc += rowv[m] * a[m * cs + j];
            a[i * cs + j] = rowv[j] + acc;
          }
        }
        for (int64_t i = 0; i < n; ++i) a[i * cs + i] = 1.0f;  // + I (upper part stays 0)
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t x = 0; x < dv; ++x) u[i * dv + x] = 0;
          for (int64_t x = 0; x < dk; ++x) w[i * dk + x] = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const float aij = a[i * cs + j];
            const int64_t rowj = (c0 + j) * d.h + h;
            const float* vj = v.data<float>() + rowj * dv;
            for (int64_t x = 0; x < dv; ++x) u[i * dv + x] += aij * vj[x] * bet[j];
            for (int64_t x = 0; x < dk; ++x) w[i * dk + x] += aij * kn[j * dk + x] * bet[j] * std::exp(gc[j * dk + x]);
          }
        }
        // v_new = u - w·S ; out = (q e^G)·S + intra·v_new.
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t x = 0; x < dv; ++x) {
            float acc = 0;
            for (int64_t y = 0; y < dk; ++y) acc += w[i * dk + y] * s[y * dv + x];
            vnew[i * dv + x] = u[i * dv + x] - acc;
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          float* o = out.data<float>() + ((c0 + i) * d.h + h) * dv;
          for (int64_t y = 0; y < dk; ++y) tmp[y] = qn[i * dk + y] * std::exp(gc[i * dk + y]);
          for (int64_t x = 0; x < dv; ++x) {
            float acc = 0;
            for (int64_t y = 0; y < dk; ++y) acc += tmp[y] * s[y * dv + x];
            o[x] = acc;
          }
          for (int64_t j = 0; j <= i; ++j) {
            float sc = 0;
            for (int64_t y = 0; y < dk; ++y)
              sc += qn[i * dk + y] * kn[j * dk + y] * std::exp(gc[i * dk + y] - gc[j * dk + y]);
            for (int64_t x = 0; x < dv; ++x) o[x] += sc * vnew[j * dv + x];
          }
        }
        // S = S e^{G_last} + Σ_j (k_j e^{G_last - G_j})^T v_new_j.
        const float* glast = &gc[(n - 1) * dk];
        for (int64_t y = 0; y < dk; ++y) {
          const float decay = std::exp(glast[y]);
          for (int64_t x = 0; x < dv; ++x) {
            float acc = 0;
            for (int64_t j = 0; j < n; ++j)
              acc += kn[j * dk + y] * std::exp(glast[y] - gc[j * dk + y]) * vnew[j * dv + x];
            s[y * dv + x] = s[y * dv + x] * decay + acc;
          }
        }
      }
    }
  });
}

namespace {

void check_rows_of(const char* op, const char* what, const Tensor& t, int64_t rows, int64_t width) {
  if (t.dim() != 2 || t.size(0) != rows || t.size(1) != width)
    throw StatusError(invalid_argument(std::string(op) + ": " + what + " " + t.describe() + " is not [" +
                                       std::to_string(rows) + ", " + std::to_string(width) + "]"));
  check_f32(op, t);
}

float* address_of(const int64_t* addrs, int64_t b) {
  return reinterpret_cast<float*>(static_cast<uintptr_t>(addrs[b]));
}

}  // namespace

// The rows one by one through the one-sequence ops on views of their states (the
// reference the CUDA kernels match).
void kda_conv_qkv_rows(Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q, const Tensor& x_k,
                       const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight) {
  const char* op = "kda_conv_qkv_rows";
  check_f32(op, weight);
  if (weight.dim() != 3 || weight.size(0) != 3 || weight.size(2) < 1)
    throw StatusError(invalid_argument(std::string(op) + ": weight must be [3, C, K], got " + weight.describe()));
  const int64_t b = rows.rows, c = weight.size(1), kw = weight.size(2);
  Tensor* outs[3] = {&out_q, &out_k, &out_v};
  const Tensor* xs[3] = {&x_q, &x_k, &x_v};
  for (int p = 0; p < 3; ++p) {
    check_rows_of(op, "out", *outs[p], b, c);
    check_rows_of(op, "x", *xs[p], b, c);
  }
  if (b > 0 && rows.conv_states == nullptr) throw StatusError(invalid_argument(std::string(op) + ": no conv states"));
  for (int64_t r = 0; r < b; ++r) {
    float* base = address_of(rows.conv_states, r);
    for (int p = 0; p < 3; ++p) {
      Tensor o = outs[p]->slice(0, r, r + 1);
      if (base == nullptr && kw > 1) {  // K = 1 has no state: every row is computed
        std::fill_n(o.data<float>(), c, 0.0f);
        continue;
      }
      Tensor state = kw > 1 ? Tensor::view_of(base + p * (kw - 1) * c, {kw - 1, c}, DType::kF32)
                            : Tensor::zeros({0, c}, DType::kF32);
      causal_conv1d_silu(o, xs[p]->slice(0, r, r + 1), state, weight.select(0, p));
    }
  }
}

void kda_recurrent_state_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const KdaRowsView& rows) {
  const char* op = "kda_recurrent_state_rows";
  const int64_t b = rows.rows, h = rows.heads, dk = rows.key_dim, dv = rows.value_dim;
  if (h <= 0 || dk <= 0 || dv <= 0)
    throw StatusError(invalid_argument(std::string(op) + ": the view's heads and head dims must be positive"));
  check_rows_of(op, "q", q, b, h * dk);
  check_rows_of(op, "k", k, b, h * dk);
  check_rows_of(op, "g", g, b, h * dk);
  check_rows_of(op, "v", v, b, h * dv);
  check_rows_of(op, "out", out, b, h * dv);
  check_rows_of(op, "beta", beta, b, h);
  if (b > 0 && rows.recurrent_states == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": no recurrent states"));
  for (int64_t r = 0; r < b; ++r) {
    Tensor o = out.slice(0, r, r + 1);
    float* base = address_of(rows.recurrent_states, r);
    if (base == nullptr) {
      std::fill_n(o.data<float>(), h * dv, 0.0f);
      continue;
    }
    Tensor state = Tensor::view_of(base, {h, dk, dv}, DType::kF32);
    kda_recurrent(o, q.slice(0, r, r + 1), k.slice(0, r, r + 1), v.slice(0, r, r + 1), g.slice(0, r, r + 1),
                  beta.slice(0, r, r + 1), state);
  }
}

}  // namespace tf::cpu
