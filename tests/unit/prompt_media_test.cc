// A chat prompt's images and videos (engine/prompt_media.h): the parts in message order,
// the placeholders expanded to one token per feature (as transformers' processor does),
// and clear errors for what cannot be served.
#include <gtest/gtest.h>

#include <chrono>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data_url_test_util.h"
#include "engine/prompt_media.h"

namespace tf::engine {
namespace {

constexpr MediaTokenIds kIds{/*image=*/380, /*video=*/381, /*image_start=*/376, /*image_end=*/377,
                             /*video_start=*/378, /*video_end=*/379};

std::string png_url(const char* name) {
  return test::data_url_of(std::filesystem::path(TF_TEST_DATA_DIR) / "model" / "tiny-vision" / "images" / name,
                           "image/png");
}

nlohmann::json image_part(const std::string& url) {
  return {{"type", "image_url"}, {"image_url", {{"url", url}}}};
}

Expected<std::vector<int32_t>> no_text(const std::string&) { return std::vector<int32_t>{}; }

TEST(PromptMedia, CollectsPartsInMessageOrder) {
  nlohmann::json messages = nlohmann::json::array();
  messages.push_back({{"role", "system"}, {"content", "be brief"}});
  messages.push_back({{"role", "user"},
                      {"content", {{{"type", "text"}, {"text", "a"}}, image_part("data:x"),
                                   {{"type", "video_url"}, {"video_url", {{"url", "data:v"}}}}}}});
  messages.push_back({{"role", "user"}, {"content", {image_part("data:y")}}});
  auto parts = collect_media_parts(messages);
  ASSERT_TRUE(parts.has_value()) << parts.status().to_string();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_FALSE((*parts)[0].video);
  EXPECT_EQ((*parts)[0].url, "data:x");
  EXPECT_EQ((*parts)[0].where, "messages[1].content[1]");
  EXPECT_TRUE((*parts)[1].video);
  EXPECT_EQ((*parts)[2].where, "messages[2].content[0]");

  messages[2]["content"][0] = {{"type", "image_url"}};
  auto bad = collect_media_parts(messages);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("messages[2].content[0]"), std::string::npos) << bad.status().to_string();
}

TEST(PromptMedia, ImagePlaceholdersExpandToOneTokenPerFeature) {
  // b_pad_130x90.png: grid (1, 10, 8) -> 20 features; a_tiny_20x30.png: (1, 8, 10) -> 20.
  std::vector<MediaPart> parts = {{false, png_url("b_pad_130x90.png"), "messages[0].content[0]"},
                                  {false, png_url("a_tiny_20x30.png"), "messages[0].content[1]"}};
  const std::vector<int32_t> tokens = {1, kIds.image_start, kIds.image, kIds.image_end, 2,
                                       kIds.image_start, kIds.image, kIds.image_end, 3};
  auto out = expand_prompt_media(tokens, parts, kIds, MediaLimits{}, no_text);
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  ASSERT_NE(out->media, nullptr);
  ASSERT_EQ(out->media->items.size(), 2u);
  EXPECT_EQ(out->media->items[0].patches.grid_h, 10);
  EXPECT_EQ(out->media->items[0].patches.grid_w, 8);
  EXPECT_EQ(out->tokens.size(), tokens.size() - 2 + 40);
  ASSERT_EQ(out->media->positions.size(), 40u);
  // Positions: 2..21 for the first image, then after end, text, start: 25..44.
  for (int64_t k = 0; k < 20; ++k) EXPECT_EQ(out->media->positions[static_cast<size_t>(k)], 2 + k);
  for (int64_t k = 0; k < 20; ++k) EXPECT_EQ(out->media->positions[static_cast<size_t>(20 + k)], 25 + k);
  for (int64_t p : out->media->positions) EXPECT_EQ(out->tokens[static_cast<size_t>(p)], kIds.image);
  EXPECT_EQ(out->tokens[22], kIds.image_end);
  EXPECT_EQ(out->tokens.back(), 3);
  // Prompt reuse's keys: one per placeholder, never a token id, distinct rows and pictures
  // (both grids give 20 features), and the same for the same picture rendered again.
  const std::vector<int32_t>& keys = out->media->reuse_keys;
  ASSERT_EQ(keys.size(), 40u);
  for (int32_t k : keys) EXPECT_LT(k, 0);
  EXPECT_EQ(std::set<int32_t>(keys.begin(), keys.end()).size(), 40u);
  std::vector<MediaPart> swapped = {parts[1], parts[0]};
  auto again = expand_prompt_media(tokens, swapped, kIds, MediaLimits{}, no_text);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(std::equal(keys.begin(), keys.begin() + 20, again->media->reuse_keys.begin() + 20));
  EXPECT_TRUE(std::equal(keys.begin() + 20, keys.end(), again->media->reuse_keys.begin()));
}

// Once encoded, a request keeps its pictures' placements and grids, and the pixels of those
// before `first` only (prompt reuse skipped them; they may be encoded later).
TEST(PromptMedia, EncodedPicturesDropTheirPatches) {
  std::vector<MediaPart> parts = {{false, png_url("b_pad_130x90.png"), "messages[0].content[0]"},
                                  {false, png_url("a_tiny_20x30.png"), "messages[0].content[1]"}};
  const std::vector<int32_t> tokens = {1, kIds.image, 2, kIds.image, 3};
  auto out = expand_prompt_media(tokens, parts, kIds, MediaLimits{}, no_text);
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  const PromptMedia& m = *out->media;
  for (size_t first : {size_t{0}, size_t{1}, size_t{2}}) {
    const std::shared_ptr<const PromptMedia> kept = without_patches_from(m, first);
    EXPECT_EQ(kept->positions, m.positions);
    EXPECT_EQ(kept->reuse_keys, m.reuse_keys);
    ASSERT_EQ(kept->items.size(), m.items.size());
    for (size_t k = 0; k < m.items.size(); ++k) {
      const media::VisionPatches& a = kept->items[k].patches;
      const media::VisionPatches& b = m.items[k].patches;
      EXPECT_EQ(kept->items[k].video, m.items[k].video);
      EXPECT_EQ(a.grid_t, b.grid_t);
      EXPECT_EQ(a.grid_h, b.grid_h);
      EXPECT_EQ(a.grid_w, b.grid_w);
      ASSERT_FALSE(b.values.empty());
      if (k < first) {
        EXPECT_TRUE(std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end())) << k;
      } else {
        EXPECT_TRUE(a.values.empty()) << k;
      }
    }
  }
}

