// smart_resize: the canvas size (a multiple of patch*merge on each side) that
// an image or a group of video frames is resized and padded to, within a token
// budget. A transcription of Glm5Next's smart_resize (spec 6.3), including
// Python's half-to-even round of num_frames / temporal_factor and the binary
// search that cuts an over-budget canvas. Also the content size: how large the
// picture itself is drawn on that canvas (the rest is zero padding).
#pragma once

#include <cstdint>
#include <utility>

#include "core/status.h"

namespace tf::media {

// Returns the canvas (height, width). Budgets are min_tokens and max_tokens
// times temporal_factor * factor^2 pixels. Errors: a non-positive size or
// factor, sizes too large to compute with, or a max_tokens too small for one
// aligned patch (the reference's ValueError).
Expected<std::pair<int64_t, int64_t>> smart_resize(int64_t num_frames, int64_t height, int64_t width,
                                                   int temporal_factor, int factor, int64_t min_tokens,
                                                   int64_t max_tokens);

// Where the picture goes on the canvas: content_h x content_w at the top left,
// the rest padded with zeros. Never upscales unless the input is below the
// minimum token budget (num_frames * H * W < min_tokens * temporal * factor^2).
struct ResizePlan {
  int64_t canvas_h = 0, canvas_w = 0;
  int64_t content_h = 0, content_w = 0;
  bool needs_resize(int64_t height, int64_t width) const { return content_h != height || content_w != width; }
};
Expected<ResizePlan> plan_resize(int64_t num_frames, int64_t height, int64_t width, int temporal_factor, int factor,
                                 int64_t min_tokens, int64_t max_tokens);

}  // namespace tf::media
