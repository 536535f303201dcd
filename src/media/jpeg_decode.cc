// JPEG through libjpeg(-turbo) with PIL's settings (islow DCT, fancy
// upsampling: the library defaults). Gray is replicated; CMYK/YCCK is turned
// into RGB as PIL's convert("RGB") does (Adobe files store inverted CMYK). The
// first APP1 "Exif" segment is returned for the orientation. A file that ends
// before its last scan is refused as truncated (PIL raises there too), and
// progressive files with an absurd number of scans are refused (a known CPU
// exhaustion trick). libjpeg reports errors by longjmp; see png_decode.cc for
// how state is kept safe across it.
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "media/image_codecs.h"

namespace tf::media::detail {
namespace {

constexpr int kMaxScans = 1000;

struct JpegErrorManager {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
  bool truncated = false;
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

void jpeg_emit_message(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  // Level -1 is a warning about corrupt data; running out of data is the one we refuse.
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) err->truncated = true;
}

void jpeg_output_message(j_common_ptr) {}

void jpeg_progress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
      std::snprintf(err->message, sizeof err->message, "more than %d scans", kMaxScans);
      longjmp(err->jump, 1);
    }
  }
}

struct JpegJob {
  std::string_view bytes;
  const ImageLimits* limits;
  RgbImage* image;
  std::vector<uint8_t>* row;
  std::string* exif;
  Status* status;
  JpegErrorManager* err;
};

// PIL's cmyk2rgb: R = (255 - K) - C * (255 - K) / 255, rounded as MULDIV255.
inline uint8_t cmyk_channel(unsigned c, unsigned k) {
  unsigned nk = 255 - k;
  unsigned t = c * nk + 128;
  unsigned muldiv = ((t >> 8) + t) >> 8;
  return static_cast<uint8_t>(nk - muldiv);
}

bool run_jpeg(const JpegJob& job) {
  jpeg_decompress_struct cinfo;
  jpeg_progress_mgr progress;
  cinfo.err = jpeg_std_error(&job.err->pub);
  job.err->pub.error_exit = jpeg_error_exit;
  job.err->pub.emit_message = jpeg_emit_message;
  job.err->pub.output_message = jpeg_output_message;
  if (setjmp(job.err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpeg_progress;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(job.bytes.data()),
               static_cast<unsigned long>(job.bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&cinfo, TRUE);

  *job.status = check_dimensions("JPEG", cinfo.image_width, cinfo.image_height, *job.limits);
  if (!job.status->is_ok()) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      job.exif->assign(reinterpret_cast<const char*>(m->data), m->data_length);
      break;
    }
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  const bool adobe_inverted = cmyk && cinfo.saw_Adobe_marker;
  if (cmyk) {
    cinfo.out_color_space = JCS_CMYK;
  } else if (cinfo.num_components == 1) {
    cinfo.out_color_space = JCS_GRAYSCALE;
  } else {
    cinfo.out_color_space = JCS_RGB;
  }
  jpeg_start_decompress(&cinfo);
  const int64_t width = cinfo.output_width, height = cinfo.output_height;
  const int comps = cinfo.output_components;
  if (width != cinfo.image_width || height != cinfo.image_height || (comps != 1 && comps != 3 && comps != 4)) {
    std::snprintf(job.err->message, sizeof job.err->message, "unexpected output layout");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  job.image->width = width;
  job.image->height = height;
  job.image->rgb.resize(static_cast<size_t>(width * height * 3));
  job.row->resize(static_cast<size_t>(width * comps));
  while (cinfo.output_scanline < cinfo.output_height) {
    int64_t y = cinfo.output_scanline;
    JSAMPROW rows[1] = {job.row->data()};
    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
      job.err->truncated = true;
      break;
    }
    const uint8_t* in = job.row->data();
    uint8_t* out = job.image->rgb.data() + y * width * 3;
    if (comps == 3) {
      std::memcpy(out, in, static_cast<size_t>(width * 3));
    } else if (comps == 1) {
      for (int64_t x = 0; x < width; ++x) out[3 * x] = out[3 * x + 1] = out[3 * x + 2] = in[x];
    } else {
      for (int64_t x = 0; x < width; ++x) {
        unsigned c = in[4 * x], m = in[4 * x + 1], yv = in[4 * x + 2], k = in[4 * x + 3];
        if (adobe_inverted) c = 255 - c, m = 255 - m, yv = 255 - yv, k = 255 - k;
        out[3 * x] = cmyk_channel(c, k);
        out[3 * x + 1] = cmyk_channel(m, k);
        out[3 * x + 2] = cmyk_channel(yv, k);
      }
    }
  }
  if (job.err->truncated) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  // All rows are in; a missing EOI marker only warns here and is accepted.
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

Expected<RgbImage> decode_jpeg(std::string_view bytes, const ImageLimits& limits, std::string* exif) {
  JpegErrorManager err;
  RgbImage image;
  std::vector<uint8_t> row;
  std::string exif_block;
  Status status;
  JpegJob job{bytes, &limits, &image, &row, &exif_block, &status, &err};
  if (!run_jpeg(job)) {
    if (!status.is_ok()) return status;
    if (err.truncated) return invalid_argument("image: JPEG is truncated");
    return invalid_argument(std::string("image: JPEG is corrupt (") + err.message + ")");
  }
  if (exif) *exif = std::move(exif_block);
  return image;
}

}  // namespace tf::media::detail
