// Trimming a view of ASCII whitespace, for settings and header values.
#pragma once

#include <string_view>

namespace tf {

// `s` without the spaces, tabs, CRs and LFs at either end.
inline std::string_view trim_ascii_whitespace(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace tf
