// Image decoding for vision requests: PNG, JPEG, WebP and GIF (first frame)
// bytes to 8-bit RGB, the way the reference loads images (PIL decode,
// ImageOps.exif_transpose, convert("RGB")): alpha is dropped without
// compositing, gray is replicated, palettes are looked up, and the EXIF
// Orientation tag (JPEG, PNG eXIf, WebP EXIF) is applied. The format comes
// from the magic bytes, never from a MIME type. Dimensions are checked from
// the header before any pixel buffer is allocated, and hostile bytes give an
// error, not a crash.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf::media {

// Row-major HWC, 3 bytes per pixel.
struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;
};

struct ImageLimits {
  int64_t max_pixels = 64LL * 1024 * 1024;  // width * height
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif };

// The format named by the first bytes (kUnknown when none matches).
ImageFormat detect_image_format(std::string_view bytes);
const char* image_format_name(ImageFormat format);

Expected<RgbImage> decode_image(std::string_view bytes, const ImageLimits& limits = {});

}  // namespace tf::media
