// The image half of src/media against transformers 5.17's Glm5NextImageProcessor /
// Glm5NextVideoProcessor (tests/data/model/tiny-vision, made by
// tools/reference/make_vision_fixtures.py): decoding (PNG exact, JPEG within one
// level), grids, pixel values (report max diff; at most one uint8 level after
// normalisation), the video path from the sampled frames, smart_resize against
// the spec's table, WebP and GIF encoded here, EXIF orientation, data: URLs,
// hostile inputs and the speed of a 12-megapixel photo.
#include <gif_lib.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "cpu_clock.h"
#include "media/data_url.h"
#include "media/exif_orientation.h"
#include "media/image_decode.h"
#include "media/vision_preprocess.h"

namespace tf::media {
namespace {

const std::string kDir = std::string(TF_TEST_DATA_DIR) + "/model/tiny-vision";
constexpr float kOneLevel = 1.0f / (0.26130258f * 255.0f) + 1e-6f;  // one uint8 step, smallest std

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A minimal safetensors reader (the test only reads its own fixture).
class Reference {
 public:
  Reference() {
    bytes_ = read_file(kDir + "/reference.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes_.data(), 8);
    header_ = nlohmann::json::parse(bytes_.substr(8, n));
    data_ = 8 + n;
    meta_ = nlohmann::json::parse(read_file(kDir + "/reference.json"));
  }
  template <typename T>
  std::vector<T> get(const std::string& name, std::vector<int64_t>* shape = nullptr) const {
    const auto& e = header_.at(name);
    size_t b = e["data_offsets"][0], end = e["data_offsets"][1];
    std::vector<T> out((end - b) / sizeof(T));
    std::memcpy(out.data(), bytes_.data() + data_ + b, end - b);
    if (shape) *shape = e["shape"].get<std::vector<int64_t>>();
    return out;
  }
  const nlohmann::json& meta() const { return meta_; }

 private:
  std::string bytes_;
  nlohmann::json header_, meta_;
  size_t data_ = 0;
};

const Reference& ref() {
  static const Reference r;
  return r;
}

struct Diff {
  float max_abs = 0;
  int64_t differing = 0;
};
Diff compare(std::span<const float> got, const std::vector<float>& want) {
  Diff d;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    float a = std::abs(got[i] - want[i]);
    if (a > 0) ++d.differing;
    d.max_abs = std::max(d.max_abs, a);
  }
  return d;
}

RgbImage pattern(int64_t h, int64_t w, uint32_t seed) {
  RgbImage img;
  img.height = h;
  img.width = w;
  img.rgb.resize(h * w * 3);
  std::mt19937 rng(seed);
  for (auto& v : img.rgb) v = static_cast<uint8_t>(rng());
  return img;
}

// ------------------------------------------------------------ decoding

TEST(MediaImageDecode, FixtureImagesMatchPil) {
  const auto& images = ref().meta()["images"];
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string file = images[i]["file"];
    auto img = decode_image(read_file(kDir + "/" + file));
    ASSERT_TRUE(img) << file << ": " << img.status().to_string();
    std::vector<int64_t> shape;
    auto want = ref().get<uint8_t>("img" + std::to_string(i) + "_rgb", &shape);
    ASSERT_EQ(img->height, shape[0]) << file;
    ASSERT_EQ(img->width, shape[1]) << file;
    ASSERT_EQ(img->rgb.size(), want.size());
    int max_diff = 0;
    int64_t differing = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      int d = std::abs(int(img->rgb[k]) - int(want[k]));
      max_diff = std::max(max_diff, d);
      differing += d != 0;
    }
    std::printf("  decode %-22s max diff %d, %lld of %zu values differ\n", file.c_str(), max_diff,
                static_cast<long long>(differing), want.size());
    if (file.ends_with(".png")) {
      EXPECT_EQ(max_diff, 0) << file;
    } else {
      EXPECT_LE(max_diff, 1) << file;
    }
  }
}

// ------------------------------------------------------------ preprocessing

