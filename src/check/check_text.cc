#include "check/check_text.h"

#include <cstdio>

namespace tf::check {

std::string quoted_excerpt(const std::string& text, size_t limit) {
  std::string out = "\"";
  size_t i = 0;
  for (; i < text.size() && out.size() < limit + 1; ++i) {
    if (text[i] == '\n')
      out += "\\n";
    else if (text[i] == '"')
      out += "\\\"";
    else
      out += text[i];
  }
  // Never end inside a UTF-8 sequence.
  while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) out += text[i++];
  return out + (i < text.size() ? "...\"" : "\"");
}

std::string thousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100.0 * fraction);
  return buf;
}

}  // namespace tf::check
