// Base64 encoding and decoding (see base64.h).
#include "core/base64.h"

#include <array>
#include <cstdint>

namespace tf {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// 0..63 for the standard and URL-safe alphabets, -1 otherwise.
constexpr std::array<int8_t, 256> make_base64_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 26; ++i) {
    t['A' + i] = static_cast<int8_t>(i);
    t['a' + i] = static_cast<int8_t>(26 + i);
  }
  for (int i = 0; i < 10; ++i) t['0' + i] = static_cast<int8_t>(52 + i);
  t['+'] = 62;
  t['-'] = 62;
  t['/'] = 63;
  t['_'] = 63;
  return t;
}
constexpr std::array<int8_t, 256> kBase64 = make_base64_table();

// A short, printable description of a byte for messages.
std::string describe_byte(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) return std::string("'") + c + "'";
  static const char* kHex = "0123456789abcdef";
  return std::string("byte 0x") + kHex[u >> 4] + kHex[u & 15];
}

}  // namespace

std::string encode_base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = (uint32_t{data[i]} << 16) | (i + 1 < n ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{data[i + 2]} : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

Expected<std::string> decode_base64(std::string_view text, size_t max_bytes, std::string_view what) {
  const std::string prefix(what);
  // 3 bytes per 4 characters at most; the reservation never exceeds the limit.
  size_t bound = text.size() / 4 * 3 + 3;
  std::string out;
  out.reserve(bound < max_bytes ? bound : max_bytes);
  uint32_t acc = 0;
  int nbits = 0, nchars = 0;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (is_space(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding) return invalid_argument(prefix + ": data after '=' padding at offset " + std::to_string(i));
    int v = kBase64[static_cast<unsigned char>(c)];
    if (v < 0)
      return invalid_argument(prefix + ": " + describe_byte(c) + " at offset " + std::to_string(i) +
                              " is not a base64 character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    nbits += 6;
    ++nchars;
    if (nbits >= 8) {
      nbits -= 8;
      if (out.size() >= max_bytes)
        return invalid_argument(prefix + ": the payload is larger than the " + std::to_string(max_bytes) +
                                " bytes allowed");
      out.push_back(static_cast<char>((acc >> nbits) & 0xff));
    }
  }
  if (nchars % 4 == 1)
    return invalid_argument(prefix + ": the base64 text is truncated (a lone final character)");
  if (padding > 2 || (padding && (nchars + padding) % 4 != 0))
    return invalid_argument(prefix + ": bad '=' padding at the end of the base64 text");
  return out;
}

}  // namespace tf