TEST(MediaVisionPreprocess, FixtureImagesMatchProcessor) {
  const auto& images = ref().meta()["images"];
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string file = images[i]["file"];
    const std::string key = "img" + std::to_string(i);
    // From the reference's own decode, so that only the preprocessing is compared.
    std::vector<int64_t> shape;
    RgbImage img;
    img.rgb = ref().get<uint8_t>(key + "_rgb", &shape);
    img.height = shape[0];
    img.width = shape[1];
    VisionPreprocessConfig cfg;
    if (!images[i]["max_image_tokens"].is_null()) cfg.max_tokens = images[i]["max_image_tokens"];
    auto got = preprocess_image(img, cfg);
    ASSERT_TRUE(got) << file << ": " << got.status().to_string();
    auto grid = ref().get<int64_t>(key + "_grid");
    EXPECT_EQ(got->grid_t, grid[0]) << file;
    EXPECT_EQ(got->grid_h, grid[1]) << file;
    EXPECT_EQ(got->grid_w, grid[2]) << file;
    std::vector<int64_t> pshape;
    auto want = ref().get<float>(key + "_pixels", &pshape);
    ASSERT_EQ(got->values.size(), want.size()) << file;
    EXPECT_EQ(got->placeholder_tokens(2), pshape[0] / 4);
    auto plan = plan_resize(2, img.height, img.width, 2, 28, cfg.min_tokens, cfg.max_tokens);
    ASSERT_TRUE(plan);
    const bool resized = plan->needs_resize(img.height, img.width);
    Diff d = compare(got->values, want);
    std::printf("  pixels %-22s %lldx%lld -> content %lldx%lld canvas %lldx%lld%s: max abs diff %.7g, "
                "%lld of %zu values differ\n",
                file.c_str(), (long long)img.height, (long long)img.width, (long long)plan->content_h,
                (long long)plan->content_w, (long long)plan->canvas_h, (long long)plan->canvas_w,
                resized ? "" : " (pad only)", d.max_abs, (long long)d.differing, want.size());
    EXPECT_LE(d.max_abs, kOneLevel) << file;
    // The resize reproduces the reference's integer kernel, so every value is bit-exact
    // (none of the fixture images is pad-only: even 130x90 is below the minimum budget
    // and is upscaled; PadOnlyIsExactNormalisation covers that case).
    EXPECT_EQ(d.differing, 0) << file << (resized ? "" : " needs no resize, so it must be exact");
  }
}

TEST(MediaVisionPreprocess, PadOnlyIsExactNormalisation) {
  // 300x200 is above the minimum budget, so it is padded to 308x224 and never resampled:
  // every value is (v - mean*255) / (std*255) of a decoded byte or of the pad 0.
  RgbImage img;
  img.height = 300;
  img.width = 200;
  img.rgb.resize(300 * 200 * 3);
  std::mt19937 rng(3);
  for (auto& v : img.rgb) v = static_cast<uint8_t>(rng());
  auto got = preprocess_image(img);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->grid_h, 22);
  EXPECT_EQ(got->grid_w, 16);
  const float mean[3] = {0.48145466f * 255.0f, 0.4578275f * 255.0f, 0.40821073f * 255.0f};
  const float stdv[3] = {0.26862954f * 255.0f, 0.26130258f * 255.0f, 0.27577711f * 255.0f};
  // Patch 0 is (row 0, col 0), patch 1 is (row 0, col 1), patch 2 is (row 1, col 0) (merge-block order).
  const int64_t dim = 1176;
  for (int64_t p : {0, 1, 2, 3, 4}) {
    const int64_t ph = (p / 4) / 8 * 2 + (p % 4) / 2, pw = (p / 4) % 8 * 2 + (p % 2);
    for (int c = 0; c < 3; ++c)
      for (int t = 0; t < 2; ++t)
        for (int py = 0; py < 14; ++py)
          for (int px = 0; px < 14; ++px) {
            int64_t y = ph * 14 + py, x = pw * 14 + px;
            uint8_t v = img.rgb[(y * 200 + x) * 3 + c];
            float want = (static_cast<float>(v) - mean[c]) / stdv[c];
            ASSERT_EQ(got->values[p * dim + ((c * 2 + t) * 14 + py) * 14 + px], want);
          }
  }
  // The last patch (bottom-right) lies entirely in the padding.
  const float* last = &got->values[(got->num_patches() - 1) * dim];
  EXPECT_EQ(last[0], (0.0f - mean[0]) / stdv[0]);
  EXPECT_EQ(last[dim - 1], (0.0f - mean[2]) / stdv[2]);
}

TEST(MediaVisionPreprocess, VideoMatchesProcessor) {
  std::vector<int64_t> shape;
  auto frames = ref().get<uint8_t>("video_frames", &shape);
  auto indices = ref().get<int64_t>("video_indices");
  const int64_t h = shape[1], w = shape[2];
  std::vector<RgbImage> sampled;
  for (int64_t idx : indices) {
    RgbImage f;
    f.height = h;
    f.width = w;
    f.rgb.assign(frames.begin() + idx * h * w * 3, frames.begin() + (idx + 1) * h * w * 3);
    sampled.push_back(std::move(f));
  }
  VisionPreprocessConfig cfg;
  cfg.max_tokens = kVideoMaxTokens;
  auto got = preprocess_video(sampled, cfg);
  ASSERT_TRUE(got) << got.status().to_string();
  auto grid = ref().get<int64_t>("video_grid");
  EXPECT_EQ(got->grid_t, grid[0]);
  EXPECT_EQ(got->grid_h, grid[1]);
  EXPECT_EQ(got->grid_w, grid[2]);
  auto want = ref().get<float>("video_pixels");
  ASSERT_EQ(got->values.size(), want.size());
  Diff d = compare(got->values, want);
  std::printf("  video %lldx%lld x%zu frames: max abs diff %.7g, %lld of %zu values differ\n", (long long)h,
              (long long)w, sampled.size(), d.max_abs, (long long)d.differing, want.size());
  EXPECT_LE(d.max_abs, kOneLevel);
  EXPECT_EQ(d.differing, 0);
  auto g = video_grid(4, h, w, cfg);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->grid_t * g->grid_h * g->grid_w, got->num_patches());
}

