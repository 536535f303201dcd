// OpenAI request bodies parsed into plain structs (api.md §1-§4). Parsing validates
// types and ranges and throws ApiError (400 naming the field); unknown fields are
// ignored as OpenAI and vLLM do. The prompt is not rendered here: chat requests keep
// a ChatPrompt that the route renders through EngineApi::render_chat.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/engine_api.h"
#include "server/json_fields.h"
#include "server/media_parts.h"

namespace tf::server {

constexpr int kMaxN = 128;
constexpr int kMaxStopStrings = 16;
// Each stop string is searched for in the held-back text at every token, and text is held
// while it may be starting one: 16 stop strings of a megabyte cost 2 ms a token, of 6 MB
// (a 96 MiB body) ~100 ms, on the engine's thread.
constexpr size_t kMaxStopStringBytes = 4096;
// vLLM's bad_words: each is checked against the reply's tail at every token (<= 4 KiB each).
constexpr int kMaxBadWords = 64;
// vLLM's cache_salt: vLLM suggests 43 base64 characters (256 bits); hashed once per request.
constexpr size_t kMaxCacheSaltBytes = 4096;
// vLLM's prompt_logprobs: top alternatives per prompt token at most (the device scorer's limit).
constexpr int kMaxPromptLogprobs = 20;

// Fields shared by chat, completions and responses.
// priority "background": after any request of priority below this.
inline constexpr int32_t kBackgroundPriority = 1 << 20;

struct CommonRequest {
  std::optional<std::string> model;
  SamplingOptions sampling;
  StructuredOutput structured;
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;      // vLLM: stream_options.continuous_usage_stats (with include_usage)
  bool return_token_ids = false;      // vLLM: the prompt's and the reply's token ids in the reply
  // vLLM's truncate_prompt_tokens: only the prompt's last k tokens are run; -1: the last
  // CONTEXT tokens.
  std::optional<int64_t> truncate_prompt_tokens;
  std::string cache_salt;  // vLLM: prompt reuse only between requests of the same salt (empty: none)
  // vLLM's prompt_logprobs: each prompt token's logprob and rank, with this many top
  // alternatives (0..20; not with stream). Unset: none.
  std::optional<int> prompt_logprobs;
  int32_t priority = 0;               // vLLM: lower values leave the waiting queue first
  bool drafts = true;                 // the reference engine's `draft`: false decodes serially
  std::optional<int64_t> max_tokens;  // unset: fill the window (chat) / 16 (completions)
};

struct ChatRequest : CommonRequest {
  ChatPrompt chat;
  std::string tool_choice = "none";  // none, auto, required, or the named function
  bool named_tool_choice = false;
  bool parallel_tool_calls = true;
  bool include_reasoning = true;
  bool thinking_enabled = true;
  std::optional<int64_t> reasoning_budget;  // thinking_budget: reasoning tokens before </think> is forced
};

// A completion prompt: text or token ids.
using PromptInput = std::variant<std::string, std::vector<int32_t>>;

// A string, a list of strings, a list of token ids or a list of such lists (OpenAI's
// completions `prompt`, embeddings `input`): one PromptInput each; 400s name `param`.
std::vector<PromptInput> parse_prompt_inputs(const Json& v, const std::string& param);

struct CompletionRequest : CommonRequest {
  std::vector<PromptInput> prompts;
  bool echo = false;
  int logprobs = -1;  // -1: none; else the number of top logprobs (0..20)
};

struct ResponsesRequest : CommonRequest {
  ChatRequest chat;          // input/instructions/tools mapped onto a chat request
  Json echo = Json::object();  // request fields echoed in the response object
  // The conversation's input items: the previous response's (previous_response_id), then this
  // request's `input` as items (instructions are not carried over, as in OpenAI's API).
  Json input_items = Json::array();
  // include: ["message.output_text.logprobs"]: each output_text part carries its tokens'
  // logprobs (top_logprobs alternatives each).
  bool output_logprobs = false;
  // include: ["reasoning.encrypted_content"]: each reasoning item carries its text as
  // encrypted_content (responses_reasoning.h).
  bool sealed_reasoning = false;
};

struct TokenizeRequest {
  std::optional<std::string> model;
  bool is_chat = false;
  std::string prompt;
  ChatPrompt chat;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};

// Parses the sampling/stop/structured-output fields common to every endpoint.
void parse_common(const Json& body, CommonRequest& out, bool chat_logprobs);
// max_completion_tokens (primary) wins over max_tokens (secondary, may be null); >= lo.
std::optional<int64_t> parse_max_tokens(const Json& body, const char* primary, const char* secondary, int64_t lo);
// vLLM refuses min_tokens above the max_tokens a request gives (a 400 naming min_tokens).
void check_min_tokens(int min_tokens, std::optional<int64_t> max_tokens);
// Validates OpenAI messages (roles, content parts) for a text-only model.
Json validate_messages(const Json& messages, const std::string& param, MediaUrlPolicy policy = {});

// A replayed tool call's `arguments` string must hold a JSON object (the chat template walks
// its members): else a 400 naming `param`. Blank text counts as no arguments.
void check_call_arguments(const std::string& args, const std::string& param);

// The json_schema constraint of a request body (parsed in the client's key order) as JSON
// text with its keys in that order ("" when there is none), from the fields the endpoint reads:
// chat and completions guided_json, structured_outputs.json or response_format.json_schema
// .schema; Responses text.format.schema; Anthropic output_config.format.schema.
enum class SchemaSource { kChat, kResponses, kMessages };
std::string ordered_schema_text(const Json& body, SchemaSource source);

ChatRequest parse_chat_request(const Json& body, MediaUrlPolicy policy = {});
CompletionRequest parse_completion_request(const Json& body);
// previous_items: the stored conversation `previous_response_id` names (ResponseStore), put
// before `input`; without it a previous_response_id is refused.
ResponsesRequest parse_responses_request(const Json& body, MediaUrlPolicy policy = {},
                                         const Json* previous_items = nullptr);
TokenizeRequest parse_tokenize_request(const Json& body, MediaUrlPolicy policy = {});
DetokenizeRequest parse_detokenize_request(const Json& body);

}  // namespace tf::server
