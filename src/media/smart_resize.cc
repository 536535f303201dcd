// smart_resize and the content size (see smart_resize.h). Python's ints are
// exact and its int/int division is correctly rounded; with every operand
// below 2^53 the doubles here give the same results.
#include "media/smart_resize.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tf::media {
namespace {

constexpr int64_t kMaxSide = int64_t{1} << 20;    // pixels per side
constexpr int64_t kMaxFrames = int64_t{1} << 20;  // frames in one call
constexpr int64_t kMaxTokens = int64_t{1} << 30;

int64_t align_up(int64_t value, int64_t factor) { return (value + factor - 1) / factor * factor; }

}  // namespace

Expected<std::pair<int64_t, int64_t>> smart_resize(int64_t num_frames, int64_t height, int64_t width,
                                                   int temporal_factor, int factor, int64_t min_tokens,
                                                   int64_t max_tokens) {
  if (height < 1 || width < 1 || height > kMaxSide || width > kMaxSide)
    return invalid_argument("smart_resize: size " + std::to_string(height) + "x" + std::to_string(width) +
                            " is outside 1.." + std::to_string(kMaxSide) + " per side");
  if (num_frames < 1 || num_frames > kMaxFrames)
    return invalid_argument("smart_resize: " + std::to_string(num_frames) + " frames is outside 1.." +
                            std::to_string(kMaxFrames));
  if (temporal_factor < 1 || temporal_factor > 64 || factor < 1 || factor > 1024)
    return invalid_argument("smart_resize: temporal factor " + std::to_string(temporal_factor) + " and factor " +
                            std::to_string(factor) + " must be in 1..64 and 1..1024");
  if (min_tokens < 0 || max_tokens < 1 || min_tokens > kMaxTokens || max_tokens > kMaxTokens)
    return invalid_argument("smart_resize: token limits " + std::to_string(min_tokens) + ".." +
                            std::to_string(max_tokens) + " are out of range");

  const int64_t f = factor, tf = temporal_factor;
  const int64_t pixels_per_token = tf * f * f;
  const int64_t min_pixels = min_tokens * pixels_per_token;
  const int64_t max_pixels = max_tokens * pixels_per_token;

  // Python: max(tf, round(num_frames / tf) * tf), round() halves to even.
  const int64_t rounded = static_cast<int64_t>(std::nearbyint(static_cast<double>(num_frames) / static_cast<double>(tf)));
  const int64_t aligned_frames = std::max(tf, rounded * tf);
  int64_t aligned_h = align_up(height, f), aligned_w = align_up(width, f);
  int64_t budget = aligned_frames * aligned_h * aligned_w;

  if (budget < min_pixels) {
    const double scale =
        std::sqrt(static_cast<double>(min_pixels) / static_cast<double>(num_frames * height * width));
    aligned_h = align_up(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(height) * scale))), f);
    aligned_w = align_up(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(width) * scale))), f);
    budget = aligned_frames * aligned_h * aligned_w;
  }

  if (budget > max_pixels) {
    const int64_t minimum_pixels = aligned_frames * f * f;
    if (max_pixels < minimum_pixels)
      return invalid_argument("smart_resize: max_pixels=" + std::to_string(max_pixels) +
                              " is too small. At least " + std::to_string(minimum_pixels) +
                              " pixels are required for one aligned patch (" + std::to_string(num_frames) +
                              " frames, max_tokens " + std::to_string(max_tokens) + ")");
    int64_t low = 1, high = height;
    int64_t best_h = f, best_w = f;
    while (low <= high) {
      const int64_t content_h = (low + high) / 2;
      const int64_t content_w = std::max<int64_t>(
          1, static_cast<int64_t>(std::floor(static_cast<double>(width * content_h) / static_cast<double>(height))));
      const int64_t cand_h = align_up(content_h, f), cand_w = align_up(content_w, f);
      if (aligned_frames * cand_h * cand_w <= max_pixels) {
        best_h = cand_h;
        best_w = cand_w;
        low = content_h + 1;
      } else {
        high = content_h - 1;
      }
    }
    aligned_h = best_h;
    aligned_w = best_w;
  }
  return std::make_pair(aligned_h, aligned_w);
}

Expected<ResizePlan> plan_resize(int64_t num_frames, int64_t height, int64_t width, int temporal_factor, int factor,
                                 int64_t min_tokens, int64_t max_tokens) {
  TF_ASSIGN_OR_RETURN(auto canvas,
                      smart_resize(num_frames, height, width, temporal_factor, factor, min_tokens, max_tokens));
  ResizePlan plan;
  plan.canvas_h = canvas.first;
  plan.canvas_w = canvas.second;
  const int64_t pixels_per_token = int64_t{temporal_factor} * factor * factor;
  double scale = std::min(static_cast<double>(plan.canvas_h) / static_cast<double>(height),
                          static_cast<double>(plan.canvas_w) / static_cast<double>(width));
  if (num_frames * height * width >= pixels_per_token * min_tokens) scale = std::min(1.0, scale);
  plan.content_h = std::max<int64_t>(
      1, std::min(plan.canvas_h, static_cast<int64_t>(std::floor(static_cast<double>(height) * scale))));
  plan.content_w = std::max<int64_t>(
      1, std::min(plan.canvas_w, static_cast<int64_t>(std::floor(static_cast<double>(width) * scale))));
  return plan;
}

}  // namespace tf::media