TEST(MediaVisionPreprocess, OddFrameCountRepeatsTheLast) {
  // 112x112 frames are above the minimum budget for 3 or 4 frames, so both get the same
  // canvas; the odd third frame is repeated to fill the second temporal pair.
  RgbImage a = pattern(112, 112, 21), b = pattern(112, 112, 22), c = pattern(112, 112, 23);
  std::vector<RgbImage> three = {a, b, c}, four = {a, b, c, c};
  VisionPreprocessConfig cfg;
  cfg.max_tokens = kVideoMaxTokens;
  auto p3 = preprocess_video(three, cfg);
  auto p4 = preprocess_video(four, cfg);
  ASSERT_TRUE(p3);
  ASSERT_TRUE(p4);
  EXPECT_EQ(p3->grid_t, 2);
  EXPECT_EQ(p3->grid_h, 8);
  EXPECT_EQ(p3->grid_h, p4->grid_h);
  EXPECT_EQ(p3->values, p4->values);
  // Small frames: the budget uses the real frame count (3), as the reference does.
  auto small = video_grid(3, 40, 56, cfg);
  ASSERT_TRUE(small);
  auto canvas = smart_resize(3, 40, 56, 2, 28, 16, kVideoMaxTokens);
  ASSERT_TRUE(canvas);
  EXPECT_EQ(small->grid_h * 14, canvas->first);
  RgbImage other = pattern(112, 56, 24);
  std::vector<RgbImage> mixed = {a, other};
  EXPECT_FALSE(preprocess_video(mixed, cfg));
  EXPECT_FALSE(preprocess_video({}, cfg));
}

// ------------------------------------------------------------ smart_resize

TEST(MediaSmartResize, SpecTable) {
  struct Case {
    int64_t h, w, canvas_h, canvas_w, content_h, content_w, tokens;
  };
  const Case cases[] = {
      {1024, 1024, 1036, 1036, 1024, 1024, 1369}, {1080, 1920, 1092, 1932, 1080, 1920, 2691},
      {3000, 4000, 2156, 2884, 2156, 2874, 7931}, {224, 224, 224, 224, 224, 224, 64},
      {28, 28, 112, 112, 112, 112, 16},
  };
  for (const Case& c : cases) {
    auto canvas = smart_resize(2, c.h, c.w, 2, 28, 16, 8000);
    ASSERT_TRUE(canvas) << c.h << "x" << c.w;
    EXPECT_EQ(canvas->first, c.canvas_h) << c.h << "x" << c.w;
    EXPECT_EQ(canvas->second, c.canvas_w) << c.h << "x" << c.w;
    auto plan = plan_resize(2, c.h, c.w, 2, 28, 16, 8000);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->content_h, c.content_h) << c.h << "x" << c.w;
    EXPECT_EQ(plan->content_w, c.content_w) << c.h << "x" << c.w;
    EXPECT_EQ(canvas->first / 28 * (canvas->second / 28), c.tokens);
    auto grid = image_grid(c.h, c.w);
    ASSERT_TRUE(grid);
    EXPECT_EQ(grid->placeholder_tokens(2), c.tokens);
  }
}

TEST(MediaSmartResize, EdgesAndErrors) {
  // A max_tokens too small for one aligned patch of the frames is the reference's ValueError.
  auto small = smart_resize(64, 1000, 1000, 2, 28, 16, 16);
  ASSERT_FALSE(small);
  EXPECT_NE(small.status().message().find("too small"), std::string::npos) << small.status().message();
  EXPECT_FALSE(smart_resize(2, 0, 10, 2, 28, 16, 8000));
  EXPECT_FALSE(smart_resize(0, 10, 10, 2, 28, 16, 8000));
  EXPECT_FALSE(smart_resize(2, int64_t{1} << 40, 10, 2, 28, 16, 8000));
  // Extreme aspect ratios stay within the budget and aligned.
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 100000}, {100000, 1}, {3, 70000}, {50000, 50000}}) {
    auto c = smart_resize(2, h, w, 2, 28, 16, 8000);
    ASSERT_TRUE(c) << h << "x" << w;
    EXPECT_EQ(c->first % 28, 0);
    EXPECT_EQ(c->second % 28, 0);
    EXPECT_LE(2 * c->first * c->second, 8000 * 1568) << h << "x" << w;
  }
  // A long video budgets the whole clip: 64 frames of 720p fit 240000 tokens after a cut.
  auto v = smart_resize(64, 720, 1280, 2, 28, 16, kVideoMaxTokens);
  ASSERT_TRUE(v);
  EXPECT_LE(64 * v->first * v->second, kVideoMaxTokens * 1568);
}