TEST(PromptMedia, VideoPlaceholderExpandsToTimedFrameGroups) {
  // tests/data/media/clip_64x48_12f_6fps.mp4: 12 frames at 6 fps -> frames 0, 3, 6, 9 at 2 fps,
  // two groups of two frames; 64x48 upscaled to 112x84 -> grid (2, 6, 8): 12 features per group.
  const auto clip = std::filesystem::path(TF_TEST_DATA_DIR) / "media" / "clip_64x48_12f_6fps.mp4";
  std::vector<MediaPart> parts = {{true, test::data_url_of(clip, "video/mp4"), "messages[0].content[0]"}};
  std::vector<std::string> texts;
  auto encode = [&texts](const std::string& s) -> Expected<std::vector<int32_t>> {
    texts.push_back(s);
    return std::vector<int32_t>{900, 901};
  };
  const std::vector<int32_t> tokens = {1, kIds.video_start, kIds.video, kIds.video_end, 2};
  auto out = expand_prompt_media(tokens, parts, kIds, MediaLimits{}, encode);
#if !TF_HAVE_VIDEO
  // A build without FFmpeg refuses the video, naming the part and saying why.
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.status().code(), StatusCode::kUnimplemented) << out.status().to_string();
  EXPECT_NE(out.status().message().find("without FFmpeg"), std::string::npos) << out.status().to_string();
  EXPECT_NE(out.status().message().find("messages[0].content[0]"), std::string::npos) << out.status().to_string();
  return;
#endif
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  const media::VisionPatches& p = out->media->items.at(0).patches;
  EXPECT_TRUE(out->media->items[0].video);
  EXPECT_EQ(p.grid_t, 2);
  EXPECT_EQ(p.grid_h, 6);
  EXPECT_EQ(p.grid_w, 8);
  EXPECT_EQ(texts, (std::vector<std::string>{"0.0 seconds", "1.0 seconds"}));
  std::vector<int32_t> want = {1, kIds.video_start};
  for (int g = 0; g < 2; ++g) {
    want.push_back(kIds.image_start);
    want.insert(want.end(), 12, kIds.image);
    want.push_back(kIds.image_end);
    want.insert(want.end(), {900, 901});
  }
  want.insert(want.end(), {kIds.video_end, 2});
  EXPECT_EQ(out->tokens, want);
  ASSERT_EQ(out->media->positions.size(), 24u);
  EXPECT_EQ(out->media->positions.front(), 3);
  EXPECT_EQ(out->media->positions[12], 3 + 12 + 1 + 2 + 1);
}

