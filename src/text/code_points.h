// The number of Unicode code points in UTF-8 text (its bytes that are not continuation bytes):
// what OpenAI/vLLM offsets count (Python's len of the decoded string).
#pragma once

#include <cstdint>
#include <string_view>

namespace tf::text {

inline int64_t count_code_points(std::string_view utf8) {
  int64_t n = 0;
  for (char c : utf8) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace tf::text