// ------------------------------------------------------------ resize

TEST(MediaBicubicResize, ConstantStaysConstantAndShapes) {
  RgbImage img;
  img.height = 37;
  img.width = 53;
  img.rgb.assign(37 * 53 * 3, 200);
  for (auto [h, w] : {std::pair<int64_t, int64_t>{10, 20}, {100, 11}, {37, 90}, {5, 53}, {1, 1}}) {
    RgbImage out = resize_bicubic_antialias(img, h, w);
    ASSERT_EQ(out.height, h);
    ASSERT_EQ(out.width, w);
    for (uint8_t v : out.rgb) ASSERT_EQ(v, 200);
  }
  // Weights of each output sample sum to one (in units of 2^-precision, up to rounding).
  for (auto [in, out] : {std::pair<int64_t, int64_t>{400, 158}, {30, 140}, {1000, 3}}) {
    ResampleAxis ax = bicubic_aa_axis(in, out);
    EXPECT_GE(ax.precision, 12);
    for (int64_t o = 0; o < out; ++o) {
      int64_t s = 0;
      for (int64_t j = 0; j < ax.count[o]; ++j) s += ax.weights[o * ax.max_taps + j];
      EXPECT_NEAR(static_cast<double>(s) / (1 << ax.precision), 1.0, 1e-2);
      EXPECT_GE(ax.start[o], 0);
      EXPECT_LE(ax.start[o] + ax.count[o], in);
    }
  }
}

TEST(MediaBicubicResize, BandsOnAPoolGiveTheSameBytes) {
  // Bands of output rows on a pool's threads (each band width-resamples the input rows its taps
  // read) give the bytes of one pass: both axes, height only, width only, bands that split a
  // row's window of taps, more threads than bands.
  const RgbImage img = pattern(517, 389, 7);
  tf::ThreadPool pool(4);
  for (auto [h, w] :
       {std::pair<int64_t, int64_t>{300, 200}, {1000, 389}, {517, 120}, {130, 700}, {140, 389}}) {
    const RgbImage one = resize_bicubic_antialias(img, h, w);
    const RgbImage banded = resize_bicubic_antialias(img, h, w, &pool);
    ASSERT_EQ(banded.height, h);
    ASSERT_EQ(banded.width, w);
    EXPECT_EQ(banded.rgb, one.rgb) << h << "x" << w;
  }
}

// ------------------------------------------------------------ WebP and GIF made here

TEST(MediaImageDecode, WebpLosslessAndLossy) {
  RgbImage src = pattern(23, 31, 1);
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGB(src.rgb.data(), 31, 23, 31 * 3, &out);
  ASSERT_GT(n, 0u);
  std::string webp(reinterpret_cast<char*>(out), n);
  WebPFree(out);
  auto img = decode_image(webp);
  ASSERT_TRUE(img) << img.status().to_string();
  EXPECT_EQ(img->height, 23);
  EXPECT_EQ(img->width, 31);
  EXPECT_EQ(img->rgb, src.rgb);
  // RGBA: alpha is dropped, colour kept (lossless keeps RGB under alpha with `exact`).
  std::vector<uint8_t> rgba(23 * 31 * 4);
  for (int i = 0; i < 23 * 31; ++i) {
    std::memcpy(&rgba[i * 4], &src.rgb[i * 3], 3);
    rgba[i * 4 + 3] = static_cast<uint8_t>(i * 7);
  }
  WebPConfig config;
  ASSERT_TRUE(WebPConfigInit(&config));
  config.lossless = 1;
  config.exact = 1;
  WebPPicture pic;
  ASSERT_TRUE(WebPPictureInit(&pic));
  pic.use_argb = 1;
  pic.width = 31;
  pic.height = 23;
  ASSERT_TRUE(WebPPictureImportRGBA(&pic, rgba.data(), 31 * 4));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  pic.writer = WebPMemoryWrite;
  pic.custom_ptr = &writer;
  ASSERT_TRUE(WebPEncode(&config, &pic));
  WebPPictureFree(&pic);
  std::string webp_alpha(reinterpret_cast<char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  auto alpha = decode_image(webp_alpha);
  ASSERT_TRUE(alpha) << alpha.status().to_string();
  EXPECT_EQ(alpha->rgb, src.rgb);
  // Lossy: the same as libwebp's own RGB decode.
  n = WebPEncodeRGB(src.rgb.data(), 31, 23, 31 * 3, 80, &out);
  ASSERT_GT(n, 0u);
  std::string lossy(reinterpret_cast<char*>(out), n);
  WebPFree(out);
  int w = 0, h = 0;
  uint8_t* direct = WebPDecodeRGB(reinterpret_cast<const uint8_t*>(lossy.data()), lossy.size(), &w, &h);
  ASSERT_TRUE(direct);
  auto decoded = decode_image(lossy);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->rgb, std::vector<uint8_t>(direct, direct + w * h * 3));
  WebPFree(direct);
  // Truncated.
  auto cut = decode_image(std::string_view(lossy).substr(0, lossy.size() / 2));
  EXPECT_FALSE(cut);
}

