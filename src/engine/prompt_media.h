// PromptMedia: a chat prompt's images and videos, from the messages' data URLs to
// the vision tower's input, and the prompt tokens with their placeholders expanded.
//
// The chat template writes one <|image|> per image and <|begin_of_video|><|video|>
// <|end_of_video|> per video (in message order). render_chat_media decodes and
// preprocesses each part (src/media), then expands the placeholders as transformers'
// Glm5NextProcessor does: an image's <|image|> becomes one <|image|> per feature
// (grid / merge²); a video's <|video|> becomes, per temporal group of two frames,
// <|begin_of_image|> <|image|>×n <|end_of_image|> "{t:.1f} seconds". The features
// then fill the <|image|> positions in prompt order (images and videos alike, as the
// reference's masked_scatter does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "media/url_fetch.h"
#include "engine/engine_api.h"
#include "media/vision_preprocess.h"

namespace tf::engine {

struct PromptMediaItem {
  bool video = false;
  media::VisionPatches patches;  // grid (t, h, w) in patches and the patch values
};

struct PromptMedia {
  std::vector<PromptMediaItem> items;  // in prompt order
  // Prompt positions of the placeholder tokens, ascending: feature row k (items'
  // features concatenated in order) is the input embedding at positions[k].
  std::vector<int64_t> positions;
  // Prompt reuse: what stands for each placeholder when prompts are matched (the same order
  // as positions): a negative value (never a token id) from a hash of its item's pixels and
  // its row in the item, so two prompts match through a placeholder only with the same picture.
  std::vector<int32_t> reuse_keys;
};

// The special token ids the expansion works with (the checkpoint's config).
struct MediaTokenIds {
  int32_t image = 0, video = 0, image_start = 0, image_end = 0, video_start = 0, video_end = 0;
};

struct MediaLimits {
  size_t max_url_bytes = size_t{64} << 20;  // one data URL, before base64 decoding
  int max_images = 50;                      // images in one request (as the reference deployment)
  int max_videos = 4;                       // videos in one request
  int64_t max_image_tokens = 8000;          // per image (the processor's default)
  int64_t max_video_tokens = 240000;        // per video (the processor's default)
  // Decoded frames of a video, and the patches of all of a request's media together
  // (f32: 1176 floats per patch, 4 patches per token): memory is refused up front, not
  // run out of. 512 MiB is ~28k tokens (an 8000-token image takes 150 MB).
  int64_t max_pixel_bytes = int64_t{512} << 20;
  // VISION_URLS: https:// URLs are fetched (media/url_fetch.h), at most these many bytes each.
  bool fetch_urls = false;
  media::UrlFetchOptions fetch;
  size_t max_fetched_image_bytes = size_t{10} << 20;
  size_t max_fetched_video_bytes = size_t{64} << 20;
};

// The messages' image and video parts in order: {video?, url}. Parts as the server
// normalizes them: {"type": "image_url", "image_url": {"url": ...}} and the same for
// video_url. A part without a URL string is kInvalidArgument naming it.
struct MediaPart {
  bool video = false;
  std::string url;
  std::string where;  // "messages[2].content[1]", for errors
};
Expected<std::vector<MediaPart>> collect_media_parts(const nlohmann::json& messages);

// Decodes and preprocesses every part (errors name the part) and expands the
// placeholders of `tokens` (the rendered prompt). `encode_text` tokenizes a
// video group's timestamp text. The placeholder count must match the parts.
Expected<RenderedPrompt> expand_prompt_media(std::vector<int32_t> tokens, const std::vector<MediaPart>& parts,
                                             const MediaTokenIds& ids, const MediaLimits& limits,
                                             const std::function<Expected<std::vector<int32_t>>(const std::string&)>&
                                                 encode_text);

// A copy of `m` whose items from `first` on keep their grids but not their patch values (the
// engine's, once the vision tower has encoded them: a long video's patches are ~0.5 GB).
std::shared_ptr<const PromptMedia> without_patches_from(const PromptMedia& m, size_t first);

}  // namespace tf::engine
