#include "engine/prompt_media.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <utility>

#include "media/data_url.h"
#include "media/image_decode.h"
#include "media/video_decode.h"
#include "media/video_sampling.h"

namespace tf::engine {

namespace {

// A 64-bit hash of an item's patch values and grid (prompt reuse's placeholder keys): words
// mixed eight bytes at a time (a multiply-xorshift per word), fast enough for 512 MiB.
uint64_t pixels_hash(const PromptMediaItem& item) {
  const media::VisionPatches& v = item.patches;
  auto mix = [](uint64_t h, uint64_t w) {
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
  };
  uint64_t h = mix(mix(mix(item.video ? 1 : 2, static_cast<uint64_t>(v.grid_t)), static_cast<uint64_t>(v.grid_h)),
                   static_cast<uint64_t>(v.grid_w));
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.values.data());
  const size_t n = v.values.size() * sizeof(float);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = mix(h, w);
  }
  for (; i < n; ++i) h = mix(h, bytes[i]);
  return h;
}

// The key of feature row `row` of an item with hash `h`: negative, so never a token id.
int32_t placeholder_key(uint64_t h, int64_t row) {
  uint64_t x = h ^ (static_cast<uint64_t>(row) * 0x94D049BB133111EBull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return -1 - static_cast<int32_t>(x & 0x7FFFFFFFu);
}

constexpr int kMergeSize = 2;  // spatial merge: one feature per 2x2 patches

std::string url_of(const nlohmann::json& part, const char* key) {
  auto it = part.find(key);
  if (it == part.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto u = it->find("url");
    if (u != it->end() && u->is_string()) return u->get<std::string>();
  }
  return {};
}

// "0.0 seconds": Python's f"{t:.1f}" (both round the binary value correctly).
std::string seconds_text(double t) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f seconds", t);
  return buf;
}

struct Decoded {
  PromptMediaItem item;
  std::vector<double> group_seconds;  // videos: the timestamp of each temporal group
};

// Refuses media whose patches would take the request past its pixel budget, before
// they are made (a long video's patches at the processor's budget are ~4.5 GB).
Status check_patch_bytes(const Expected<media::VisionPatches>& grid, int64_t budget, const std::string& where) {
  if (!grid) return grid.status().with_context(where);
  const int64_t patches = grid->grid_t * grid->grid_h * grid->grid_w;
  const int64_t bytes = patches * 3 * 2 * 14 * 14 * static_cast<int64_t>(sizeof(float));
  if (bytes > budget)
  {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(std::max<int64_t>(budget, 0)) / 1048576.0);
    return invalid_argument(where + ": the request's images and videos need more than the " + mib +
                            " MiB of pixel data allowed; send fewer or smaller ones");
  }
  return Status::ok();
}

// The part's media bytes: a data: URL's payload, or with VISION_URLS an https:// URL's body.
Expected<std::string> part_bytes(const MediaPart& part, const MediaLimits& limits) {
  if (limits.fetch_urls && media::is_https_url(part.url)) {
    media::UrlFetchOptions o = limits.fetch;
    o.max_bytes = part.video ? limits.max_fetched_video_bytes : limits.max_fetched_image_bytes;
    auto fetched = media::fetch_media_url(part.url, o);
    if (!fetched) return fetched.status().with_context(part.where);
    return std::move(fetched->bytes);
  }
  auto url = media::parse_data_url(part.url, limits.max_url_bytes);
  if (!url) {
    const bool remote = media::is_https_url(part.url) || part.url.rfind("http://", 0) == 0;
    const std::string hint = !remote          ? ""
                             : limits.fetch_urls ? " (only https:// URLs are fetched)"
                                                 : " (VISION_URLS=1 lets the server fetch https:// URLs)";
    const Status s = url.status().with_context(part.where);
    return Status(s.code(), s.message() + hint);
  }
  return std::move(url->bytes);
}

