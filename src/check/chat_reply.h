// A chat completion as the checks compare it, read from a whole reply or put together from
// its streamed chunks the way OpenAI's clients do.
//
// Design: streamed deltas are joined per choice 0: content and reasoning (`reasoning_content`
// or `reasoning`) appended, tool calls keyed by their `index` (the id and name from the delta
// that opens a call, arguments appended from every delta). Anything a strict client would
// trip on (a tool-call delta without an index, a call whose id changes, an error chunk) is an
// error naming the chunk, so "the streamed reply equals the whole one" can fail for the right
// reason.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf::check {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text as sent
};

struct ChatReply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;
  int64_t prompt_tokens = -1;  // usage, -1 when the server sent none
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens
  std::string token_sha256;    // the server's digest of the reply's ids, when it sends one
};

// Choice 0 of a /v1/chat/completions body.
Expected<ChatReply> parse_chat_reply(const nlohmann::json& body);
// Choice 0 of a streamed reply's chunks (usage from the chunk that carries it).
Expected<ChatReply> assemble_chat_stream(const std::vector<nlohmann::json>& chunks);
// "" when a and b say the same (text, reasoning, tool names and arguments, finish reason);
// else the first difference, e.g. "content differs at byte 12".
std::string reply_difference(const ChatReply& a, const ChatReply& b);
// The text of choice 0 of a /v1/completions body.
Expected<std::string> completion_text(const nlohmann::json& body);

}  // namespace tf::check
