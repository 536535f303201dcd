// Antialiased bicubic resize, bit-compatible with what the reference image
// processor runs: torchvision's resize(uint8 tensor, BICUBIC, antialias=True)
// on the CPU, which keeps uint8 and calls PyTorch's native uint8 antialiased
// kernel (a Pillow-SIMD port inside _upsample_bicubic2d_aa): Keys cubic with
// a = -0.5, support widened by the scale when downscaling, weights normalised
// per output sample, then quantised to int16 with a precision picked from the
// largest weight; the width pass first, rounded and clamped to uint8, then
// the height pass, each skipped when that size is unchanged.
// (A float32 evaluation of the same filter, or PIL's BICUBIC, differ from it
// by one level on ~20% of values and by several levels near clipped pixels.)
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "media/image_decode.h"

namespace tf::media {

// The taps of one axis: output index o reads inputs [start[o], start[o] + count[o])
// with integer weights[o * max_taps + j] in units of 2^-precision. Exposed for tests.
struct ResampleAxis {
  int64_t in_size = 0, out_size = 0, max_taps = 0;
  int precision = 0;
  std::vector<int64_t> start, count;
  std::vector<int16_t> weights;
};
ResampleAxis bicubic_aa_axis(int64_t in_size, int64_t out_size);

// out_h, out_w >= 1 (a smaller size gives an empty image). With a pool, bands of output
// rows run on its threads (each band width-resamples the input rows its taps read): the
// same bytes, since every output row is computed the same way in any band.
RgbImage resize_bicubic_antialias(const RgbImage& img, int64_t out_h, int64_t out_w,
                                  ThreadPool* pool = nullptr);

}  // namespace tf::media
