#include "text/oniguruma_pattern.h"

#include <cctype>

namespace tf::text {
namespace {

// Oniguruma's \s and \w as character-class items (valid both inside [...] and wrapped in one).
constexpr std::string_view kSpace = R"(\t-\r\x{85}\p{Z})";
constexpr std::string_view kWord = R"(\p{L}\p{M}\p{N}\p{Pc})";
constexpr std::string_view kHex = "0-9a-fA-F";
// Everything but a hex digit, spelled as ranges so that it can stand inside a class.
constexpr std::string_view kNotHex = R"(\x{0}-\x{2F}\x{3A}-\x{40}\x{47}-\x{60}\x{67}-\x{10FFFF})";

std::string bracket(std::string_view items, bool negate) {
  return std::string(negate ? "[^" : "[") + std::string(items) + "]";
}

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// At p[i] == '(' of "(?flags)" or "(?flags:": Ruby's m (dot matches newline) is PCRE2's s.
// Returns the number of bytes consumed (0 when this is not an option group).
size_t copy_option_group(std::string_view p, size_t i, std::string& out) {
  if (i + 2 >= p.size() || p[i + 1] != '?') return 0;
  size_t j = i + 2;
  while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
  if (j == i + 2 || j >= p.size() || (p[j] != ':' && p[j] != ')')) return 0;
  out += "(?";
  for (size_t k = i + 2; k < j; ++k) out += p[k] == 'm' ? 's' : p[k];
  return j - i;
}

}  // namespace

std::string pcre2_from_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  const std::string word = bracket(kWord, false);
  const std::string boundary = "(?:(?<=" + word + ")(?!" + word + ")|(?<!" + word + ")(?=" + word + "))";
  const std::string inside = "(?:(?<=" + word + ")(?=" + word + ")|(?<!" + word + ")(?!" + word + "))";
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      switch (e) {
        case 's':
          out += in_class ? std::string(kSpace) : bracket(kSpace, false);
          break;
        // PCRE2's \S lacks only U+180E; inside a class the union is Oniguruma's \S.
        case 'S':
          out += in_class ? std::string(R"(\S\x{180E})") : bracket(kSpace, true);
          break;
        case 'w':
          out += in_class ? std::string(kWord) : word;
          break;
        case 'W':
          out += in_class ? std::string(R"(\W)") : bracket(kWord, true);
          break;
        case 'h':
          out += in_class ? std::string(kHex) : bracket(kHex, false);
          break;
        case 'H':
          out += in_class ? std::string(kNotHex) : bracket(kHex, true);
          break;
        case 'b':  // inside a class, a backspace in both syntaxes
          out += in_class ? std::string(R"(\b)") : boundary;
          break;
        case 'B':
          out += in_class ? std::string(R"(\B)") : inside;
          break;
        case 'u':
          if (i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4]) &&
              is_hex(p[i + 5])) {
            out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
            i += 6;
            continue;
          }
          out += "\\u";
          break;
        case 'Q': {
          // \Q...\E is literal text: copied as is, up to and including \E.
          const size_t end = p.find("\\E", i + 2);
          const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
          out.append(p.substr(i, stop - i));
          i = stop;
          continue;
        }
        default:
          out += c;
          out += e;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '(') {
      if (const size_t n = copy_option_group(p, i, out); n != 0) {
        i += n;
        continue;
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      // A POSIX class such as [:alpha:]: copied through its ":]".
      const size_t end = p.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? i + 1 : end + 2;
      out.append(p.substr(i, stop - i));
      i = stop;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace tf::text
