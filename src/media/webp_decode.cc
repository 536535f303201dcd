// WebP through libwebp: still images (lossy, lossless, with or without alpha)
// decode straight into RGB, alpha dropped as PIL's convert("RGB") does;
// animated files give their first frame through WebPAnimDecoder (libwebpdemux),
// as PIL does. The EXIF chunk of an extended (VP8X) file is returned for the
// orientation.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <string>

#include "media/image_codecs.h"

namespace tf::media::detail {
namespace {

uint32_t le32(const char* p) {
  auto b = reinterpret_cast<const uint8_t*>(p);
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

// The payload of the first EXIF chunk of a RIFF/WEBP container, or empty.
std::string find_exif_chunk(std::string_view bytes) {
  size_t pos = 12;  // "RIFF" size "WEBP"
  while (pos + 8 <= bytes.size()) {
    std::string_view fourcc = bytes.substr(pos, 4);
    size_t size = le32(bytes.data() + pos + 4);
    if (size > bytes.size() - pos - 8) return {};
    if (fourcc == "EXIF") return std::string(bytes.substr(pos + 8, size));
    pos += 8 + size + (size & 1);
  }
  return {};
}

Status webp_status(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return invalid_argument("image: WebP is truncated");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return unimplemented("image: WebP uses a feature libwebp does not support");
    case VP8_STATUS_OUT_OF_MEMORY:
      return resource_exhausted("image: out of memory decoding a WebP image");
    default:
      return invalid_argument("image: WebP is corrupt (libwebp status " + std::to_string(static_cast<int>(code)) + ")");
  }
}

Expected<RgbImage> first_animation_frame(std::string_view bytes, int64_t width, int64_t height) {
  WebPData data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return internal_error("image: libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPAnimDecoder* decoder = WebPAnimDecoderNew(&data, &options);
  if (!decoder) return invalid_argument("image: animated WebP is corrupt or truncated");
  WebPAnimInfo info;
  uint8_t* frame = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetInfo(decoder, &info) || info.canvas_width != width || info.canvas_height != height ||
      !WebPAnimDecoderGetNext(decoder, &frame, &timestamp) || !frame) {
    WebPAnimDecoderDelete(decoder);
    return invalid_argument("image: animated WebP is corrupt or truncated (no first frame)");
  }
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width * height * 3));
  for (int64_t i = 0; i < width * height; ++i) {
    image.rgb[3 * i] = frame[4 * i];
    image.rgb[3 * i + 1] = frame[4 * i + 1];
    image.rgb[3 * i + 2] = frame[4 * i + 2];
  }
  WebPAnimDecoderDelete(decoder);
  return image;
}

}  // namespace

Expected<RgbImage> decode_webp(std::string_view bytes, const ImageLimits& limits, std::string* exif) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  VP8StatusCode code = WebPGetFeatures(data, bytes.size(), &features);
  if (code != VP8_STATUS_OK) return webp_status(code);
  TF_RETURN_IF_ERROR(check_dimensions("WebP", features.width, features.height, limits));
  if (exif) *exif = find_exif_chunk(bytes);
  if (features.has_animation) return first_animation_frame(bytes, features.width, features.height);

  RgbImage image;
  image.width = features.width;
  image.height = features.height;
  image.rgb.resize(static_cast<size_t>(image.width * image.height * 3));
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return internal_error("image: libwebp version mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.rgb.data();
  config.output.u.RGBA.stride = static_cast<int>(image.width * 3);
  config.output.u.RGBA.size = image.rgb.size();
  code = WebPDecode(data, bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (code != VP8_STATUS_OK) return webp_status(code);
  return image;
}

}  // namespace tf::media::detail
