// data: URL parsing and base64 / percent decoding (see data_url.h).
#include "media/data_url.h"

#include <array>
#include <cstdint>

namespace tf::media {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Percent-decoding of a non-base64 payload (RFC 3986 escapes).
Expected<std::string> decode_percent(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      int hi = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
      int lo = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        return invalid_argument("data URL: bad percent escape at offset " + std::to_string(i) +
                                " (expected % and two hex digits)");
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (out.size() >= max_bytes)
      return invalid_argument("data URL: the payload is larger than the " + std::to_string(max_bytes) +
                              " bytes allowed");
    out.push_back(c);
  }
  return out;
}

}  // namespace

Expected<DataUrl> parse_data_url(std::string_view url, size_t max_bytes) {
  url = trim(url);
  size_t colon = url.find(':');
  std::string_view scheme = colon == std::string_view::npos ? std::string_view() : url.substr(0, colon);
  if (!iequals(scheme, "data")) {
    std::string got = scheme.empty() || scheme.size() > 16 ? std::string("a value that is not a URL")
                                                           : "a URL with scheme '" + std::string(scheme) + "'";
    return invalid_argument("only data: URLs are accepted (e.g. \"data:image/png;base64,...\"); got " + got);
  }
  std::string_view rest = url.substr(colon + 1);
  size_t comma = rest.find(',');
  if (comma == std::string_view::npos)
    return invalid_argument("data URL: no ',' between the media type and the data");
  std::string_view header = rest.substr(0, comma);
  std::string_view payload = rest.substr(comma + 1);

  DataUrl result;
  bool base64 = false;
  size_t pos = 0;
  bool first = true;
  while (pos <= header.size()) {
    size_t semi = header.find(';', pos);
    std::string_view part = trim(header.substr(pos, semi == std::string_view::npos ? std::string_view::npos : semi - pos));
    if (first) {
      for (char c : part) result.mime.push_back(lower(c));
      first = false;
    } else if (iequals(part, "base64")) {
      base64 = true;
    } else if (base64) {
      return invalid_argument("data URL: ';base64' must be the last parameter before ','");
    }
    if (semi == std::string_view::npos) break;
    pos = semi + 1;
  }
  if (result.mime.empty()) result.mime = "text/plain";
  if (result.mime.size() > 255 || result.mime.find('/') == std::string::npos)
    return invalid_argument("data URL: '" + result.mime.substr(0, 64) + "' is not a media type (type/subtype)");

  if (base64) {
    // Some clients percent-encode the whole URL ("%2B" for '+', "%3D" for '='): undo that first.
    std::string unescaped;
    if (payload.find('%') != std::string_view::npos) {
      auto text = decode_percent(payload, payload.size());
      if (!text) return text.status();
      unescaped = std::move(*text);
      payload = unescaped;
    }
    auto bytes = decode_base64(payload, max_bytes, "data URL");
    if (!bytes) return bytes.status();
    result.bytes = std::move(*bytes);
  } else {
    auto bytes = decode_percent(payload, max_bytes);
    if (!bytes) return bytes.status();
    result.bytes = std::move(*bytes);
  }
  if (result.bytes.empty()) return invalid_argument("data URL: the payload is empty");
  return result;
}

}  // namespace tf::media
