// Literal find-and-replace over a whole string, for the tokenizer's String patterns and spacing
// rules.
#pragma once

#include <string>
#include <string_view>

namespace tf {

// `text` with every occurrence of `from` replaced by `to`, left to right without overlaps (an
// empty `from` matches nothing). The result is sized once: the text may be a whole long section.
inline std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  size_t count = 0;
  for (size_t f = text.find(from); f != std::string_view::npos; f = text.find(from, f + from.size())) ++count;
  std::string out;
  out.reserve(text.size() - count * from.size() + count * to.size());
  size_t pos = 0;
  for (size_t f; (f = text.find(from, pos)) != std::string_view::npos; pos = f + from.size()) {
    out.append(text.substr(pos, f - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace tf
