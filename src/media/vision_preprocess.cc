// preprocess_image / preprocess_video (see vision_preprocess.h). Padding,
// normalisation and patchify are one pass: each patch value is read from the
// (resized) frame or is the pad value 0, then mapped through a per-channel
// table of the float32 normalisation (x - mean*255) / (std*255), computed
// exactly as the reference computes it. Resizes (a video's frames, or one image's
// bands of rows) and the patchify's rows of merge blocks run on a pool of its own
// (not the CPU backend's: an HTTP thread's picture never waits on a model step, nor
// a step on it); every value is computed as on one thread, so the bytes are the same.
#include "media/vision_preprocess.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "core/thread_pool.h"

namespace tf::media {
namespace {

// CLIP's mean and std, times 255 in float32 (the reference fuses the 1/255 rescale into them).
constexpr float kMean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
constexpr float kStd[3] = {0.26862954f, 0.26130258f, 0.27577711f};

struct NormTable {
  std::array<std::array<float, 256>, 3> value;
  NormTable() {
    for (int c = 0; c < 3; ++c) {
      const float mean = kMean[c] * 255.0f, stdv = kStd[c] * 255.0f;
      for (int v = 0; v < 256; ++v) value[c][v] = (static_cast<float>(v) - mean) / stdv;
    }
  }
};
const NormTable& norm_table() {
  static const NormTable table;
  return table;
}

// At most 8 threads: a 60-frame 1080p video's resizes took ~2 s on one core.
ThreadPool& media_pool() {
  static ThreadPool pool(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

Status check_config(const VisionPreprocessConfig& cfg) {
  if (cfg.patch_size < 1 || cfg.patch_size > 64 || cfg.merge_size < 1 || cfg.merge_size > 16 ||
      cfg.temporal_patch_size < 1 || cfg.temporal_patch_size > 16)
    return invalid_argument("vision preprocess: patch " + std::to_string(cfg.patch_size) + ", merge " +
                            std::to_string(cfg.merge_size) + ", temporal " + std::to_string(cfg.temporal_patch_size) +
                            " is not a valid configuration");
  return Status::ok();
}

Status check_image(const RgbImage& img, const char* what) {
  if (img.height < 1 || img.width < 1 ||
      img.rgb.size() != static_cast<size_t>(img.height) * static_cast<size_t>(img.width) * 3)
    return invalid_argument(std::string("vision preprocess: ") + what + " has size " + std::to_string(img.height) +
                            "x" + std::to_string(img.width) + " and " + std::to_string(img.rgb.size()) +
                            " bytes (want height*width*3 > 0)");
  return Status::ok();
}

// frames[t] for t in [0, grid_t * temporal): already at content size; the last repeats past the end.
VisionPatches patchify(const std::vector<const RgbImage*>& frames, int64_t grid_t, const ResizePlan& plan,
                       const VisionPreprocessConfig& cfg) {
  const int64_t ps = cfg.patch_size, m = cfg.merge_size, tp = cfg.temporal_patch_size;
  VisionPatches out;
  out.grid_t = grid_t;
  out.grid_h = plan.canvas_h / ps;
  out.grid_w = plan.canvas_w / ps;
  const int64_t dim = 3 * tp * ps * ps;
  out.values.resize(static_cast<size_t>(out.num_patches() * dim));
  const NormTable& norm = norm_table();
  const int64_t ch = plan.content_h, cw = plan.content_w;
  // Rows of merge blocks (t, bh), each a contiguous run of m * grid_w patches of the output.
  const int64_t block_rows = out.grid_h / m, row_floats = m * out.grid_w * dim;
  media_pool().parallel_for(grid_t * block_rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / block_rows, bh = r % block_rows;
      float* dst = out.values.data() + r * row_floats;
      for (int64_t bw = 0; bw < out.grid_w / m; ++bw) {
        for (int64_t mh = 0; mh < m; ++mh) {
          for (int64_t mw = 0; mw < m; ++mw) {
            const int64_t y0 = (bh * m + mh) * ps, x0 = (bw * m + mw) * ps;
            const int64_t nx = std::clamp<int64_t>(cw - x0, 0, ps);  // columns inside the content
            for (int64_t c = 0; c < 3; ++c) {
              const auto& lut = norm.value[static_cast<size_t>(c)];
              const float pad = lut[0];
              const RgbImage* prev = nullptr;
              for (int64_t tt = 0; tt < tp; ++tt) {
                const RgbImage* f = frames[std::min(static_cast<size_t>(t * tp + tt), frames.size() - 1)];
                if (f == prev) {  // a repeated frame (an image, or the odd last one): copy the slice
                  std::memcpy(dst, dst - ps * ps, sizeof(float) * static_cast<size_t>(ps * ps));
                  dst += ps * ps;
                  continue;
                }
                prev = f;
                for (int64_t py = 0; py < ps; ++py, dst += ps) {
                  const int64_t y = y0 + py;
                  if (y >= ch || nx == 0) {
                    std::fill(dst, dst + ps, pad);
                    continue;
                  }
                  const uint8_t* row = f->rgb.data() + (y * cw + x0) * 3 + c;
                  for (int64_t px = 0; px < nx; ++px) dst[px] = lut[row[3 * px]];
                  for (int64_t px = nx; px < ps; ++px) dst[px] = pad;
                }
              }
            }
          }
        }
      }
    }
  });
  return out;
}

// Resizes (when needed) and patchifies frames of one size; `count` frames are real,
// `repeat_to` is how many the patchify reads (the last repeated).
Expected<VisionPatches> run(std::span<const RgbImage> frames, int64_t num_frames_for_budget, int64_t repeat_to,
                            const VisionPreprocessConfig& cfg) {
  TF_RETURN_IF_ERROR(check_config(cfg));
  const int64_t h = frames[0].height, w = frames[0].width;
  const int factor = cfg.patch_size * cfg.merge_size;
  TF_ASSIGN_OR_RETURN(ResizePlan plan, plan_resize(num_frames_for_budget, h, w, cfg.temporal_patch_size, factor,
                                                   cfg.min_tokens, cfg.max_tokens));
  std::vector<RgbImage> resized;
  std::vector<const RgbImage*> refs;
  if (plan.needs_resize(h, w)) {
    resized.resize(frames.size());
    if (frames.size() == 1) {  // one picture: its bands of rows across the pool
      resized[0] = resize_bicubic_antialias(frames[0], plan.content_h, plan.content_w, &media_pool());
    } else {  // frames across the pool, each on one thread
      media_pool().parallel_for(static_cast<int64_t>(frames.size()), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          resized[static_cast<size_t>(i)] =
              resize_bicubic_antialias(frames[static_cast<size_t>(i)], plan.content_h, plan.content_w);
      });
    }
    for (const RgbImage& f : resized) refs.push_back(&f);
  } else {
    for (const RgbImage& f : frames) refs.push_back(&f);
  }
  const int64_t tp = cfg.temporal_patch_size;
  const int64_t grid_t = (repeat_to + tp - 1) / tp;
  return patchify(refs, grid_t, plan, cfg);
}

// run() with allocation failure turned into an error (a huge video budget can ask for gigabytes).
Expected<VisionPatches> run_checked(std::span<const RgbImage> frames, int64_t num_frames_for_budget,
                                    int64_t repeat_to, const VisionPreprocessConfig& cfg) {
  try {
    return run(frames, num_frames_for_budget, repeat_to, cfg);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("vision preprocess: out of memory for " + std::to_string(frames.size()) + " frame(s) of " +
                              std::to_string(frames[0].height) + "x" + std::to_string(frames[0].width));
  }
}

}  // namespace

