// decode_image: the format from the magic bytes, the format's decoder, then
// the EXIF orientation (see image_decode.h).
#include "media/image_decode.h"

#include <cstring>
#include <new>
#include <string>

#include "media/exif_orientation.h"
#include "media/image_codecs.h"

namespace tf::media {
namespace {

bool starts_with(std::string_view bytes, std::string_view magic, size_t offset = 0) {
  return bytes.size() >= offset + magic.size() && bytes.substr(offset, magic.size()) == magic;
}

// Formats we recognise only to refuse by name.
const char* other_format_name(std::string_view b) {
  if (starts_with(b, "BM")) return "BMP";
  if (starts_with(b, std::string_view("II*\0", 4)) || starts_with(b, std::string_view("MM\0*", 4))) return "TIFF";
  if (starts_with(b, "ftypavif", 4) || starts_with(b, "ftypavis", 4)) return "AVIF";
  if (starts_with(b, "ftyphei", 4) || starts_with(b, "ftypmif1", 4) || starts_with(b, "ftyphevc", 4)) return "HEIF";
  if (starts_with(b, std::string_view("\0\0\0\x0cjP  ", 8))) return "JPEG 2000";
  if (starts_with(b, std::string_view("\xff\x0a", 2)) || starts_with(b, std::string_view("\0\0\0\x0cJXL ", 8)))
    return "JPEG XL";
  if (starts_with(b, "<svg") || starts_with(b, "<?xml")) return "SVG";
  if (starts_with(b, "ftyp", 4)) return "an MP4/MOV container (a video?)";
  return nullptr;
}

}  // namespace

namespace detail {

Status check_dimensions(const char* format, int64_t width, int64_t height, const ImageLimits& limits) {
  if (width <= 0 || height <= 0)
    return invalid_argument("image: " + std::string(format) + " header gives an empty size " + std::to_string(width) +
                            "x" + std::to_string(height));
  // Divided, not multiplied: 32-bit header fields can overflow a 64-bit product.
  if (width > limits.max_pixels / height)
    return invalid_argument("image: " + std::to_string(width) + "x" + std::to_string(height) +
                            " pixels is more than the " + std::to_string(limits.max_pixels) + " allowed");
  return Status::ok();
}

}  // namespace detail

ImageFormat detect_image_format(std::string_view bytes) {
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts_with(bytes, "\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return ImageFormat::kWebp;
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return ImageFormat::kGif;
  return ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

namespace {

Expected<RgbImage> decode_checked(std::string_view bytes, const ImageLimits& limits) {
  std::string exif;
  Expected<RgbImage> image = invalid_argument("image: unreachable");
  switch (detect_image_format(bytes)) {
    case ImageFormat::kPng: image = detail::decode_png(bytes, limits, &exif); break;
    case ImageFormat::kJpeg: image = detail::decode_jpeg(bytes, limits, &exif); break;
    case ImageFormat::kWebp: image = detail::decode_webp(bytes, limits, &exif); break;
    case ImageFormat::kGif: image = detail::decode_gif(bytes, limits); break;
    case ImageFormat::kUnknown: {
      const char* other = other_format_name(bytes);
      if (other)
        return unimplemented("image: " + std::string(other) + " is not supported (send PNG, JPEG, WebP or GIF)");
      return invalid_argument("image: the bytes are not a PNG, JPEG, WebP or GIF image (unknown signature)");
    }
  }
  if (!image) return image;
  int orientation = exif.empty() ? 1 : exif_orientation(exif);
  if (orientation != 1) return apply_exif_orientation(std::move(*image), orientation);
  return image;
}

}  // namespace

Expected<RgbImage> decode_image(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.empty()) return invalid_argument("image: no bytes");
  try {
    return decode_checked(bytes, limits);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("image: out of memory decoding " + std::to_string(bytes.size()) + " bytes");
  }
}

}  // namespace tf::media
