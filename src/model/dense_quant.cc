// Load-time q4 / fp8 quantization of dense matrices; the recipes are in dense_quant.h.
#include "model/dense_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"

namespace tf {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr float kE4m3Max = 448.0f;

// W as packed f32 (a copy only when it is not packed f32 already), with checks.
Expected<Tensor> packed_f32(const Tensor& w, const std::string& what) {
  if (w.dim() != 2) return invalid_argument(what + ": only 2-D matrices are quantized, got " + w.describe());
  if (!w.device().is_cpu()) return invalid_argument(what + ": quantization runs on the host, got " + w.describe());
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF16)
    return invalid_argument(what + ": expected an f32, bf16 or f16 matrix, got " + w.describe());
  return w.dtype() == DType::kF32 && w.is_contiguous() ? w : w.to_f32();
}

// A q4 code: clamp(round-half-even(x), -8, 7). round_even_small gives std::nearbyint's codes
// within the clamp range (up to the sign of a zero, which no sum or code sees) and stays beyond
// it above; unlike the libm call it inlines and vectorizes, which made the group search ~2x
// faster (the q4 load is bound by it).
inline float q4_code(float x) { return std::clamp(round_even_small(x), -8.0f, 7.0f); }

// The per-element passes over a group combine term(i), i in [0, n), in kLanes interleaved
// partial results (i into lane i % kLanes, then the lanes in order): a fixed order the compiler
// can keep in vector registers (a single running sum cannot be vectorized without
// reassociating it).
constexpr int kLanes = 8;
template <typename T, typename Term, typename Op>
T lane_reduce(int64_t n, Term term, Op op) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = op(acc[l], term(i + l));
  for (; i < n; ++i) acc[i % kLanes] = op(acc[i % kLanes], term(i));
  T r{};
  for (int l = 0; l < kLanes; ++l) r = op(r, acc[l]);
  return r;
}
template <typename T, typename Term>
T lane_sum(int64_t n, Term term) {
  return lane_reduce<T>(n, term, [](T a, T b) { return a + b; });
}

// Squared error of quantizing v[0..n) with scale s (q = clamp(round(v / s), -8, 7); s = 0:
// q = 0). The search calls this 14 times per group.
float q4_error(const float* v, int64_t n, float s) {
  const float inv = s == 0.0f ? 0.0f : 1.0f / s;
  return lane_sum<float>(n, [&](int64_t i) {
    const float d = v[i] - q4_code(v[i] * inv) * s;
    return d * d;
  });
}

float f16_round(float s) { return f16_to_float(float_to_f16(s)); }

// One group: the searched scale (already f16-representable) and its packed nibbles.
void quantize_q4_group(const float* v, int64_t n, uint16_t* scale_out, uint8_t* bytes) {
  const float amax = lane_reduce<float>(
      n, [&](int64_t i) { return std::fabs(v[i]); }, [](float a, float b) { return std::max(a, b); });
  float best_s = 0, best_e = q4_error(v, n, 0.0f);
  if (amax > 0) {
    for (int step = 0; step <= 12; ++step) {
      const float s = f16_round(amax / (7.0f + 0.25f * static_cast<float>(step)));
      if (s <= 0 || !std::isfinite(s)) continue;
      const float e = q4_error(v, n, s);
      if (e < best_e) best_e = e, best_s = s;
    }
    if (best_s > 0) {
      // Least-squares refit with the chosen codes fixed.
      const float inv = 1.0f / best_s;
      struct NumDen {
        double num, den;  // sum of v q, sum of q q
      };
      const auto [num, den] = lane_reduce<NumDen>(
          n,
          [&](int64_t i) {
            const double q = q4_code(v[i] * inv);
            return NumDen{v[i] * q, q * q};
          },
          [](NumDen a, NumDen b) {
            return NumDen{a.num + b.num, a.den + b.den};
          });
      if (den > 0) {
        const float s = f16_round(static_cast<float>(num / den));
        if (s > 0 && std::isfinite(s)) {
          const float e = q4_error(v, n, s);
          if (e < best_e) best_e = e, best_s = s;
        }
      }
    }
  }
  *scale_out = float_to_f16(best_s);
  const float inv = best_s > 0 ? 1.0f / best_s : 0.0f;
  // Byte i / 2: element i in the low nibble, i + 1 in the high one, each code + 8 (8: q = 0, so
  // the padding past n reads as zeros).
  auto nibble = [&](int64_t i) { return i < n ? static_cast<int>(q4_code(v[i] * inv)) + 8 : 8; };
  for (int64_t b = 0; b < kQ4GroupBytes; ++b)
    bytes[b] = static_cast<uint8_t>(nibble(2 * b) | (nibble(2 * b + 1) << 4));
}

