// ReasoningMemory: the reasoning of recent replies, given back to a conversation whose
// client dropped it (REASONING_MEMORY_MIB).
//
// GLM-5.3's template keeps the reasoning of earlier assistant turns in the prompt (unless
// clear_thinking), so the model reads its own earlier thinking, as in training. Many chat
// clients send an earlier reply back without its `reasoning_content`; the template then
// renders an empty `<think></think>` there, the model sees a conversation it never had, and
// the prompt stops matching what was kept for prompt reuse at that reply. The server keeps
// each finished reply's reasoning, keyed by a digest of the conversation before it, of the
// reply's visible text and tool calls, and of the cache salt; an assistant message that
// arrives without reasoning and matches a key gets it back before the chat is rendered.
//
// Why the conversation is in the key: the same reply text ("OK") in another conversation
// must not receive this one's reasoning; a client must send this conversation, word for
// word, to get it (and with a cache_salt, the same salt). The key leaves out every
// message's reasoning (clients drop it) and whitespace around a reply's text (the template
// strips it).
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/json_fields.h"

namespace tf::server {

class ReasoningMemory {
 public:
  // Holds at most `max_bytes` of reasoning text (least recently used given up first).
  explicit ReasoningMemory(int64_t max_bytes);

  // Gives assistant messages without reasoning (no `reasoning_content`, or a null or empty
  // one; content without a `</think>`) the reasoning remembered for them. Returns how
  // many got it. `messages` as validate_messages returns them.
  int restore(Json& messages, const std::string& salt);
  // Remembers the reasoning of the last message (an assistant reply with a non-empty
  // `reasoning_content`) under the messages before it.
  void remember(const Json& messages, const std::string& salt);

  int64_t entries() const;
  int64_t bytes() const;

 private:
  struct Entry {
    std::string reasoning;
    std::list<std::string>::iterator lru;
  };
  void put(const std::string& key, std::string reasoning);

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
  int64_t bytes_ = 0;
};

}  // namespace tf::server
