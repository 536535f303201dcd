// ReasoningMemory (see reasoning_memory.h): SHA-256 digests of a conversation's messages
// as the template reads them, reasoning left out.
#include "server/reasoning_memory.h"

#include <openssl/evp.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "text/json_parse.h"

namespace tf::server {

namespace {

// SHA-256 over pieces fed one by one: a message's text is hashed where it lies (a content
// string may be a whole request body), not joined into a string first.
class Digest {
 public:
  Digest() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx_);
      ctx_ = nullptr;
    }
  }
  ~Digest() { EVP_MD_CTX_free(ctx_); }
  Digest(const Digest&) = delete;
  Digest& operator=(const Digest&) = delete;
  void operator()(std::string_view bytes) {
    if (ctx_ && EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()) != 1) {
      EVP_MD_CTX_free(ctx_);
      ctx_ = nullptr;
    }
  }
  std::string final() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!ctx_ || EVP_DigestFinal_ex(ctx_, md, &n) != 1) return {};
    return std::string(reinterpret_cast<const char*>(md), n);
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string_view stripped(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The text a message's content renders as, in pieces: a string, its parts' texts, a media
// part as its JSON (the same picture gives the same text).
template <typename Sink>
void content_pieces(const Json& m, Sink&& sink) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return;
  if (it->is_string()) return sink(it->get_ref<const std::string&>());
  if (!it->is_array()) return sink(it->dump());
  for (const Json& part : *it) {
    auto text = part.is_object() ? part.find("text") : part.end();
    if (part.is_object() && text != part.end() && text->is_string())
      sink(text->get_ref<const std::string&>());
    else
      sink(part.dump());
  }
}

std::string content_text(const Json& m) {
  std::string out;
  content_pieces(m, [&out](std::string_view piece) { out += piece; });
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
void reply_pieces(const Json& m, Digest& sink) {
  auto content = m.find("content");
  if (content != m.end() && content->is_string()) {
    sink(stripped(content->get_ref<const std::string&>()));
  } else {
    const std::string text = content_text(m);
    sink(stripped(text));
  }
  sink("\x1f");
  auto calls = m.find("tool_calls");
  if (calls == m.end() || !calls->is_array()) return;
  for (const Json& c : *calls) {
    if (!c.is_object()) continue;
    auto f = c.find("function");
    const Json& fn = f != c.end() && f->is_object() ? *f : c;
    sink(string_member(fn, "name"));
    sink("\x1e");
    sink(arguments_text(fn));
    sink("\x1d");
  }
}

void message_pieces(const Json& m, Digest& sink) {
  const std::string role = string_member(m, "role");
  sink(role);
  sink("\x1f");
  if (role == "assistant") return reply_pieces(m, sink);
  content_pieces(m, sink);
  sink("\x1f");
  sink(string_member(m, "tool_call_id"));
  sink("\x1f");
  sink(string_member(m, "name"));
}

// The digests of a conversation: each one covers the salt and every message before.
class Chain {
 public:
  explicit Chain(const std::string& salt) {
    Digest d;
    d(std::string_view("tensorfold reasoning v1\0", 24));
    d(salt);
    state_ = d.final();
  }
  void add(const Json& m) {
    Digest d;
    d(state_);
    d("\x01");
    message_pieces(m, d);
    state_ = d.final();
  }
  // The key of a reply after the messages added so far.
  std::string reply_key(const Json& m) const {
    Digest d;
    d(state_);
    d("\x02");
    reply_pieces(m, d);
    return d.final();
  }

 private:
  std::string state_;
};

bool has_text(const Json& m, const char* name) {
  auto it = m.find(name);
  return it != m.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

bool lacks_reasoning(const Json& m) {
  if (!m.is_object() || string_member(m, "role") != "assistant") return false;
  if (has_text(m, "reasoning_content") || has_text(m, "reasoning")) return false;
  auto content = m.find("content");  // the reasoning is in the text
  if (content != m.end() && content->is_string())
    return content->get_ref<const std::string&>().find("</think>") == std::string::npos;
  return content_text(m).find("</think>") == std::string::npos;
}

constexpr int64_t kEntryOverhead = 128;  // key, links, bookkeeping

}  // namespace

ReasoningMemory::ReasoningMemory(int64_t max_bytes) : max_bytes_(max_bytes) {}

int ReasoningMemory::restore(Json& messages, const std::string& salt) {
  if (!messages.is_array() || max_bytes_ <= 0) return 0;
  if (std::none_of(messages.begin(), messages.end(), lacks_reasoning)) return 0;
  // The keys first, outside the lock: hashing a conversation takes as long as its text.
  std::vector<std::pair<Json*, std::string>> wanted;
  Chain chain(salt);
  for (Json& m : messages) {
    if (lacks_reasoning(m)) wanted.emplace_back(&m, chain.reply_key(m));
    if (m.is_object()) chain.add(m);
  }
  int restored = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [m, key] : wanted) {
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    (*m)["reasoning_content"] = it->second.reasoning;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    ++restored;
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
