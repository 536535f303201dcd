// libFuzzer target for the media layer (src/media): data: URLs, images and videos arrive in
// requests, so any bytes must decode or fail with a Status, without crash, sanitizer report, leak
// or runaway time. The first byte picks the mode (modulo 3); the rest is the input:
//   0  parse_data_url on the rest as text;
//   1  decode_image (PNG, JPEG, WebP, GIF, with the EXIF orientation) on the bytes, then, for an
//      image of at most 512x512, preprocess_image with a small token budget, so that smart_resize,
//      the torch-compatible bicubic resize and the patchify run on every decoded image; the grid
//      must be the one image_grid predicts from the size alone;
//   2  decode_video (FFmpeg) with tight limits, so that each run stays fast, then preprocess_video
//      of the sampled frames with a small token budget.
// Seed corpus: scripts/fuzz.sh prefixes tests/data/model/tiny-vision/images/* with the byte 1 and
// tests/data/media/*.mp4 with the byte 2, and copies tests/fuzz/media_corpus/* as they are.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "media/data_url.h"
#include "media/image_decode.h"
#include "media/video_decode.h"
#include "media/vision_preprocess.h"

namespace {

void fuzz_data_url(std::string_view text) { (void)tf::media::parse_data_url(text, 1 << 16); }

void fuzz_image(std::string_view bytes) {
  tf::media::ImageLimits limits;
  limits.max_pixels = 1 << 20;  // a header may claim up to 1 Mpixel: larger ones fail before any decoding
  auto image = tf::media::decode_image(bytes, limits);
  if (!image) return;
  if (image->height < 1 || image->width < 1 ||
      image->rgb.size() != static_cast<size_t>(image->height) * static_cast<size_t>(image->width) * 3)
    abort();  // decode_image returned an image that does not hold its own pixels
  if (image->height > 512 || image->width > 512) return;
  tf::media::VisionPreprocessConfig cfg;
  cfg.max_tokens = 64;
  auto patches = tf::media::preprocess_image(*image, cfg);
  auto grid = tf::media::image_grid(image->height, image->width, cfg);
  if (patches.has_value() != grid.has_value()) abort();
  if (!patches) return;
  const int64_t per_patch = int64_t{3} * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
  if (patches->grid_t != grid->grid_t || patches->grid_h != grid->grid_h || patches->grid_w != grid->grid_w ||
      static_cast<int64_t>(patches->values.size()) != patches->num_patches() * per_patch)
    abort();  // the grid counted from the header differs from the one the pixels give
}

void fuzz_video(std::string_view bytes) {
  tf::media::VideoLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_frames_decoded = 64;
  limits.max_pixels_per_frame = 256 * 256;
  limits.max_output_bytes = 8 << 20;
  auto video = tf::media::decode_video(bytes, limits);
  if (!video) return;
  if (video->frames.empty() || video->frames.size() != video->indices.size()) abort();
  for (const auto& f : video->frames) {
    if (f.height != video->frames[0].height || f.width != video->frames[0].width ||
        f.rgb.size() != static_cast<size_t>(f.height) * static_cast<size_t>(f.width) * 3)
      abort();  // frames must all have the first frame's size and hold their pixels
  }
  tf::media::VisionPreprocessConfig cfg;
  cfg.max_tokens = 64;  // a small canvas for the whole clip: the resize runs, and fast
  (void)tf::media::preprocess_video(video->frames, cfg);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      fuzz_data_url(rest);
      break;
    case 1:
      fuzz_image(rest);
      break;
    default:
      fuzz_video(rest);
      break;
  }
  return 0;
}
