// Image and video content parts of the three APIs, normalized for the engine.
//
// OpenAI chat ({"type": "image_url", "image_url": {"url"}} or a bare URL string,
// "video_url" likewise), Responses ({"type": "input_image", "image_url": "..."}) and
// Anthropic ({"type": "image", "source": {"type": "base64", "media_type", "data"}})
// all become {"type": "image_url", "image_url": {"url": "data:..."}} or the video_url
// form, which the chat template and the engine read. Data URLs are accepted, and https://
// URLs when the server fetches them (MediaUrlPolicy); any other URL is a 400 that says so.
//
// Errors about a part that only the engine finds (bytes that are no image, a video too
// long) name the part by its place in the converted chat messages
// ("messages[3].content[0]"), which is not where the client put it when a request was
// converted (Responses input items and instructions, Anthropic system and blocks). So
// each normalized part remembers the client's path (e.g. "input[1].content[2]"):
// take_media_sources() removes these marks before the messages go to the engine, and
// media_error() turns the engine's error back into the client's path, in the message
// and in the error's `param`.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace tf::server {

// The media URLs a request may carry: data: URLs always; https:// URLs when the engine
// fetches them (VISION_URLS), else they are refused here with the setting named.
struct MediaUrlPolicy {
  bool https = false;
};

// The normalized part for a part of `type` (image_url, input_image, image, video_url,
// input_video, video); throws bad_request naming `pp` for a missing URL or one that is
// neither data: nor https://. The part is marked with `pp` as the client's path, unless
// it is an already normalized part (a converted request) that carries its mark.
Json normalized_media_part(const Json& part, const std::string& type, const std::string& pp,
                           MediaUrlPolicy policy);
// Anthropic's image block (source base64 or url).
Json anthropic_image_part(const Json& block, const std::string& pp, MediaUrlPolicy policy);
bool is_media_part_type(const std::string& type);

// Converted path ("messages[k].content[j]") -> the client's path, per media part.
using MediaSources = std::vector<std::pair<std::string, std::string>>;
// Removes the client-path marks from the normalized messages and returns them.
MediaSources take_media_sources(Json& messages);
// The ApiError for an engine error about the prompt: one that starts with a converted
// part path names the client's path instead, and gives it as `param`.
ApiError media_error(const Status& status, const MediaSources& sources);

}  // namespace tf::server