int gif_write(GifFileType* gif, const GifByteType* data, int n) {
  static_cast<std::string*>(gif->UserData)->append(reinterpret_cast<const char*>(data), n);
  return n;
}

// A GIF with a 4-colour global palette, a 5x4 frame at (1, 2) on a 8x6 screen, optionally
// with a transparent index and interlacing.
std::string make_gif(int transparent, bool interlace, std::vector<uint8_t>* frame_out) {
  std::string bytes;
  int err = 0;
  GifFileType* gif = EGifOpen(&bytes, gif_write, &err);
  EXPECT_TRUE(gif);
  GifColorType colors[4] = {{10, 20, 30}, {200, 0, 0}, {0, 200, 0}, {0, 0, 200}};
  ColorMapObject* map = GifMakeMapObject(4, colors);
  EGifSetGifVersion(gif, true);
  EXPECT_EQ(EGifPutScreenDesc(gif, 8, 6, 2, 0, map), GIF_OK);
  if (transparent >= 0) {
    GraphicsControlBlock gcb{DISPOSAL_UNSPECIFIED, false, 0, transparent};
    GifByteType ext[4];
    size_t len = EGifGCBToExtension(&gcb, ext);
    EXPECT_EQ(EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, static_cast<int>(len), ext), GIF_OK);
  }
  EXPECT_EQ(EGifPutImageDesc(gif, 1, 2, 5, 4, interlace, nullptr), GIF_OK);
  std::vector<uint8_t> frame(5 * 4);
  for (int i = 0; i < 20; ++i) frame[i] = static_cast<uint8_t>((i * 3 + i / 5) % 4);
  // Interlaced GIFs store rows 0, then 2 (pass 3: every 4th from 2), then 1, 3 (pass 4) for height 4.
  std::vector<int> order = interlace ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0, 1, 2, 3};
  for (int r : order) EXPECT_EQ(EGifPutLine(gif, &frame[r * 5], 5), GIF_OK);
  EXPECT_EQ(EGifCloseFile(gif, &err), GIF_OK);
  GifFreeMapObject(map);
  *frame_out = frame;
  return bytes;
}

TEST(MediaImageDecode, GifFirstFrameOnItsScreen) {
  for (int transparent : {-1, 2}) {
    for (bool interlace : {false, true}) {
      std::vector<uint8_t> frame;
      std::string gif = make_gif(transparent, interlace, &frame);
      auto img = decode_image(gif);
      ASSERT_TRUE(img) << img.status().to_string();
      ASSERT_EQ(img->height, 6);
      ASSERT_EQ(img->width, 8);
      const uint8_t colors[4][3] = {{10, 20, 30}, {200, 0, 0}, {0, 200, 0}, {0, 0, 200}};
      const int fill = transparent >= 0 ? transparent : 0;
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 8; ++x) {
          bool inside = y >= 2 && y < 6 && x >= 1 && x < 6;
          int idx = inside ? frame[(y - 2) * 5 + (x - 1)] : fill;
          for (int c = 0; c < 3; ++c)
            ASSERT_EQ(img->rgb[(y * 8 + x) * 3 + c], colors[idx][c])
                << "y " << y << " x " << x << " transparent " << transparent << " interlace " << interlace;
        }
      EXPECT_FALSE(decode_image(std::string_view(gif).substr(0, gif.size() - 6)));
    }
  }
}

// ------------------------------------------------------------ EXIF orientation

