// Base64 (RFC 4648): encoding with the standard alphabet and padding; decoding of the
// standard and URL-safe alphabets, padding optional, ASCII whitespace ignored.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tf {

std::string encode_base64(std::string_view bytes);

// At most max_bytes decoded bytes (checked while decoding); `what` prefixes the error
// messages.
Expected<std::string> decode_base64(std::string_view text, size_t max_bytes,
                                    std::string_view what = "base64");

}  // namespace tf
