// The EXIF Orientation tag (0x0112) and PIL's ImageOps.exif_transpose: a camera
// stores pixels as the sensor saw them and says in EXIF how to turn them
// upright; the reference applies that before anything else.
#pragma once

#include <string_view>

#include "media/image_decode.h"

namespace tf::media {

// The Orientation value (1..8) of an EXIF block: a TIFF structure, with or
// without the "Exif\0\0" prefix of a JPEG APP1 segment. 1 (upright) when the
// block is absent, unreadable or holds a value outside 1..8.
int exif_orientation(std::string_view exif);

// Applies an orientation as PIL does (2 mirror, 3 rotate 180, 4 flip, 5 transpose,
// 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise); 1 and
// any other value leave the image as it is.
RgbImage apply_exif_orientation(RgbImage image, int orientation);

}  // namespace tf::media