std::string encode_jpeg(const RgbImage& img, int quality, const std::string& app1) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &mem, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  if (!app1.empty())
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(app1.data()),
                      static_cast<unsigned>(app1.size()));
  std::vector<JSAMPROW> rows(img.height);
  for (int64_t y = 0; y < img.height; ++y) rows[y] = const_cast<uint8_t*>(&img.rgb[y * img.width * 3]);
  while (cinfo.next_scanline < cinfo.image_height)
    jpeg_write_scanlines(&cinfo, &rows[cinfo.next_scanline], cinfo.image_height - cinfo.next_scanline);
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(mem), size);
  free(mem);
  return out;
}

// "Exif\0\0" + a TIFF header with one IFD0 entry: Orientation (SHORT) = value.
std::string exif_block(int value, bool big_endian) {
  std::string t = "Exif";
  t.push_back('\0');
  t.push_back('\0');
  auto u16 = [&](int v) {
    if (big_endian) {
      t.push_back(char(v >> 8)), t.push_back(char(v & 255));
    } else {
      t.push_back(char(v & 255)), t.push_back(char(v >> 8));
    }
  };
  auto u32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) t.push_back(char(big_endian ? (v >> (24 - 8 * i)) & 255 : (v >> (8 * i)) & 255));
  };
  t += big_endian ? std::string("MM\0*", 4) : std::string("II*\0", 4);
  u32(8);
  u16(1);
  u16(0x0112), u16(3), u32(1), u16(value), u16(0);
  u32(0);
  return t;
}

TEST(MediaExif, OrientationTransposesAsPil) {
  // A 2x3 image with distinct pixels p(y, x) = 10 * y + x; PIL's transposes by hand.
  RgbImage img;
  img.height = 2;
  img.width = 3;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) img.rgb.push_back(static_cast<uint8_t>(10 * y + x));
  auto first_channel = [](const RgbImage& i) {
    std::vector<int> v;
    for (size_t k = 0; k < i.rgb.size(); k += 3) v.push_back(i.rgb[k]);
    return v;
  };
  const std::map<int, std::pair<std::pair<int, int>, std::vector<int>>> want = {
      {1, {{2, 3}, {0, 1, 2, 10, 11, 12}}},  {2, {{2, 3}, {2, 1, 0, 12, 11, 10}}},
      {3, {{2, 3}, {12, 11, 10, 2, 1, 0}}},  {4, {{2, 3}, {10, 11, 12, 0, 1, 2}}},
      {5, {{3, 2}, {0, 10, 1, 11, 2, 12}}},  {6, {{3, 2}, {10, 0, 11, 1, 12, 2}}},
      {7, {{3, 2}, {12, 2, 11, 1, 10, 0}}},  {8, {{3, 2}, {2, 12, 1, 11, 0, 10}}},
  };
  for (const auto& [o, expect] : want) {
    RgbImage out = apply_exif_orientation(img, o);
    EXPECT_EQ(out.height, expect.first.first) << o;
    EXPECT_EQ(out.width, expect.first.second) << o;
    EXPECT_EQ(first_channel(out), expect.second) << "orientation " << o;
  }
  for (bool be : {false, true})
    for (int o = 1; o <= 8; ++o) EXPECT_EQ(exif_orientation(exif_block(o, be)), o);
  EXPECT_EQ(exif_orientation(exif_block(9, false)), 1);
  EXPECT_EQ(exif_orientation("Exif\0\0MM"), 1);
  std::string cut = exif_block(6, false);
  EXPECT_EQ(exif_orientation(cut.substr(0, cut.size() - 8)), 1);
}

TEST(MediaExif, JpegOrientationIsApplied) {
  RgbImage src = pattern(16, 24, 5);
  auto plain = decode_image(encode_jpeg(src, 95, ""));
  ASSERT_TRUE(plain);
  auto rotated = decode_image(encode_jpeg(src, 95, exif_block(6, true)));
  ASSERT_TRUE(rotated) << rotated.status().to_string();
  ASSERT_EQ(rotated->height, 24);
  ASSERT_EQ(rotated->width, 16);
  EXPECT_EQ(rotated->rgb, apply_exif_orientation(*plain, 6).rgb);
}

// ------------------------------------------------------------ data: URLs

TEST(MediaDataUrl, Parses) {
  auto a = parse_data_url("data:image/PNG;base64,aGVsbG8=", 100);
  ASSERT_TRUE(a) << a.status().to_string();
  EXPECT_EQ(a->mime, "image/png");
  EXPECT_EQ(a->bytes, "hello");
  auto b = parse_data_url("DATA:image/jpeg;name=x.jpg;base64,aGVs\nbG8", 100);  // no padding, a newline
  ASSERT_TRUE(b) << b.status().to_string();
  EXPECT_EQ(b->bytes, "hello");
  auto c = parse_data_url("data:application/octet-stream;base64,-_8=", 100);  // URL-safe alphabet
  ASSERT_TRUE(c);
  EXPECT_EQ(c->bytes, "\xfb\xff");
  auto e = parse_data_url("data:image/png;base64,aGVsbG8%3D", 100);  // percent-encoded padding
  ASSERT_TRUE(e) << e.status().to_string();
  EXPECT_EQ(e->bytes, "hello");
  auto d = parse_data_url("data:,a%20b%41", 100);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->mime, "text/plain");
  EXPECT_EQ(d->bytes, "a bA");
}