Status check_finite(const Tensor& f, const std::string& what) {
  const float* p = f.data<float>();
  const int64_t n = f.numel();
  // By blocks: x * 0 is (+-)0 for a finite x and NaN otherwise, and a NaN term makes the sum NaN
  // (lane_sum vectorizes, std::isfinite per value does not); only a block that is not 0 is searched.
  constexpr int64_t kBlock = kLanes * 512;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    const bool finite = lane_sum<float>(e - b, [&](int64_t i) { return p[b + i] * 0.0f; }) == 0.0f;
    if (finite) continue;
    for (int64_t i = b; i < e; ++i)
      if (!std::isfinite(p[i]))
        return invalid_argument(what + ": non-finite value at [" + std::to_string(i / f.size(1)) + ", " +
                                std::to_string(i % f.size(1)) + "] cannot be quantized");
  }
  return Status::ok();
}

}  // namespace

Expected<Matrix> quantize_fp8_block(const Tensor& w, const std::string& what) {
  TF_ASSIGN_OR_RETURN(Tensor f, packed_f32(w, what));
  TF_RETURN_IF_ERROR(check_finite(f, what));
  const int64_t n = f.size(0), k = f.size(1);
  const int64_t gr = ceil_div(n, kFp8BlockSize), gc = ceil_div(k, kFp8BlockSize);
  Tensor codes = Tensor::empty({n, k}, DType::kF8E4M3);
  Tensor scales = Tensor::empty({gr, gc}, DType::kF32);
  const float* src = f.data<float>();
  auto* dst = codes.data<uint8_t>();
  float* sp = scales.data<float>();
  ThreadPool::global().parallel_for(gr * gc, [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t r0 = (blk / gc) * kFp8BlockSize, c0 = (blk % gc) * kFp8BlockSize;
      const int64_t r1 = std::min(n, r0 + kFp8BlockSize), c1 = std::min(k, c0 + kFp8BlockSize);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(src[r * k + c]));
      const float s = amax > 0 ? amax / kE4m3Max : 1.0f;
      sp[blk] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[r * k + c] = float_to_fp8_e4m3(src[r * k + c] / s);
    }
  });
  return Matrix::fp8_block(std::move(codes), std::move(scales));
}

Expected<Matrix> quantize_q4(const Tensor& w, const std::string& what) {
  TF_ASSIGN_OR_RETURN(Tensor f, packed_f32(w, what));
  TF_RETURN_IF_ERROR(check_finite(f, what));
  const int64_t n = f.size(0), k = f.size(1), g = ceil_div(k, kQ4Group);
  Tensor codes = Tensor::empty({n, g * kQ4GroupBytes}, DType::kU8);
  Tensor scales = Tensor::empty({n, g}, DType::kF16);
  const float* src = f.data<float>();
  auto* cp = codes.data<uint8_t>();
  auto* sp = scales.data<uint16_t>();
  ThreadPool::global().parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          for (int64_t gi = 0; gi < g; ++gi) {
            const int64_t c0 = gi * kQ4Group;
            quantize_q4_group(src + r * k + c0, std::min(kQ4Group, k - c0), sp + r * g + gi,
                              cp + (r * g + gi) * kQ4GroupBytes);
          }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)));
  return Matrix::q4(std::move(codes), std::move(scales), k);
}

Expected<Matrix> quantize_matrix(const Tensor& w, MatrixFormat format, const std::string& what) {
  switch (format) {
    case MatrixFormat::kDense: return Matrix(w);
    case MatrixFormat::kFp8Block: return quantize_fp8_block(w, what);
    case MatrixFormat::kQ4: return quantize_q4(w, what);
  }
  return invalid_argument(what + ": unknown matrix format");
}

std::optional<MatrixFormat> dense_quant_format(std::string_view dense) {
  if (dense == "q4") return MatrixFormat::kQ4;
  if (dense == "fp8") return MatrixFormat::kFp8Block;
  return std::nullopt;
}

}  // namespace tf
