// The key a client subcommand (tui, check) presents: the one given, else the first of API_KEY
// (which, like the server's, may list several keys separated by commas; any one will do).
#pragma once

#include <cstdlib>
#include <string>

namespace tf::apps {

inline std::string client_api_key(const std::string& given) {
  if (!given.empty()) return given;
  const char* env = std::getenv("API_KEY");
  if (!env) return "";
  const std::string keys(env);
  return keys.substr(0, keys.find(','));
}

}  // namespace tf::apps