TEST(MediaDataUrl, Refuses) {
  auto http = parse_data_url("https://example.com/cat.png", 100);
  ASSERT_FALSE(http);
  EXPECT_NE(http.status().message().find("only data: URLs are accepted"), std::string::npos)
      << http.status().message();
  EXPECT_NE(http.status().message().find("https"), std::string::npos);
  EXPECT_FALSE(parse_data_url("/etc/passwd", 100));
  EXPECT_FALSE(parse_data_url("", 100));
  auto bad = parse_data_url("data:image/png;base64,aGV*bG8=", 100);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("'*' at offset 3"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(parse_data_url("data:image/png;base64,aGVsbG8=x", 100));  // data after padding
  EXPECT_FALSE(parse_data_url("data:image/png;base64,a", 100));          // a lone final character
  EXPECT_FALSE(parse_data_url("data:image/png;base64", 100));            // no comma
  EXPECT_FALSE(parse_data_url("data:image/png;base64,", 100));           // empty
  EXPECT_FALSE(parse_data_url("data:,%4", 100));                         // bad escape
  auto big = parse_data_url("data:image/png;base64," + std::string(4000, 'A'), 1000);
  ASSERT_FALSE(big);
  EXPECT_NE(big.status().message().find("1000 bytes"), std::string::npos) << big.status().message();
}

// ------------------------------------------------------------ hostile inputs

uint32_t crc32(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return c ^ 0xffffffffu;
}

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
}

std::string png_header(uint32_t w, uint32_t h) {
  std::string ihdr = "IHDR" + be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + ihdr + be32(crc32(ihdr));
}

TEST(MediaHostile, HugeDimensionsAreRefusedFromTheHeader) {
  auto png = decode_image(png_header(100000, 100000) + std::string(64, '\0'));
  ASSERT_FALSE(png);
  EXPECT_NE(png.status().message().find("100000x100000 pixels is more than the"), std::string::npos)
      << png.status().message();
  // 32-bit sizes whose product overflows 64 bits.
  auto overflow = decode_image(png_header(0xffffffffu, 0xffffffffu) + std::string(64, '\0'));
  ASSERT_FALSE(overflow);
  EXPECT_NE(overflow.status().message().find("4294967295x4294967295 pixels"), std::string::npos)
      << overflow.status().message();
  ImageLimits small;
  small.max_pixels = 100;
  auto fixture = decode_image(read_file(kDir + "/images/f_photo_100x75.jpg"), small);
  ASSERT_FALSE(fixture);
  EXPECT_NE(fixture.status().message().find("75x100 pixels is more than the 100 allowed"), std::string::npos)
      << fixture.status().message();
  // A GIF screen of 65535x65535 and a WebP (VP8L) header of 16384x16384.
  std::string gif = std::string("GIF89a\xff\xff\xff\xff\x00\x00\x00", 13) + std::string(32, '\0');
  auto huge_gif = decode_image(gif);
  ASSERT_FALSE(huge_gif);
  EXPECT_NE(huge_gif.status().message().find("65535x65535 pixels"), std::string::npos) << huge_gif.status().message();
  // VP8L: signature 0x2f, then 14-bit width-1 and height-1 (little-endian bit order).
  const uint32_t bits = (16383u) | (16383u << 14);
  std::string vp8l = std::string("\x2f", 1) + std::string{char(bits & 255), char((bits >> 8) & 255),
                                                          char((bits >> 16) & 255), char((bits >> 24) & 255)};
  vp8l += std::string(16, '\0');
  std::string webp = "RIFF" + std::string(4, '\0') + "WEBPVP8L" + std::string(4, '\0') + vp8l;
  const uint32_t riff = static_cast<uint32_t>(webp.size() - 8), chunk = static_cast<uint32_t>(vp8l.size());
  for (int i = 0; i < 4; ++i) webp[4 + i] = char((riff >> (8 * i)) & 255), webp[16 + i] = char((chunk >> (8 * i)) & 255);
  auto huge_webp = decode_image(webp);
  ASSERT_FALSE(huge_webp);
  EXPECT_NE(huge_webp.status().message().find("16384x16384 pixels"), std::string::npos)
      << huge_webp.status().message();
  // A JPEG whose SOF claims 60000x60000.
  std::string jpeg = encode_jpeg(pattern(8, 8, 2), 90, "");
  size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = char(0xea), jpeg[sof + 6] = char(0x60), jpeg[sof + 7] = char(0xea), jpeg[sof + 8] = char(0x60);
  auto big = decode_image(jpeg);
  ASSERT_FALSE(big);
  EXPECT_NE(big.status().message().find("60000x60000"), std::string::npos) << big.status().message();
}

