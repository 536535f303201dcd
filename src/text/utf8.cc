// UTF-8 validation follows Unicode Table 3-7 (well-formed byte sequences); an ill-formed sequence
// is replaced by one U+FFFD per maximal subpart, as in the Unicode recommendation (§3.9, U+FFFD
// substitution of maximal subparts).
#include "text/utf8.h"

namespace tf::text {
namespace {

// Valid range of the second byte for a lead byte, per Table 3-7; {0,0} when the lead is invalid.
struct SecondRange {
  uint8_t lo, hi;
  size_t len;
};

SecondRange second_range(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {0x80, 0xBF, 2};
  if (lead == 0xE0) return {0xA0, 0xBF, 3};
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) return {0x80, 0xBF, 3};
  if (lead == 0xED) return {0x80, 0x9F, 3};
  if (lead == 0xF0) return {0x90, 0xBF, 4};
  if (lead >= 0xF1 && lead <= 0xF3) return {0x80, 0xBF, 4};
  if (lead == 0xF4) return {0x80, 0x8F, 4};
  return {0, 0, 0};
}

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// Number of bytes at s[i] that form a valid (possibly incomplete) prefix of a sequence; sets
// `complete` when they form a whole character. Always >= 1 for the lead byte itself.
size_t valid_prefix(std::string_view s, size_t i, bool& complete) {
  const auto lead = static_cast<uint8_t>(s[i]);
  complete = false;
  if (lead < 0x80) {
    complete = true;
    return 1;
  }
  const SecondRange r = second_range(lead);
  if (r.len == 0) return 1;  // invalid lead byte: a subpart of length 1
  size_t n = 1;
  if (i + 1 >= s.size()) return n;
  const auto b1 = static_cast<uint8_t>(s[i + 1]);
  if (b1 < r.lo || b1 > r.hi) return n;
  n = 2;
  while (n < r.len) {
    if (i + n >= s.size() || !is_cont(static_cast<uint8_t>(s[i + n]))) return n;
    ++n;
  }
  complete = true;
  return n;
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_sequence_length(std::string_view s, size_t i) {
  bool complete = false;
  const size_t n = valid_prefix(s, i, complete);
  return complete ? n : 0;
}

char32_t decode_utf8_at(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: return kReplacementChar;
  }
}

size_t next_code_point(std::string_view s, size_t i, char32_t& cp) {
  bool complete = false;
  const size_t n = valid_prefix(s, i, complete);
  cp = complete ? decode_utf8_at(s, i, n) : kReplacementChar;
  return i + n;
}

std::vector<char32_t> to_code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i = next_code_point(s, i, cp);
    out.push_back(cp);
  }
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    bool complete = false;
    const size_t n = valid_prefix(s, i, complete);
    if (!complete) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    bool complete = false;
    const size_t n = valid_prefix(s, i, complete);
    if (complete) {
      out.append(s.substr(i, n));
    } else {
      append_utf8(out, kReplacementChar);
    }
    i += n;
  }
  return out;
}

size_t utf8_stable_prefix(std::string_view s) {
  // Only the last (up to 3) bytes can be an incomplete but still valid prefix.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (is_cont(b)) continue;
    bool complete = false;
    const size_t n = valid_prefix(s, i, complete);
    // An incomplete prefix that reaches the end of `s` may still complete.
    if (!complete && i + n == s.size() && second_range(b).len > 0) return i;
    i += n - 1;
  }
  return s.size();
}

}  // namespace tf::text
