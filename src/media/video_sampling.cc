#include "media/video_sampling.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace tf::media {

std::vector<int64_t> linspace_indices(double start, double stop, int64_t num) {
  std::vector<int64_t> out;
  if (num <= 0) return out;
  out.reserve(static_cast<size_t>(num));
  const int64_t div = num - 1;
  const double delta = stop - start;
  const double step = div > 0 ? delta / static_cast<double>(div) : 0.0;
  for (int64_t i = 0; i < num; ++i) {
    double y;
    if (div > 0) {
      // numpy: y = arange(num) * step, or (arange(num) / div) * delta when step underflows to 0.
      y = step == 0.0 ? (static_cast<double>(i) / static_cast<double>(div)) * delta
                      : static_cast<double>(i) * step;
    } else {
      y = static_cast<double>(i) * delta;  // num == 1: [0 * delta]
    }
    y += start;
    if (num > 1 && i == num - 1) y = stop;
    out.push_back(static_cast<int64_t>(std::floor(y)));
  }
  return out;
}

std::vector<int64_t> sample_video_frames(int64_t total_frames, double source_fps, double duration,
                                         double target_fps, int64_t max_frames, double max_duration) {
  if (total_frames <= 0 || !(source_fps > 0) || !std::isfinite(source_fps) || !(target_fps > 0) ||
      !std::isfinite(target_fps)) {
    return {};
  }
  const int64_t max_frame_idx = total_frames - 1;
  // `metadata.duration or round(max_frame_idx / fps) + 1`: Python's round() is half to even, which is
  // nearbyint under the default rounding mode.
  double d = duration;
  if (!(d > 0) || !std::isfinite(d))
    d = std::nearbyint(static_cast<double>(max_frame_idx) / source_fps) + 1.0;
  if (!std::isfinite(d)) return {};          // a source_fps so small that the fallback overflows
  const double max_seconds = std::trunc(d);  // int(duration), taken before the max_duration cap
  if (max_duration > 0) d = std::min(d, max_duration);

  // extract_t = min(int(duration * target_fps), max_frames), without overflowing int64.
  const double product = d * target_fps;
  int64_t extract_t = product >= static_cast<double>(max_frames) ? max_frames : static_cast<int64_t>(product);
  if (extract_t <= 0) return {};

  std::vector<int64_t> indices;
  if (total_frames < extract_t) {
    indices = linspace_indices(0.0, static_cast<double>(total_frames - 1), extract_t);
  } else {
    const double duration_per_frame = 1.0 / source_fps;
    const double inv_fps = 1.0 / target_fps;
    double current_second = 0.0;
    for (int64_t i = 0; i < total_frames; ++i) {
      // timestamps[i] = i * (1 / fps), as the reference computes it (not i / fps).
      if (static_cast<double>(i) * duration_per_frame >= current_second) {
        current_second += inv_fps;
        indices.push_back(i);
        if (current_second >= max_seconds) break;
      }
    }
  }

  const auto count = static_cast<int64_t>(indices.size());
  if (count < extract_t) {
    double start = 0.0, end = static_cast<double>(std::max<int64_t>(total_frames - 1, 0));
    if (!indices.empty()) {
      start = static_cast<double>(indices.front());
      end = static_cast<double>(indices.back());
    }
    indices = linspace_indices(start, end, extract_t);
  } else if (count > extract_t) {
    indices = linspace_indices(0.0, static_cast<double>(total_frames - 1), extract_t);
  }

  std::vector<int64_t> unique;
  unique.reserve(indices.size() + 1);
  std::unordered_set<int64_t> seen;
  for (int64_t idx : indices) {
    if (seen.insert(idx).second) unique.push_back(idx);
  }
  if (unique.size() & 1) unique.push_back(unique.back());
  return unique;
}

std::vector<double> group_timestamps(std::span<const int64_t> indices, double source_fps, int64_t groups) {
  const double fps = source_fps > 0 && std::isfinite(source_fps) ? source_fps : 24.0;
  std::vector<double> out;
  if (groups <= 0) return out;
  out.reserve(static_cast<size_t>(groups));
  for (size_t k = 0; k < indices.size() && static_cast<int64_t>(out.size()) < groups; k += 2) {
    out.push_back(static_cast<double>(indices[k]) / fps);
  }
  while (static_cast<int64_t>(out.size()) < groups) out.push_back(out.empty() ? 0.0 : out.back());
  return out;
}

}  // namespace tf::media
