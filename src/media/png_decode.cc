// PNG through libpng, converted the way PIL's convert("RGB") does: palettes
// looked up, 1/2/4-bit gray scaled to 0..255, alpha dropped (no compositing),
// 16-bit samples reduced to their high byte (PIL's "RGB;16B" raw modes), except
// 16-bit gray without alpha, which PIL opens as "I;16" and converts by clamping
// to 255. libpng reports errors by longjmp, so all of its state lives in a
// plain context struct and no C++ object is created between setjmp and the end.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "media/image_codecs.h"

namespace tf::media::detail {
namespace {

struct PngContext {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  char error[200] = {0};
  bool truncated = false;
};

void png_error_fn(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof ctx->error, "%s", message ? message : "unknown error");
  png_longjmp(png, 1);
}

void png_warning_fn(png_structp, png_const_charp) {}

void png_read_fn(png_structp png, png_bytep out, png_size_t length) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > ctx->size - ctx->pos) {
    ctx->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, ctx->data + ctx->pos, length);
  ctx->pos += length;
}

// Everything between setjmp and the return uses only the pointers passed in.
struct PngJob {
  PngContext* ctx;
  const ImageLimits* limits;
  RgbImage* image;
  std::vector<uint8_t>* rows;  // decoded rows (all of them for interlaced images, else one)
  std::string* exif;
  Status* status;
};

// Converts one decoded row of `channels` samples (8-bit, or 16-bit big-endian gray) to RGB.
void row_to_rgb(const uint8_t* in, uint8_t* out, int64_t width, int channels, int bit_depth) {
  if (bit_depth == 16) {  // 16-bit gray only: PIL's I;16 -> RGB clamps at 255
    for (int64_t x = 0; x < width; ++x) {
      unsigned v = (unsigned(in[2 * x]) << 8) | in[2 * x + 1];
      uint8_t g = v > 255 ? 255 : static_cast<uint8_t>(v);
      out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = g;
    }
    return;
  }
  for (int64_t x = 0; x < width; ++x) {
    const uint8_t* p = in + x * channels;
    if (channels <= 2) {
      out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = p[0];
    } else {
      out[3 * x] = p[0];
      out[3 * x + 1] = p[1];
      out[3 * x + 2] = p[2];
    }
  }
}

bool run_png(const PngJob& job) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job.ctx, png_error_fn, png_warning_fn);
  if (!png) {
    *job.status = resource_exhausted("image: out of memory starting the PNG decoder");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    *job.status = resource_exhausted("image: out of memory starting the PNG decoder");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;  // job.ctx->error says why
  }
  png_set_read_fn(png, job.ctx, png_read_fn);
  png_read_info(png, info);

  png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  *job.status = check_dimensions("PNG", width, height, *job.limits);
  if (!job.status->is_ok()) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const int color_type = png_get_color_type(png, info);
  const int source_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && source_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  const bool gray16 = color_type == PNG_COLOR_TYPE_GRAY && source_depth == 16;
  if (source_depth == 16 && !gray16) png_set_strip_16(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  if (channels < 1 || channels > 4 || (bit_depth != 8 && !(bit_depth == 16 && gray16 && channels == 1)) ||
      rowbytes < static_cast<size_t>(width) * channels * (bit_depth / 8)) {
    png_error(png, "unsupported pixel layout after conversion");
  }

  job.image->height = height;
  job.image->width = width;
  job.image->rgb.resize(static_cast<size_t>(width) * height * 3);
  if (passes > 1) {
    job.rows->resize(rowbytes * height);
    for (int pass = 0; pass < passes; ++pass)
      for (png_uint_32 y = 0; y < height; ++y) png_read_row(png, job.rows->data() + rowbytes * y, nullptr);
    for (png_uint_32 y = 0; y < height; ++y)
      row_to_rgb(job.rows->data() + rowbytes * y, job.image->rgb.data() + size_t(y) * width * 3, width, channels,
                 bit_depth);
  } else {
    job.rows->resize(rowbytes);
    for (png_uint_32 y = 0; y < height; ++y) {
      png_read_row(png, job.rows->data(), nullptr);
      row_to_rgb(job.rows->data(), job.image->rgb.data() + size_t(y) * width * 3, width, channels, bit_depth);
    }
  }

  // The pixels are complete; an eXIf chunk may follow them. A broken tail is
  // ignored (PIL reads it leniently too), so re-arm the error jump.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  png_read_end(png, info);
  png_uint_32 exif_size = 0;
  png_bytep exif_data = nullptr;
  if (png_get_eXIf_1(png, info, &exif_size, &exif_data) != 0 && exif_data && exif_size)
    job.exif->assign(reinterpret_cast<const char*>(exif_data), exif_size);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

Expected<RgbImage> decode_png(std::string_view bytes, const ImageLimits& limits, std::string* exif) {
  // The size straight from IHDR (signature, length, "IHDR", width, height), before libpng reads further.
  if (bytes.size() >= 24 && bytes.substr(12, 4) == "IHDR") {
    auto be32 = [&](size_t o) {
      auto b = reinterpret_cast<const uint8_t*>(bytes.data()) + o;
      return int64_t{b[0]} << 24 | int64_t{b[1]} << 16 | int64_t{b[2]} << 8 | int64_t{b[3]};
    };
    TF_RETURN_IF_ERROR(check_dimensions("PNG", be32(16), be32(20), limits));
  }
  PngContext ctx;
  ctx.data = reinterpret_cast<const uint8_t*>(bytes.data());
  ctx.size = bytes.size();
  RgbImage image;
  std::vector<uint8_t> rows;
  std::string exif_block;
  Status status;
  PngJob job{&ctx, &limits, &image, &rows, &exif_block, &status};
  if (!run_png(job)) {
    if (!status.is_ok()) return status;
    if (ctx.truncated) return invalid_argument("image: PNG is truncated");
    return invalid_argument(std::string("image: PNG is corrupt (") + ctx.error + ")");
  }
  if (exif) *exif = std::move(exif_block);
  return image;
}

}  // namespace tf::media::detail
