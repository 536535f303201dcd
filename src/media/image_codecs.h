// Internal to tf_media: one decoder per format (png_decode.cc, jpeg_decode.cc,
// webp_decode.cc, gif_decode.cc), dispatched by decode_image. Each returns
// the upright-as-stored RGB pixels and, where the format carries one, the raw
// EXIF block (for the orientation; image_decode.cc applies it).
#pragma once

#include <string>
#include <string_view>

#include "media/image_decode.h"

namespace tf::media::detail {

// "image: 40000x40000 pixels is more than the 100000000 allowed", or a zero size.
Status check_dimensions(const char* format, int64_t width, int64_t height, const ImageLimits& limits);

Expected<RgbImage> decode_png(std::string_view bytes, const ImageLimits& limits, std::string* exif);
Expected<RgbImage> decode_jpeg(std::string_view bytes, const ImageLimits& limits, std::string* exif);
Expected<RgbImage> decode_webp(std::string_view bytes, const ImageLimits& limits, std::string* exif);
Expected<RgbImage> decode_gif(std::string_view bytes, const ImageLimits& limits);

}  // namespace tf::media::detail
