// Shared by the Jinja tests: where the chat-template test data lives, and reading a file whole.
#pragma once

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

}  // namespace tf::jinja_test
