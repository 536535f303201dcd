// Small text helpers for check reports.
#pragma once

#include <cstdint>
#include <string>

namespace tf::check {

// At most `limit` bytes of `text` on one line, quoted ("..." when cut; newlines as \n).
std::string quoted_excerpt(const std::string& text, size_t limit = 80);
// 12345 -> "12,345".
std::string thousands(int64_t n);
// "93.1 %".
std::string percent(double fraction);

}  // namespace tf::check