// Every part's bytes, in order; the https:// ones fetched a few at a time in parallel
// (their waits overlap), the data: URLs decoded here.
std::vector<Expected<std::string>> all_part_bytes(const std::vector<MediaPart>& parts, const MediaLimits& limits) {
  constexpr size_t kParallelFetches = 8;
  std::vector<Expected<std::string>> out(parts.size(), Expected<std::string>(std::string()));
  std::vector<std::pair<size_t, std::future<Expected<std::string>>>> running;
  auto finish = [&] {
    for (auto& [k, f] : running) out[k] = f.get();
    running.clear();
  };
  for (size_t k = 0; k < parts.size(); ++k) {
    if (limits.fetch_urls && media::is_https_url(parts[k].url)) {
      running.emplace_back(k, std::async(std::launch::async, part_bytes, std::cref(parts[k]), std::cref(limits)));
      if (running.size() == kParallelFetches) finish();
    } else {
      out[k] = part_bytes(parts[k], limits);
    }
  }
  finish();
  return out;
}

Expected<Decoded> decode_part(const MediaPart& part, const Expected<std::string>& bytes, const MediaLimits& limits,
                              int64_t budget) {
  if (!bytes) return bytes.status();
  Decoded d;
  d.item.video = part.video;
  if (!part.video) {
    auto img = media::decode_image(*bytes);
    if (!img) return img.status().with_context(part.where);
    media::VisionPreprocessConfig cfg;
    cfg.max_tokens = limits.max_image_tokens;
    TF_RETURN_IF_ERROR(check_patch_bytes(media::image_grid(img->height, img->width, cfg), budget, part.where));
    auto patches = media::preprocess_image(*img, cfg);
    if (!patches) return patches.status().with_context(part.where);
    d.item.patches = std::move(*patches);
    return d;
  }
  media::VideoLimits video_limits;
  video_limits.max_output_bytes = limits.max_pixel_bytes;
  auto video = media::decode_video(*bytes, video_limits);
  if (!video) return video.status().with_context(part.where);
  if (video->frames.empty()) return invalid_argument(part.where + ": the video has no frames");
  media::VisionPreprocessConfig cfg;
  cfg.max_tokens = limits.max_video_tokens;
  const media::RgbImage& first = video->frames.front();
  TF_RETURN_IF_ERROR(check_patch_bytes(
      media::video_grid(static_cast<int64_t>(video->frames.size()), first.height, first.width, cfg), budget, part.where));
  auto patches = media::preprocess_video(video->frames, cfg);
  if (!patches) return patches.status().with_context(part.where);
  d.item.patches = std::move(*patches);
  d.group_seconds = media::group_timestamps(video->indices, video->fps, d.item.patches.grid_t);
  return d;
}

}  // namespace

Expected<std::vector<MediaPart>> collect_media_parts(const nlohmann::json& messages) {
  std::vector<MediaPart> parts;
  if (!messages.is_array()) return parts;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (!m.is_object()) continue;
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      const nlohmann::json& part = (*content)[j];
      if (!part.is_object()) continue;
      auto type = part.find("type");
      if (type == part.end() || !type->is_string()) continue;
      const std::string t = type->get<std::string>();
      if (t != "image_url" && t != "video_url" && t != "image" && t != "video") continue;
      MediaPart p;
      p.video = t == "video_url" || t == "video";
      p.where = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      p.url = url_of(part, p.video ? "video_url" : "image_url");
      if (p.url.empty()) p.url = url_of(part, p.video ? "video" : "image");
      if (p.url.empty()) return invalid_argument(p.where + ": the " + t + " part has no URL");
      parts.push_back(std::move(p));
    }
  }
  return parts;
}

