// Image and video content parts of the three APIs, normalized for the engine.
//
// OpenAI chat ({"type": "image_url", "image_url": {"url"}} or a bare URL string,
// "video_url" likewise), Responses ({"type": "input_image", "image_url": "..."}) and
// Anthropic ({"type": "image", "source": {"type": "base64", "media_type", "data"}})
// all become {"type": "image_url", "image_url": {"url": "data:..."}} or the video_url
// form, which the chat template and the engine read. Data URLs are accepted, and https://
// URLs when the server fetches them (MediaUrlPolicy); any other URL is a 400 that says so.
#pragma once

#include <string>

#include "server/json_fields.h"

namespace tf::server {

// The media URLs a request may carry: data: URLs always; https:// URLs when the engine
// fetches them (VISION_URLS), else they are refused here with the setting named.
struct MediaUrlPolicy {
  bool https = false;
};

// The normalized part for a part of `type` (image_url, input_image, image, video_url,
// input_video, video); throws bad_request naming `pp` for a missing URL or one that is
// neither data: nor https://.
Json normalized_media_part(const Json& part, const std::string& type, const std::string& pp,
                           MediaUrlPolicy policy);
// Anthropic's image block (source base64 or url).
Json anthropic_image_part(const Json& block, const std::string& pp, MediaUrlPolicy policy);
bool is_media_part_type(const std::string& type);

}  // namespace tf::server
