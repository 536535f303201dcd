// The antialiased bicubic kernel of bicubic_resize.h, written from the
// reference's documented behaviour and checked against its outputs
// (tests/unit/media_image_test.cc). Weights are computed in double exactly as
// the reference computes them, quantised to int16, and applied in integer
// arithmetic: sum = 2^(p-1) + sum_j w_j * x_j, out = clamp(sum >> p, 0, 255).
// The height pass streams: it keeps only the width-resampled rows its window
// needs (a ring of max_taps rows), so memory stays O(width), not O(image); with a
// thread pool, bands of output rows do so each on a thread.
#include "media/bicubic_resize.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tf::media {
namespace {

// Keys' cubic convolution with a = -0.5.
double cubic_filter(double x) {
  const double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

inline uint8_t clamp_shift(int32_t sum, int precision) {
  const int32_t v = sum >> precision;  // arithmetic shift: floor
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One output row of the width pass: in is [in_w * 3] bytes, out is [out_w * 3].
void resample_row(const uint8_t* in, uint8_t* out, const ResampleAxis& ax) {
  const int32_t initial = int32_t{1} << (ax.precision - 1);
  for (int64_t o = 0; o < ax.out_size; ++o) {
    const int16_t* w = &ax.weights[static_cast<size_t>(o * ax.max_taps)];
    const uint8_t* p = in + ax.start[static_cast<size_t>(o)] * 3;
    const int64_t n = ax.count[static_cast<size_t>(o)];
    int32_t r = initial, g = initial, b = initial;
    for (int64_t j = 0; j < n; ++j) {
      r += p[3 * j] * w[j];
      g += p[3 * j + 1] * w[j];
      b += p[3 * j + 2] * w[j];
    }
    out[3 * o] = clamp_shift(r, ax.precision);
    out[3 * o + 1] = clamp_shift(g, ax.precision);
    out[3 * o + 2] = clamp_shift(b, ax.precision);
  }
}

}  // namespace

ResampleAxis bicubic_aa_axis(int64_t in_size, int64_t out_size) {
  ResampleAxis ax;
  ax.in_size = in_size;
  ax.out_size = out_size;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double support = (scale >= 1.0) ? (4 * 0.5) * scale : 4 * 0.5;
  ax.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const double invscale = (scale >= 1.0) ? 1.0 / scale : 1.0;
  ax.start.resize(static_cast<size_t>(out_size));
  ax.count.resize(static_cast<size_t>(out_size));
  std::vector<double> wf(static_cast<size_t>(out_size * ax.max_taps), 0.0);
  double wt_max = 0.0;
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, ax.max_taps);
    double* w = &wf[static_cast<size_t>(i * ax.max_taps)];
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = cubic_filter((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    }
    ax.start[static_cast<size_t>(i)] = xmin;
    ax.count[static_cast<size_t>(i)] = xsize;
  }
  // The largest precision whose doubled largest weight still fits int16.
  int precision = 0;
  for (precision = 0; precision < 22; ++precision) {
    const int next = static_cast<int>(0.5 + wt_max * static_cast<double>(1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  ax.precision = std::max(precision, 1);
  ax.weights.resize(wf.size());
  for (size_t k = 0; k < wf.size(); ++k) {
    const double v = wf[k] * static_cast<double>(1 << precision);
    ax.weights[k] = static_cast<int16_t>(v < 0 ? v - 0.5 : v + 0.5);
  }
  return ax;
}

namespace {

// Output rows [o0, o1) of the height pass (after the width pass when do_w), into out.
// The band keeps the width-resampled rows its taps need in a ring of max_taps rows, so
// memory stays O(width), not O(image).
void resample_rows(const RgbImage& img, const ResampleAxis* ax_w, const ResampleAxis& ax_h, int64_t o0,
                   int64_t o1, RgbImage& out) {
  const int64_t in_w = img.width, row_len = out.width * 3;  // bytes per width-resampled row
  const int64_t ring = ax_w ? std::max<int64_t>(ax_h.max_taps, 1) : 0;
  std::vector<uint8_t> rows(static_cast<size_t>(ring * row_len));
  std::vector<int64_t> held(static_cast<size_t>(ring), -1);
  // Row y after the width pass: a ring slot, filled on first use (or the input row itself).
  auto row_after_width_pass = [&](int64_t y) -> const uint8_t* {
    if (!ax_w) return &img.rgb[static_cast<size_t>(y * row_len)];
    const int64_t slot = y % ring;
    uint8_t* dst = &rows[static_cast<size_t>(slot * row_len)];
    if (held[static_cast<size_t>(slot)] != y) {
      resample_row(&img.rgb[static_cast<size_t>(y * in_w * 3)], dst, *ax_w);
      held[static_cast<size_t>(slot)] = y;
    }
    return dst;
  };
  std::vector<int32_t> acc(static_cast<size_t>(row_len));
  const int32_t initial = int32_t{1} << (ax_h.precision - 1);
  for (int64_t o = o0; o < o1; ++o) {
    const int64_t s = ax_h.start[static_cast<size_t>(o)], n = ax_h.count[static_cast<size_t>(o)];
    const int16_t* w = &ax_h.weights[static_cast<size_t>(o * ax_h.max_taps)];
    std::fill(acc.begin(), acc.end(), initial);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* r = row_after_width_pass(s + j);
      const int32_t wj = w[j];
      int32_t* a = acc.data();
      for (int64_t x = 0; x < row_len; ++x) a[x] += r[x] * wj;
    }
    uint8_t* dst = &out.rgb[static_cast<size_t>(o * row_len)];
    for (int64_t x = 0; x < row_len; ++x) dst[x] = clamp_shift(acc[static_cast<size_t>(x)], ax_h.precision);
  }
}

// fn(begin, end) over [0, n): on the pool's threads in bands of at least min_band, or here.
void for_bands(ThreadPool* pool, int64_t n, int64_t min_band,
               const std::function<void(int64_t, int64_t)>& fn) {
  if (pool != nullptr && pool->size() > 1 && n >= 2 * min_band)
    pool->parallel_for(n, fn, min_band);
  else
    fn(0, n);
}

}  // namespace

RgbImage resize_bicubic_antialias(const RgbImage& img, int64_t out_h, int64_t out_w, ThreadPool* pool) {
  RgbImage out;
  if (out_h <= 0 || out_w <= 0 || img.height <= 0 || img.width <= 0) return out;
  const int64_t in_h = img.height, in_w = img.width;
  out.height = out_h;
  out.width = out_w;
  if (out_h == in_h && out_w == in_w) {
    out.rgb = img.rgb;
    return out;
  }
  out.rgb.resize(static_cast<size_t>(out_h * out_w * 3));
  const bool do_w = out_w != in_w, do_h = out_h != in_h;
  const int64_t row_len = out_w * 3;
  // Bands of at least 64 rows: a band re-resamples up to max_taps input rows of its neighbour's.
  constexpr int64_t kMinBand = 64;

  if (!do_h) {  // width only: straight into the output
    const ResampleAxis ax_w = bicubic_aa_axis(in_w, out_w);
    for_bands(pool, in_h, kMinBand, [&](int64_t y0, int64_t y1) {
      for (int64_t y = y0; y < y1; ++y)
        resample_row(&img.rgb[static_cast<size_t>(y * in_w * 3)], &out.rgb[static_cast<size_t>(y * row_len)],
                     ax_w);
    });
    return out;
  }

  const ResampleAxis ax_w = do_w ? bicubic_aa_axis(in_w, out_w) : ResampleAxis{};
  const ResampleAxis ax_h = bicubic_aa_axis(in_h, out_h);
  for_bands(pool, out_h, kMinBand,
            [&](int64_t o0, int64_t o1) { resample_rows(img, do_w ? &ax_w : nullptr, ax_h, o0, o1, out); });
  return out;
}

}  // namespace tf::media
