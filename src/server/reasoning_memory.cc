// ReasoningMemory (see reasoning_memory.h): SHA-256 digests of a conversation's messages
// as the template reads them, reasoning left out.
#include "server/reasoning_memory.h"

#include <openssl/evp.h>

#include <string_view>

#include "text/json_parse.h"

namespace tf::server {

namespace {

std::string sha256(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr) != 1) return {};
  return std::string(reinterpret_cast<const char*>(md), n);
}

std::string_view stripped(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The text a message's content renders as: a string, its parts' texts, a media part as its
// JSON (the same picture gives the same text).
std::string content_text(const Json& m) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  std::string out;
  if (!it->is_array()) return it->dump();
  for (const Json& part : *it) {
    auto text = part.is_object() ? part.find("text") : part.end();
    if (part.is_object() && text != part.end() && text->is_string())
      out += text->get<std::string>();
    else
      out += part.dump();
  }
  return out;
}

std::string string_member(const Json& o, const char* name) {
  auto it = o.find(name);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Arguments as the template renders them: parsed from their string (clients send what they
// got, or re-serialize it), blank as {}.
std::string arguments_text(const Json& fn) {
  auto it = fn.find("arguments");
  if (it == fn.end() || it->is_null()) return "{}";
  if (!it->is_string()) return it->dump();
  const std::string& s = it->get_ref<const std::string&>();
  if (stripped(s).empty()) return "{}";
  Expected<nlohmann::ordered_json> parsed = text::parse_json(s);
  return parsed ? parsed->dump() : s;
}

// An assistant message's visible part: its text (stripped, as the template strips it) and
// its calls, in order.
std::string reply_text(const Json& m) {
  std::string out(stripped(content_text(m)));
  out += '\x1f';
  auto calls = m.find("tool_calls");
  if (calls == m.end() || !calls->is_array()) return out;
  for (const Json& c : *calls) {
    if (!c.is_object()) continue;
    auto f = c.find("function");
    const Json& fn = f != c.end() && f->is_object() ? *f : c;
    out += string_member(fn, "name");
    out += '\x1e';
    out += arguments_text(fn);
    out += '\x1d';
  }
  return out;
}

std::string message_text(const Json& m) {
  std::string role = string_member(m, "role");
  if (role == "assistant") return role + '\x1f' + reply_text(m);
  return role + '\x1f' + content_text(m) + '\x1f' + string_member(m, "tool_call_id") + '\x1f' +
         string_member(m, "name");
}

// The digests of a conversation: each one covers the salt and every message before.
class Chain {
 public:
  explicit Chain(const std::string& salt)
      : state_(sha256(std::string("tensorfold reasoning v1\0", 24) + salt)) {}
  void add(const Json& m) { state_ = sha256(state_ + '\x01' + message_text(m)); }
  // The key of a reply after the messages added so far.
  std::string reply_key(const Json& m) const { return sha256(state_ + '\x02' + reply_text(m)); }

 private:
  std::string state_;
};

bool has_text(const Json& m, const char* name) {
  auto it = m.find(name);
  return it != m.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool lacks_reasoning(const Json& m) {
  if (string_member(m, "role") != "assistant") return false;
  if (has_text(m, "reasoning_content") || has_text(m, "reasoning")) return false;
  return content_text(m).find("</think>") == std::string::npos;  // the reasoning is in the text
}

constexpr int64_t kEntryOverhead = 128;  // key, links, bookkeeping

}  // namespace

ReasoningMemory::ReasoningMemory(int64_t max_bytes) : max_bytes_(max_bytes) {}

int ReasoningMemory::restore(Json& messages, const std::string& salt) {
  if (!messages.is_array() || max_bytes_ <= 0) return 0;
  int restored = 0;
  Chain chain(salt);
  std::lock_guard<std::mutex> lock(mu_);
  for (Json& m : messages) {
    if (m.is_object() && lacks_reasoning(m)) {
      auto it = entries_.find(chain.reply_key(m));
      if (it != entries_.end()) {
        m["reasoning_content"] = it->second.reasoning;
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        ++restored;
      }
    }
    if (m.is_object()) chain.add(m);
  }
  return restored;
}

void ReasoningMemory::remember(const Json& messages, const std::string& salt) {
  if (!messages.is_array() || messages.empty() || max_bytes_ <= 0) return;
  const Json& reply = messages.back();
  if (!reply.is_object() || string_member(reply, "role") != "assistant" ||
      !has_text(reply, "reasoning_content"))
    return;
  Chain chain(salt);
  for (size_t i = 0; i + 1 < messages.size(); ++i)
    if (messages[i].is_object()) chain.add(messages[i]);
  put(chain.reply_key(reply), reply["reasoning_content"].get<std::string>());
}

void ReasoningMemory::put(const std::string& key, std::string reasoning) {
  const int64_t size = static_cast<int64_t>(reasoning.size()) + kEntryOverhead;
  if (size > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    bytes_ -= static_cast<int64_t>(it->second.reasoning.size()) + kEntryOverhead;
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  while (bytes_ + size > max_bytes_ && !lru_.empty()) {
    auto it = entries_.find(lru_.back());
    bytes_ -= static_cast<int64_t>(it->second.reasoning.size()) + kEntryOverhead;
    entries_.erase(it);
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_.emplace(key, Entry{std::move(reasoning), lru_.begin()});
  bytes_ += size;
}

int64_t ReasoningMemory::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t ReasoningMemory::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tf::server