TEST(MediaHostile, TruncatedAndGarbage) {
  for (const char* name : {"b_pad_130x90.png", "f_photo_100x75.jpg"}) {
    std::string full = read_file(kDir + "/images/" + name);
    for (size_t n : {size_t{1}, size_t{4}, size_t{8}, size_t{20}, size_t{40}, full.size() / 3, full.size() / 2,
                     full.size() - 20}) {
      auto r = decode_image(std::string_view(full).substr(0, n));
      EXPECT_FALSE(r) << name << " cut at " << n;
    }
    auto cut = decode_image(std::string_view(full).substr(0, full.size() / 2));
    ASSERT_FALSE(cut);
    EXPECT_NE(cut.status().message().find("truncated"), std::string::npos) << cut.status().message();
  }
  // Random bytes behind each signature, and flipped bytes in real files: errors or images, never a crash.
  std::mt19937 rng(11);
  const std::string sigs[] = {std::string("\x89PNG\r\n\x1a\n", 8), "\xff\xd8\xff", "RIFF\x10\0\0\0WEBP", "GIF89a", ""};
  for (const std::string& sig : sigs) {
    for (int k = 0; k < 50; ++k) {
      std::string s = sig;
      for (int i = 0; i < 200; ++i) s.push_back(static_cast<char>(rng()));
      (void)decode_image(s);
    }
  }
  std::vector<std::string> seeds = {read_file(kDir + "/images/b_pad_130x90.png"),
                                    read_file(kDir + "/images/f_photo_100x75.jpg")};
  std::vector<uint8_t> unused;
  seeds.push_back(make_gif(1, true, &unused));
  {
    RgbImage src = pattern(20, 20, 9);
    uint8_t* out = nullptr;
    size_t n = WebPEncodeRGB(src.rgb.data(), 20, 20, 60, 50, &out);
    seeds.emplace_back(reinterpret_cast<char*>(out), n);
    WebPFree(out);
  }
  int decoded = 0, refused = 0;
  for (const std::string& seed : seeds) {
    for (int k = 0; k < 150; ++k) {
      std::string s = seed;
      for (int f = 0; f < 1 + k % 8; ++f) s[rng() % s.size()] = static_cast<char>(rng());
      auto r = decode_image(s);
      if (r) {
        ++decoded;
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->height * r->width * 3));
      } else {
        ++refused;
        EXPECT_FALSE(r.status().message().empty());
      }
    }
  }
  std::printf("  mutated files: %d decoded, %d refused\n", decoded, refused);
  auto unknown = decode_image("BM\x10\x00\x00\x00");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("BMP is not supported"), std::string::npos);
  EXPECT_FALSE(decode_image("hello world"));
  EXPECT_FALSE(decode_image(""));
}

// ------------------------------------------------------------ speed

TEST(MediaSpeed, TwelveMegapixelJpeg) {
  // A 4000x3000 photo-like JPEG: decode + preprocess (resize to 2156x2874 content) on one core.
  RgbImage src;
  src.height = 3000;
  src.width = 4000;
  src.rgb.resize(3000 * 4000 * 3);
  for (int64_t y = 0; y < 3000; ++y)
    for (int64_t x = 0; x < 4000; ++x)
      for (int c = 0; c < 3; ++c)
        src.rgb[(y * 4000 + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) / 7 + y / 5 + ((x * y) & 15)) & 255);
  const std::string jpeg = encode_jpeg(src, 90, "");
  auto t0 = std::chrono::steady_clock::now();
  auto img = decode_image(jpeg);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(img);
  const double cpu0 =
      tf::test::cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);  // all threads: it runs on the media pool
  auto patches = preprocess_image(*img);
  const double pre_cpu_s = tf::test::cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(patches);
  EXPECT_EQ(patches->grid_h, 2156 / 14);
  EXPECT_EQ(patches->grid_w, 2884 / 14);
  const double decode_s = std::chrono::duration<double>(t1 - t0).count();
  const double pre_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("  4000x3000 JPEG: decode %.3f s, preprocess %.3f s (%.3f s CPU, %lld patches)\n", decode_s,
              pre_s, pre_cpu_s, static_cast<long long>(patches->num_patches()));
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  // ~0.7 s of CPU (2 threads), loaded machine or not; a resize many times slower would pass 4 s.
  EXPECT_LT(pre_cpu_s, 4.0);
#endif
}

}  // namespace
}  // namespace tf::media