Expected<VisionPatches> preprocess_image(const RgbImage& img, const VisionPreprocessConfig& cfg) {
  TF_RETURN_IF_ERROR(check_image(img, "image"));
  TF_RETURN_IF_ERROR(check_config(cfg));
  // The reference budgets an image as temporal_patch_size frames and repeats it to fill one group.
  return run_checked(std::span<const RgbImage>(&img, 1), cfg.temporal_patch_size, cfg.temporal_patch_size, cfg);
}

Expected<VisionPatches> preprocess_video(std::span<const RgbImage> frames, const VisionPreprocessConfig& cfg) {
  if (frames.empty()) return invalid_argument("vision preprocess: a video needs at least one frame");
  for (size_t i = 0; i < frames.size(); ++i) {
    TF_RETURN_IF_ERROR(check_image(frames[i], "a video frame"));
    if (frames[i].height != frames[0].height || frames[i].width != frames[0].width)
      return invalid_argument("vision preprocess: video frame " + std::to_string(i) + " is " +
                              std::to_string(frames[i].height) + "x" + std::to_string(frames[i].width) +
                              " but frame 0 is " + std::to_string(frames[0].height) + "x" +
                              std::to_string(frames[0].width));
  }
  const auto n = static_cast<int64_t>(frames.size());
  return run_checked(frames, n, n, cfg);
}

Expected<VisionPatches> video_grid(int64_t num_frames, int64_t height, int64_t width,
                                   const VisionPreprocessConfig& cfg) {
  TF_RETURN_IF_ERROR(check_config(cfg));
  TF_ASSIGN_OR_RETURN(ResizePlan plan, plan_resize(num_frames, height, width, cfg.temporal_patch_size,
                                                   cfg.patch_size * cfg.merge_size, cfg.min_tokens, cfg.max_tokens));
  VisionPatches grid;
  grid.grid_t = (num_frames + cfg.temporal_patch_size - 1) / cfg.temporal_patch_size;
  grid.grid_h = plan.canvas_h / cfg.patch_size;
  grid.grid_w = plan.canvas_w / cfg.patch_size;
  return grid;
}

Expected<VisionPatches> image_grid(int64_t height, int64_t width, const VisionPreprocessConfig& cfg) {
  return video_grid(cfg.temporal_patch_size, height, width, cfg);
}

}  // namespace tf::media
