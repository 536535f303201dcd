// The API keys a request may present: API_KEY (one key, or several separated by commas)
// and API_KEY_FILE (one key per line; blank lines and '#' comments skipped). The file is
// read again on SIGHUP (`./start.sh reload`), so keys can be added or revoked without a
// restart; a reload that fails keeps the keys in force and says why.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tf::server {

// One set of keys, immutable once built.
class ApiKeySet {
 public:
  // The keys of an API_KEY value (comma-separated) and of a key file's text; `source`
  // names the file in errors. A key is printable ASCII without spaces (it travels in an
  // HTTP header); errors name the line, never the key.
  static Expected<ApiKeySet> parse(std::string_view inline_keys, std::string_view file_text,
                                   const std::string& source);

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // Whether `presented` is one of the keys. Every key is compared over its whole length
  // whatever matched, so the time taken does not tell how much of a key was right.
  bool accepts(std::string_view presented) const;

 private:
  std::vector<std::string> keys_;
};

// The keys in force: API_KEY's, plus the key file's as last read.
class ApiKeys {
 public:
  // Reads `file` when given. A file that lists no key is an error (it would lock every
  // client out, or, read as "no keys", open the server to anyone).
  static Expected<std::unique_ptr<ApiKeys>> load(std::string inline_keys, std::string file);

  bool required() const;  // false: no key configured, every request is let in
  bool accepts(std::string_view presented) const;
  // Reads the key file again; on failure the keys in force stay. Returns how many keys
  // are now in force.
  Expected<size_t> reload();
  const std::string& file() const { return file_; }

 private:
  ApiKeys(std::string inline_keys, std::string file)
      : inline_keys_(std::move(inline_keys)), file_(std::move(file)) {}
  Expected<std::shared_ptr<const ApiKeySet>> read() const;

  const std::string inline_keys_, file_;
  mutable std::mutex mu_;
  std::shared_ptr<const ApiKeySet> keys_;  // swapped whole by reload()
};

// The key a request presents: `Authorization: Bearer KEY` (OpenAI clients; the scheme
// is case-insensitive) or `x-api-key: KEY` (Anthropic's clients). Empty when neither.
std::string_view presented_key(std::string_view authorization, std::string_view x_api_key);

}  // namespace tf::server