Expected<RenderedPrompt> expand_prompt_media(std::vector<int32_t> tokens, const std::vector<MediaPart>& parts,
                                             const MediaTokenIds& ids, const MediaLimits& limits,
                                             const std::function<Expected<std::vector<int32_t>>(const std::string&)>&
                                                 encode_text) {
  RenderedPrompt out;
  if (parts.empty()) {
    out.tokens = std::move(tokens);
    return out;
  }
  const auto videos = std::count_if(parts.begin(), parts.end(), [](const MediaPart& p) { return p.video; });
  const auto images = static_cast<int64_t>(parts.size()) - videos;
  if (images > limits.max_images || videos > limits.max_videos)
    return invalid_argument("a request may carry at most " + std::to_string(limits.max_images) + " images and " +
                            std::to_string(limits.max_videos) + " videos, this one has " + std::to_string(images) +
                            " and " + std::to_string(videos));
  // The template's placeholders, in order: <|image|> outside a video span is an image,
  // <|video|> a video.
  std::vector<bool> placeholder_is_video;
  int64_t open_videos = 0;
  for (int32_t t : tokens) {
    if (t == ids.video_start) ++open_videos;
    if (t == ids.video_end) --open_videos;
    if (t == ids.video) placeholder_is_video.push_back(true);
    else if (t == ids.image && open_videos <= 0) placeholder_is_video.push_back(false);
  }
  if (placeholder_is_video.size() != parts.size())
    return invalid_argument("the chat template wrote " + std::to_string(placeholder_is_video.size()) +
                            " image/video placeholders for " + std::to_string(parts.size()) +
                            " image and video parts (a message's text may not contain <|image|> or <|video|>)");
  for (size_t k = 0; k < parts.size(); ++k)
    if (placeholder_is_video[k] != parts[k].video)
      return invalid_argument(parts[k].where + ": the chat template put a " +
                              (placeholder_is_video[k] ? "video" : "image") + " placeholder where this " +
                              (parts[k].video ? "video" : "image") + " is");

  auto media = std::make_shared<PromptMedia>();
  std::vector<std::vector<double>> seconds;
  int64_t pixel_bytes = 0;
  const std::vector<Expected<std::string>> bytes = all_part_bytes(parts, limits);
  for (size_t k = 0; k < parts.size(); ++k) {
    const MediaPart& p = parts[k];
    auto d = decode_part(p, bytes[k], limits, limits.max_pixel_bytes - pixel_bytes);
    if (!d) return d.status();
    pixel_bytes += static_cast<int64_t>(d->item.patches.values.size() * sizeof(float));
    media->items.push_back(std::move(d->item));
    seconds.push_back(std::move(d->group_seconds));
  }

  std::vector<int32_t>& expanded = out.tokens;
  expanded.reserve(tokens.size());
  size_t next = 0;
  open_videos = 0;
  uint64_t item_hash = 0;
  int64_t item_row = 0;
  auto put_features = [&](int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      media->positions.push_back(static_cast<int64_t>(expanded.size()));
      media->reuse_keys.push_back(placeholder_key(item_hash, item_row++));
      expanded.push_back(ids.image);
    }
  };
  for (int32_t t : tokens) {
    if (t == ids.video_start) ++open_videos;
    if (t == ids.video_end) --open_videos;
    const bool image = t == ids.image && open_videos <= 0;
    if (!image && t != ids.video) {
      expanded.push_back(t);
      continue;
    }
    const PromptMediaItem& item = media->items[next];
    const media::VisionPatches& v = item.patches;
    item_hash = pixels_hash(item);
    item_row = 0;
    const int64_t per_group = v.grid_h * v.grid_w / (kMergeSize * kMergeSize);
    if (image) {
      put_features(per_group * v.grid_t);
    } else {
      for (int64_t g = 0; g < v.grid_t; ++g) {
        expanded.push_back(ids.image_start);
        put_features(per_group);
        expanded.push_back(ids.image_end);
        const std::vector<double>& s = seconds[next];
        const double at = s.empty() ? 0.0 : s[std::min<size_t>(static_cast<size_t>(g), s.size() - 1)];
        auto text = encode_text(seconds_text(at));
        if (!text) return text.status().with_context("a video's timestamp text");
        expanded.insert(expanded.end(), text->begin(), text->end());
      }
    }
    ++next;
  }
  out.media = std::move(media);
  return out;
}

std::shared_ptr<const PromptMedia> without_patches_from(const PromptMedia& m, size_t first) {
  auto out = std::make_shared<PromptMedia>();
  out->positions = m.positions;
  out->reuse_keys = m.reuse_keys;
  out->items.reserve(m.items.size());
  for (size_t k = 0; k < m.items.size(); ++k) {
    const PromptMediaItem& item = m.items[k];
    if (k < first) {
      out->items.push_back(item);
      continue;
    }
    PromptMediaItem& copy = out->items.emplace_back();
    copy.video = item.video;
    copy.patches.grid_t = item.patches.grid_t;
    copy.patches.grid_h = item.patches.grid_h;
    copy.patches.grid_w = item.patches.grid_w;
  }
  return out;
}

}  // namespace tf::engine
