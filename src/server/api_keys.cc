#include "server/api_keys.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/logging.h"
#include "core/trim.h"

namespace tf::server {
namespace {

constexpr size_t kMaxKeyBytes = 4096;         // an HTTP header line's worth
constexpr size_t kMaxKeyFileBytes = 1 << 20;  // ~10,000 keys of 64 characters

// Printable ASCII without spaces: what an Authorization header carries after "Bearer ".
bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return false;
  for (char c : key)
    if (c <= ' ' || c > '~') return false;
  return true;
}

}  // namespace

Expected<ApiKeySet> ApiKeySet::parse(std::string_view inline_keys, std::string_view file_text,
                                     const std::string& source) {
  ApiKeySet set;
  size_t piece = 0;
  for (size_t start = 0; start <= inline_keys.size(); ++piece) {
    size_t comma = inline_keys.find(',', start);
    if (comma == std::string_view::npos) comma = inline_keys.size();
    const std::string_view key = trim_ascii_whitespace(inline_keys.substr(start, comma - start));
    start = comma + 1;
    if (key.empty()) continue;
    if (!valid_key(key))
      return invalid_argument("API_KEY: key " + std::to_string(piece + 1) +
                              " is not printable ASCII without spaces (or is over 4096 bytes)");
    set.keys_.emplace_back(key);
  }
  size_t line_no = 0;
  for (size_t start = 0; start < file_text.size();) {
    size_t end = file_text.find('\n', start);
    if (end == std::string_view::npos) end = file_text.size();
    const std::string_view line = trim_ascii_whitespace(file_text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (!valid_key(line))
      return invalid_argument(source + ": line " + std::to_string(line_no) +
                              " is not a key (printable ASCII without spaces, at most 4096 bytes)");
    set.keys_.emplace_back(line);
  }
  return set;
}

bool ApiKeySet::accepts(std::string_view presented) const {
  bool found = false;
  for (const std::string& key : keys_) {
    // Compared over the key's whole length, without an early exit.
    unsigned diff = key.size() != presented.size() ? 1u : 0u;
    for (size_t i = 0; i < key.size(); ++i) {
      const char p = i < presented.size() ? presented[i] : '\0';
      diff |= static_cast<unsigned char>(key[i] ^ p);
    }
    found |= diff == 0;
  }
  return found;
}

Expected<std::unique_ptr<ApiKeys>> ApiKeys::load(std::string inline_keys, std::string file) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(std::move(inline_keys), std::move(file)));
  auto set = keys->read();
  if (!set) return set.status();
  keys->keys_ = std::move(*set);
  return keys;
}

Expected<std::shared_ptr<const ApiKeySet>> ApiKeys::read() const {
  std::string text;
  if (!file_.empty()) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(file_, ec);
    if (ec) return invalid_argument("API_KEY_FILE " + file_ + ": " + ec.message());
    if (size > kMaxKeyFileBytes)
      return invalid_argument("API_KEY_FILE " + file_ + ": " + std::to_string(size) +
                              " bytes; at most 1 MiB");
    std::ifstream in(file_, std::ios::binary);
    if (!in) return invalid_argument("API_KEY_FILE " + file_ + ": cannot be read");
    std::ostringstream body;
    body << in.rdbuf();
    text = body.str();
    const auto perms = std::filesystem::status(file_, ec).permissions();
    if (!ec && (perms & std::filesystem::perms::others_read) != std::filesystem::perms::none)
      TF_LOG_WARN("API_KEY_FILE {} can be read by every user of this machine (chmod 600 it)", file_);
  }
  auto set = ApiKeySet::parse(inline_keys_, text, "API_KEY_FILE " + file_);
  if (!set) return set.status();
  auto inline_only = ApiKeySet::parse(inline_keys_, "", "");
  if (!file_.empty() && set->size() == inline_only->size())
    return invalid_argument("API_KEY_FILE " + file_ +
                            " lists no key (one key per line; '#' starts a comment)");
  return std::make_shared<const ApiKeySet>(std::move(*set));
}

bool ApiKeys::required() const {
  std::lock_guard lock(mu_);
  return !keys_->empty();
}

bool ApiKeys::accepts(std::string_view presented) const {
  std::shared_ptr<const ApiKeySet> keys;
  {
    std::lock_guard lock(mu_);
    keys = keys_;
  }
  return keys->empty() || keys->accepts(presented);
}

Expected<size_t> ApiKeys::reload() {
  auto set = read();
  if (!set) return set.status();
  const size_t n = (*set)->size();
  std::lock_guard lock(mu_);
  keys_ = std::move(*set);
  return n;
}

std::string_view presented_key(std::string_view authorization, std::string_view x_api_key) {
  authorization = trim_ascii_whitespace(authorization);
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() > kBearer.size()) {
    bool bearer = true;
    for (size_t i = 0; i < kBearer.size(); ++i)
      bearer &= (authorization[i] | 0x20) == kBearer[i];  // ASCII case-insensitive; ' ' | 0x20 == ' '
    if (bearer) return trim_ascii_whitespace(authorization.substr(kBearer.size()));
  }
  return trim_ascii_whitespace(x_api_key);
}

}  // namespace tf::server
