// The ops a bidirectional encoder (the vision tower) adds: a bias row added to every
// row, the exact (erf) GELU, rotary embedding from per-row cos/sin tables (half
// rotation) and attention inside segments of rows.
//
// segment_attention splits the work into (segment, head, block of kQueryBlock query
// rows) items over the pool. An item scores its queries against every key of the
// segment into a [kQueryBlock, L] buffer (L = the segment's length: memory O(L) per
// thread, never L x L), takes each row's softmax (max, exp, sum in key order,
// probabilities p = e / sum as PyTorch's softmax) and sums p · v in key order. The
// summation order is fixed per query row, so a row's result does not depend on the
// thread count or on the other segments.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

constexpr int64_t kQueryBlock = 16;

[[noreturn]] void fail(const std::string& what) { throw StatusError(invalid_argument(what)); }

}  // namespace

void add_bias(Tensor& out, const Tensor& x, const Tensor& bias) {
  check_f32("add_bias x", x);
  check_f32("add_bias out", out, x.numel());
  const int64_t d = bias.numel();
  check_f32("add_bias bias", bias);
  if (x.dim() < 1 || x.size(-1) != d)
    fail("add_bias: bias " + bias.describe() + " does not match the rows of " + x.describe());
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  const float* xp = x.data<float>();
  const float* bp = bias.data<float>();
  float* op = out.data<float>();
  parallel_rows(rows, d, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t i = 0; i < d; ++i) op[r * d + i] = xp[r * d + i] + bp[i];
  });
}

void gelu(Tensor& out, const Tensor& x) {
  check_f32("gelu x", x);
  check_f32("gelu out", out, x.numel());
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  constexpr float kSqrtHalf = 0.70710678118654752440f;
  parallel_rows(x.numel(), 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) op[i] = xp[i] * 0.5f * (1.0f + std::erf(xp[i] * kSqrtHalf));
  });
}

void rotary(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_f32("rotary x", x);
  check_f32("rotary out", out, x.numel());
  check_f32("rotary cos", cos);
  check_f32("rotary sin", sin, cos.numel());
  if (cos.dim() != 2 || cos.size(1) % 2 != 0)
    fail("rotary: cos must be [T, D] with D even, got " + cos.describe());
  const int64_t t_rows = cos.size(0), d = cos.size(1), half = d / 2;
  if (t_rows * d == 0 ? x.numel() != 0 : x.numel() % (t_rows * d) != 0)
    fail("rotary: x " + x.describe() + " is not [T, H, D] for tables " + cos.describe());
  const int64_t heads = t_rows * d == 0 ? 0 : x.numel() / (t_rows * d);
  const float* xp = x.data<float>();
  const float* cp = cos.data<float>();
  const float* sp = sin.data<float>();
  float* op = out.data<float>();
  parallel_rows(t_rows, heads * d * 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* c = cp + t * d;
      const float* s = sp + t * d;
      for (int64_t h = 0; h < heads; ++h) {
        const float* xr = xp + (t * heads + h) * d;
        float* o = op + (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = xr[i], x2 = xr[i + half];  // read both before writing (out may be x)
          o[i] = x1 * c[i] + (-x2) * s[i];
          o[i + half] = x2 * c[i + half] + x1 * s[i + half];
        }
      }
    }
  });
}

void segment_attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                       float scale) {
  check_f32("segment_attention q", q);
  if (q.dim() != 3) fail("segment_attention: q must be [T, H, D], got " + q.describe());
  const int64_t t_rows = q.size(0), heads = q.size(1), d = q.size(2);
  check_f32("segment_attention k", k, q.numel());
  check_f32("segment_attention v", v, q.numel());
  check_f32("segment_attention out", out, q.numel());
  check_i32("segment_attention offsets", offsets);
  const int64_t segs = offsets.numel() - 1;
  const int32_t* off = offsets.data<int32_t>();
  if (segs < 0 || off[0] != 0 || off[segs] != t_rows)
    fail("segment_attention: offsets " + offsets.describe() +
         " must run from 0 to T = " + std::to_string(t_rows));
  for (int64_t s = 0; s < segs; ++s)
    if (off[s + 1] < off[s]) fail("segment_attention: offsets decrease at segment " + std::to_string(s));

  // Work items: (segment, head, query block), in that order.
  struct Item {
    int64_t seg, head, q0, q1;
  };
  std::vector<Item> items;
  int64_t longest = 0;
  for (int64_t s = 0; s < segs; ++s) {
    longest = std::max<int64_t>(longest, off[s + 1] - off[s]);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q0 = off[s]; q0 < off[s + 1]; q0 += kQueryBlock)
        items.push_back({s, h, q0, std::min<int64_t>(q0 + kQueryBlock, off[s + 1])});
  }
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  const int64_t row = heads * d;  // elements between consecutive rows
  parallel_rows(static_cast<int64_t>(items.size()), kQueryBlock * longest * d * 2, [&](int64_t b, int64_t e) {
    std::vector<float> scores(static_cast<size_t>(kQueryBlock * longest));
    std::vector<float> acc(static_cast<size_t>(kQueryBlock * d));
    for (int64_t it = b; it < e; ++it) {
      const Item& w = items[it];
      const int64_t k0 = off[w.seg], len = off[w.seg + 1] - k0, nq = w.q1 - w.q0;
      const int64_t hd = w.head * d;
      for (int64_t j = 0; j < len; ++j) {
        const float* kj = kp + (k0 + j) * row + hd;
        for (int64_t a = 0; a < nq; ++a) scores[a * len + j] = dot(qp + (w.q0 + a) * row + hd, kj, d) * scale;
      }
      for (int64_t a = 0; a < nq; ++a) {
        float* sr = scores.data() + a * len;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < len; ++j) m = std::max(m, sr[j]);
        float sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += (sr[j] = std::exp(sr[j] - m));
        for (int64_t j = 0; j < len; ++j) sr[j] /= sum;
      }
      std::fill(acc.begin(), acc.begin() + nq * d, 0.0f);
      for (int64_t j = 0; j < len; ++j) {
        const float* vj = vp + (k0 + j) * row + hd;
        for (int64_t a = 0; a < nq; ++a) {
          const float p = scores[a * len + j];
          float* ar = acc.data() + a * d;
          for (int64_t i = 0; i < d; ++i) ar[i] += p * vj[i];
        }
      }
      for (int64_t a = 0; a < nq; ++a) std::copy_n(acc.data() + a * d, d, op + (w.q0 + a) * row + hd);
    }
  });
}

}  // namespace tf::cpu
