// GIF through giflib: the first frame only, on a canvas of the logical screen
// size (grown to hold the frame if it sticks out, as PIL does). As in PIL, the
// canvas starts as the frame's transparent index (else index 0) and indices
// are looked up in the local palette, else the global one; indices past the
// palette's end read as gray (i, i, i), and a file without any palette is gray.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "media/image_codecs.h"

namespace tf::media::detail {
namespace {

struct GifSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

int gif_read(GifFileType* gif, GifByteType* out, int length) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  size_t n = std::min(static_cast<size_t>(std::max(length, 0)), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
  return static_cast<int>(n);
}

Status gif_error(int code, const char* when) {
  if (code == D_GIF_ERR_READ_FAILED || code == D_GIF_ERR_EOF_TOO_SOON)
    return invalid_argument("image: GIF is truncated");
  if (code == D_GIF_ERR_NOT_ENOUGH_MEM) return resource_exhausted("image: out of memory decoding a GIF image");
  const char* text = GifErrorString(code);
  return invalid_argument(std::string("image: GIF is corrupt (") + when + ": " + (text ? text : "unknown error") + ")");
}

struct GifCloser {
  GifFileType* gif;
  ~GifCloser() {
    int err = 0;
    if (gif) DGifCloseFile(gif, &err);
  }
};

}  // namespace

Expected<RgbImage> decode_gif(std::string_view bytes, const ImageLimits& limits) {
  GifSource src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
  int err = 0;
  GifFileType* gif = DGifOpen(&src, gif_read, &err);
  if (!gif) return gif_error(err, "reading the header");
  GifCloser closer{gif};
  TF_RETURN_IF_ERROR(check_dimensions("GIF", std::max(gif->SWidth, 1), std::max(gif->SHeight, 1), limits));

  int transparent = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return gif_error(gif->Error, "reading a record");
    if (type == TERMINATE_RECORD_TYPE) return invalid_argument("image: GIF holds no image");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) return gif_error(gif->Error, "reading an extension");
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
      }
      while (ext) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) return gif_error(gif->Error, "reading an extension");
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;

    if (DGifGetImageDesc(gif) == GIF_ERROR) return gif_error(gif->Error, "reading the image descriptor");
    const GifImageDesc& desc = gif->Image;
    const int64_t left = desc.Left, top = desc.Top, fw = desc.Width, fh = desc.Height;
    const int64_t width = std::max<int64_t>({gif->SWidth, left + fw, 1});
    const int64_t height = std::max<int64_t>({gif->SHeight, top + fh, 1});
    TF_RETURN_IF_ERROR(check_dimensions("GIF", width, height, limits));
    TF_RETURN_IF_ERROR(check_dimensions("GIF", std::max<int64_t>(fw, 1), std::max<int64_t>(fh, 1), limits));

    const ColorMapObject* map = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
    uint8_t palette[256][3];
    for (int i = 0; i < 256; ++i) palette[i][0] = palette[i][1] = palette[i][2] = static_cast<uint8_t>(i);
    if (map && map->Colors) {
      for (int i = 0; i < std::min(map->ColorCount, 256); ++i) {
        palette[i][0] = map->Colors[i].Red;
        palette[i][1] = map->Colors[i].Green;
        palette[i][2] = map->Colors[i].Blue;
      }
    }

    // The canvas as indices, filled as PIL fills the first frame's background.
    std::vector<uint8_t> indices(static_cast<size_t>(width * height),
                                 static_cast<uint8_t>(transparent >= 0 && transparent < 256 ? transparent : 0));
    std::vector<GifPixelType> line(static_cast<size_t>(std::max<int64_t>(fw, 1)));
    auto read_row = [&](int64_t y) -> Status {
      if (fw == 0) return Status::ok();
      if (DGifGetLine(gif, line.data(), static_cast<int>(fw)) == GIF_ERROR) return gif_error(gif->Error, "reading pixels");
      std::memcpy(&indices[static_cast<size_t>((top + y) * width + left)], line.data(), static_cast<size_t>(fw));
      return Status::ok();
    };
    if (desc.Interlace) {
      static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
      for (int pass = 0; pass < 4; ++pass)
        for (int64_t y = kStart[pass]; y < fh; y += kStep[pass]) TF_RETURN_IF_ERROR(read_row(y));
    } else {
      for (int64_t y = 0; y < fh; ++y) TF_RETURN_IF_ERROR(read_row(y));
    }

    RgbImage image;
    image.width = width;
    image.height = height;
    image.rgb.resize(indices.size() * 3);
    for (size_t i = 0; i < indices.size(); ++i) std::memcpy(&image.rgb[3 * i], palette[indices[i]], 3);
    return image;
  }
}

}  // namespace tf::media::detail
