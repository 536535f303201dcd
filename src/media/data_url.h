// data: URLs (RFC 2397) as sent in OpenAI/Anthropic image and video parts:
// "data:image/png;base64,iVBOR...". Anything else is refused with a message that
// says so (https:// URLs are fetched only with VISION_URLS: media/url_fetch.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/base64.h"
#include "core/status.h"

namespace tf::media {

struct DataUrl {
  std::string mime;   // lower-case media type ("image/png"); "text/plain" when the URL names none
  std::string bytes;  // the payload, decoded (base64 or percent-encoded)
};

// Parses and decodes a data: URL. The decoded payload may hold at most
// max_bytes bytes; the check is made before decoding. Base64 accepts the
// standard and the URL-safe alphabets, optional padding and ASCII whitespace.
Expected<DataUrl> parse_data_url(std::string_view url, size_t max_bytes);

}  // namespace tf::media
