// Shared by the Jinja tests (and tests/tools/jinja_render.cc): where the chat-template test data lives,
// reading a file whole, and the instant strftime_now sees.
#pragma once

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace tf::jinja_test {

inline const std::string kDataDir = std::string(TF_TEST_DATA_DIR) + "/chat-templates";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The instant tests/tools/render_templates.py uses for strftime_now (2026-01-15 12:00:00 local time).
inline std::time_t fixed_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

}  // namespace tf::jinja_test
