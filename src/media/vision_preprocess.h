// Images and sampled video frames to the vision tower's input: Glm5Next's image
// and video processors (spec 6.3-6.4). smart_resize picks the canvas, the
// picture is resized (antialiased bicubic, torch-compatible) to its content
// size only when that differs from its size, padded right and bottom with 0,
// normalised with the CLIP mean/std in float32, and cut into 14x14 patches of
// temporal pairs, in merge-block order: for each 2x2 block of patches in raster
// order, its 4 patches in (row, col) order, each flattened as (c, t, py, px).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "media/bicubic_resize.h"
#include "media/image_decode.h"
#include "media/smart_resize.h"

namespace tf::media {

struct VisionPreprocessConfig {
  int patch_size = 14, merge_size = 2, temporal_patch_size = 2;
  int64_t min_tokens = 16, max_tokens = 8000;  // video: max_tokens 240000 (kVideoMaxTokens)
};
inline constexpr int64_t kVideoMaxTokens = 240000;

// An allocator whose vectors leave new elements uninitialised: the patchify writes every
// value, and a video's patches can take a gigabyte, whose zero fill on one thread cost
// more than the (parallel) writes after it.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;  // default-initialised: no zero fill
    else
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using PatchValues = std::vector<float, UninitializedAllocator<float>>;

struct VisionPatches {
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
  // [grid_t * grid_h * grid_w, 3 * temporal * patch * patch], row-major.
  PatchValues values;
  int64_t num_patches() const { return grid_t * grid_h * grid_w; }
  // <|image|> placeholders this input takes in the prompt (one per merge block).
  int64_t placeholder_tokens(int merge) const { return merge > 0 ? num_patches() / (int64_t{merge} * merge) : 0; }
};

// One image: one frame repeated to the temporal patch size, grid_t = 1.
Expected<VisionPatches> preprocess_image(const RgbImage& img, const VisionPreprocessConfig& cfg = {});

// Sampled frames of one video (all the same size; an odd count repeats the
// last frame): grid_t = ceil(frames / temporal). Pass max_tokens = kVideoMaxTokens.
Expected<VisionPatches> preprocess_video(std::span<const RgbImage> frames, const VisionPreprocessConfig& cfg);

// The grid (values left empty) that preprocess_image / preprocess_video would
// give an input of this size: placeholder tokens can be counted from the
// header alone.
Expected<VisionPatches> image_grid(int64_t height, int64_t width, const VisionPreprocessConfig& cfg = {});
Expected<VisionPatches> video_grid(int64_t num_frames, int64_t height, int64_t width, const VisionPreprocessConfig& cfg);

}  // namespace tf::media
