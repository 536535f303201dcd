// EXIF Orientation: a bounds-checked read of IFD0 and the eight transposes (see exif_orientation.h).
#include "media/exif_orientation.h"

#include <cstdint>
#include <cstring>

namespace tf::media {
namespace {

struct TiffReader {
  std::string_view data;
  bool little = true;
  bool ok(size_t offset, size_t n) const { return offset <= data.size() && n <= data.size() - offset; }
  uint32_t u16(size_t o) const {
    auto b = reinterpret_cast<const uint8_t*>(data.data()) + o;
    return little ? (b[0] | (b[1] << 8)) : ((b[0] << 8) | b[1]);
  }
  uint32_t u32(size_t o) const {
    auto b = reinterpret_cast<const uint8_t*>(data.data()) + o;
    return little ? (uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24)
                  : (uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]));
  }
};

}  // namespace

int exif_orientation(std::string_view exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif.remove_prefix(6);
  TiffReader r{exif};
  if (!r.ok(0, 8)) return 1;
  if (exif.substr(0, 4) == std::string_view("II*\0", 4)) {
    r.little = true;
  } else if (exif.substr(0, 4) == std::string_view("MM\0*", 4)) {
    r.little = false;
  } else {
    return 1;
  }
  size_t ifd = r.u32(4);
  if (!r.ok(ifd, 2)) return 1;
  size_t count = r.u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    size_t entry = ifd + 2 + 12 * i;
    if (!r.ok(entry, 12)) return 1;
    if (r.u16(entry) != 0x0112) continue;
    uint32_t type = r.u16(entry + 2), n = r.u32(entry + 4);
    if (n != 1) return 1;
    uint32_t value = 0;
    if (type == 3 || type == 8) {  // SHORT / SSHORT
      value = r.u16(entry + 8);
    } else if (type == 4 || type == 9) {  // LONG / SLONG
      value = r.u32(entry + 8);
    } else if (type == 1 || type == 6) {  // BYTE / SBYTE
      value = static_cast<uint8_t>(exif[entry + 8]);
    } else {
      return 1;
    }
    return (value >= 1 && value <= 8) ? static_cast<int>(value) : 1;
  }
  return 1;
}

RgbImage apply_exif_orientation(RgbImage image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int64_t h = image.height, w = image.width;
  const bool swap = orientation >= 5;  // 5..8 exchange height and width
  RgbImage out;
  out.height = swap ? w : h;
  out.width = swap ? h : w;
  out.rgb.resize(image.rgb.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sy = 0, sx = 0;  // the source pixel of output (y, x)
      switch (orientation) {
        case 2: sy = y; sx = w - 1 - x; break;                  // FLIP_LEFT_RIGHT
        case 3: sy = h - 1 - y; sx = w - 1 - x; break;          // ROTATE_180
        case 4: sy = h - 1 - y; sx = x; break;                  // FLIP_TOP_BOTTOM
        case 5: sy = x; sx = y; break;                          // TRANSPOSE
        case 6: sy = h - 1 - x; sx = y; break;                  // ROTATE_270 (90 clockwise)
        case 7: sy = h - 1 - x; sx = w - 1 - y; break;          // TRANSVERSE
        case 8: sy = x; sx = w - 1 - y; break;                  // ROTATE_90 (counter-clockwise)
      }
      const uint8_t* s = &image.rgb[static_cast<size_t>((sy * w + sx) * 3)];
      uint8_t* d = &out.rgb[static_cast<size_t>((y * out.width + x) * 3)];
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

}  // namespace tf::media