TEST(PromptMedia, TextOnlyPromptsPassThrough) {
  auto out = expand_prompt_media({1, 2, 3}, {}, kIds, MediaLimits{}, no_text);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(out->media, nullptr);
}

TEST(PromptMedia, ErrorsNameThePart) {
  const std::vector<int32_t> one = {1, kIds.image, 2};
  struct Case {
    std::vector<int32_t> tokens;
    MediaPart part;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {one, {false, "https://example.com/a.png", "messages[0].content[3]"}, "messages[0].content[3]"},
      {one, {false, "data:image/png;base64,AAAA", "messages[1].content[0]"}, "messages[1].content[0]"},
      {one, {false, "data:image/png;base64,!!!", "messages[1].content[0]"}, "messages[1].content[0]"},
      {{1, 2}, {false, png_url("a_tiny_20x30.png"), "m"}, "placeholders"},                 // no placeholder
      {{1, kIds.video, 2}, {false, png_url("a_tiny_20x30.png"), "m"}, "video placeholder"},  // wrong kind
  };
  for (const Case& c : cases) {
    auto out = expand_prompt_media(c.tokens, {c.part}, kIds, MediaLimits{}, no_text);
    ASSERT_FALSE(out.has_value()) << c.part.url.substr(0, 40);
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(c.expect), std::string::npos) << out.status().to_string();
  }
  // The pixel budget is checked before the patches are made: 20 tokens are 80 patches of 4704 bytes.
  MediaLimits small;
  small.max_pixel_bytes = 80 * 4704 - 1;
  auto over = expand_prompt_media(one, {{false, png_url("a_tiny_20x30.png"), "messages[0].content[0]"}}, kIds, small,
                                  no_text);
  ASSERT_FALSE(over.has_value());
  EXPECT_NE(over.status().message().find("MiB of pixel data"), std::string::npos) << over.status().to_string();
  small.max_pixel_bytes = 80 * 4704;
  EXPECT_TRUE(expand_prompt_media(one, {{false, png_url("a_tiny_20x30.png"), "m"}}, kIds, small, no_text).has_value());
  MediaLimits few;
  few.max_images = 1;
  std::vector<MediaPart> two(2, MediaPart{false, png_url("a_tiny_20x30.png"), "m"});
  auto out = expand_prompt_media({kIds.image, kIds.image}, two, kIds, few, no_text);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.status().message().find("at most 1 images and 4 videos, this one has 2 and 0"), std::string::npos)
      << out.status().to_string();
  // Videos have their own count (checked before anything is decoded).
  few.max_images = 50;
  few.max_videos = 0;
  auto video = expand_prompt_media({kIds.video}, {{true, "data:video/mp4;base64,AAAA", "m"}}, kIds, few, no_text);
  ASSERT_FALSE(video.has_value());
  EXPECT_NE(video.status().message().find("at most 50 images and 0 videos, this one has 0 and 1"), std::string::npos)
      << video.status().to_string();
}

// An https:// URL: without VISION_URLS the refusal says how to allow it; with it, the
// URL is fetched (here: a host that cannot resolve, so the error names the fetch).
TEST(PromptMedia, HttpsUrlsAreFetchedOnlyWhenAllowed) {
  const std::vector<int32_t> one = {1, kIds.image, 2};
  const MediaPart part{false, "https://no-such-host.invalid/a.png", "messages[0].content[1]"};
  auto off = expand_prompt_media(one, {part}, kIds, MediaLimits{}, no_text);
  ASSERT_FALSE(off.has_value());
  EXPECT_EQ(off.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(off.status().message().find("messages[0].content[1]: only data: URLs are accepted"), std::string::npos)
      << off.status().to_string();
  EXPECT_NE(off.status().message().find("(VISION_URLS=1 lets the server fetch https:// URLs)"), std::string::npos)
      << off.status().to_string();
  MediaLimits on;
  on.fetch_urls = true;
  on.fetch.connect_timeout = std::chrono::seconds(5);
  auto fetched = expand_prompt_media(one, {part}, kIds, on, no_text);
  ASSERT_FALSE(fetched.has_value());
  EXPECT_NE(fetched.status().message().find("messages[0].content[1]: fetching https://no-such-host.invalid/a.png"),
            std::string::npos)
      << fetched.status().to_string();
  // Other schemes are not fetched, and say so.
  auto http = expand_prompt_media(one, {{false, "http://example.com/a.png", "m"}}, kIds, on, no_text);
  ASSERT_FALSE(http.has_value());
  EXPECT_NE(http.status().message().find("(only https:// URLs are fetched)"), std::string::npos)
      << http.status().to_string();
}

}  // namespace
}  // namespace tf::engine
