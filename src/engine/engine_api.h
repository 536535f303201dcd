// The narrow engine interface the HTTP layer is written against.
//
// Design: the server never includes engine internals; it talks to an `EngineApi`
// (implemented by the real engine later, by a scripted fake in tests). A request is
// submitted with a sink callback that receives `GenerationEvent`s from the engine's
// thread; the sink must not block (the server pushes them into a per-request queue).
// Reasoning/content splitting and tool-call parsing happen on the engine side (text
// layer parsers), so events already carry `reasoning`, `content` and tool-call deltas
// in the OpenAI streaming sense: a tool call's first delta has id and name, later
// deltas only argument fragments. The HTTP layer sees these names through
// server/engine_api.h (tf::server).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sampling/repetition_detector.h"

namespace tf::engine {

// repetition_penalty's range, the sampler's (SamplingParams::validate): (0, 2]. The
// server refuses anything else, so the 400 names the field.
inline constexpr double kMaxRepetitionPenalty = 2.0;

// Sampling and stopping, already validated by the server (ranges per api.md §1.1).
// Label tokens one request may score (GenerationRequest::label_tokens).
inline constexpr int kMaxLabelTokens = 64;

struct SamplingOptions {
  std::optional<double> temperature;  // unset: the model's generation_config default
  std::optional<double> top_p;
  std::optional<int> top_k;           // 0 or -1: off
  std::optional<double> min_p;
  std::optional<int64_t> seed;        // unset: derived from the prompt's token ids
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::map<int32_t, double> logit_bias;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int min_tokens = 0;
  int64_t max_tokens = 0;             // always set by the server (>= 0, fits the window)
  bool logprobs = false;
  int top_logprobs = 0;
  bool skip_special_tokens = true;
  // vLLM: only these ids may be sampled (empty: all); words never written (each is
  // tokenized as it stands and with a leading space, as vLLM does).
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::string> bad_words;
  // vLLM's repetition_detection: a reply whose tokens (its reasoning's included) end in
  // min_count copies of one block of min..max_pattern tokens finishes with "repetition".
  RepetitionRule repetition_detection;
};

// A structured-output constraint on the content (never on the reasoning).
struct StructuredOutput {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  nlohmann::json schema;             // kJsonSchema
  // kJsonSchema: the schema's JSON text in the client's key order, when the server has it
  // (nlohmann::json sorts keys; the answer's properties follow the schema's order).
  std::string schema_text;
  std::string pattern;               // kRegex, kGrammar (EBNF)
  std::vector<std::string> choices;  // kChoice
  // The request field it came from ("guided_json", "response_format", ...): the engine's
  // refusals of it start with "<param>: ", so that the server's 400 can name the field.
  std::string param;
};

// Everything of a chat prompt but its messages: a render of some of the messages (the system
// block alone, for prompt reuse) copies these whole, so a new option cannot be left behind.
struct ChatOptions {
  // Insertion-ordered: the template renders dicts (tool schemas, arguments) in the client's
  // key order, as transformers does.
  nlohmann::ordered_json tools;  // null or the OpenAI tools array
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::string reasoning_effort;                       // "", none, low, high, max, ...
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // render_chat_media also renders the system block alone (RenderedPrompt::system_tokens,
  // for prompt reuse); /tokenize, which only counts, turns that extra render off.
  bool find_system_block = true;
};

// A chat conversation, rendered into prompt tokens by the engine's chat template.
struct ChatPrompt : ChatOptions {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI messages, validated
};

// The images and videos of a rendered chat prompt: decoded and preprocessed by
// render_chat_media, encoded by the engine's vision tower when the prompt runs.
// Opaque to the server (engine/prompt_media.h).
struct PromptMedia;

// A rendered chat prompt: its tokens (each image/video placeholder already expanded
// to one token per feature) and its media (null for a text-only prompt).
struct RenderedPrompt {
  std::vector<int32_t> tokens;
  std::shared_ptr<const PromptMedia> media;
  // The leading tokens that the chat's system block (its leading system messages, with the
  // tools) renders to: every chat with the same system block starts with them, so prompt
  // reuse keeps a state there (GenerationRequest::shared_prefix_tokens). 0: none.
  int64_t system_tokens = 0;
};

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt_tokens;  // already rendered/tokenized
  std::shared_ptr<const PromptMedia> media;  // from render_chat_media; null: text only
  // Prompt reuse: a prefix of the prompt that other prompts likely share (RenderedPrompt::
  // system_tokens); the engine keeps a state near its end. 0: none.
  int64_t shared_prefix_tokens = 0;
  SamplingOptions sampling;
  StructuredOutput structured;
  int n = 1;
  // Chat: split reasoning (<think>) from content and parse tool calls with `tools`.
  bool parse_reasoning = false;
  bool thinking_enabled = true;
  nlohmann::ordered_json tools;        // null: no tool parsing (the client's key order)
  std::string tool_choice = "none";    // none, auto, required, or a function name
  bool named_tool_choice = false;      // tool_choice is a function's name
  bool parallel_tool_calls = true;
  // tool_choice "required" or named: the answer must be tool calls (tool_call_grammar.h).
  bool forces_tool_call() const { return !tools.is_null() && (named_tool_choice || tool_choice == "required"); }
  // Reasoning tokens allowed before the engine closes the reasoning itself (</think>);
  // -1: no limit. Only with parse_reasoning.
  int64_t reasoning_budget = -1;
  // >= 0: score the prompt too (completions' echo with logprobs): every prompt token gets a
  // logprob entry with this many top alternatives (GenerationEvent::prompt_logprobs), and the
  // request runs its prompt even with max_tokens 0. -1: no prompt logprobs.
  int prompt_logprobs = -1;
  // Label scoring (/v1/decisions): the request generates nothing (max_tokens 0); at the
  // prompt's end it reports the model's raw logprob of each of these ids (padding ids masked,
  // temperature 1, no penalties) on one event (GenerationEvent::label_logprobs). Empty: none.
  std::vector<int32_t> label_tokens;
  // Embedding (/v1/embeddings): the request generates nothing (max_tokens 0); at the prompt's
  // end it reports the model's final hidden state of the last token (after the final norm, as
  // it enters the lm_head; last-token pooling) on one event (GenerationEvent::embedding).
  bool embed = false;
  // vLLM's return_token_ids: every generated token's id rides on the delta event that adds it
  // (GenerationEvent::token_ids; the stop token's included), even when it shows no text yet.
  bool return_token_ids = false;
  // vLLM's cache_salt: this prompt resumes only from states of prompts with the same salt,
  // and its own kept states serve only them (cache/prompt_salt.h). Empty: unsalted.
  std::string cache_salt;
  // The reference engine's `draft`: false decodes this request serially, one token per step
  // (no copy or MTP drafts; the reply is the same either way, so this is for checking that
  // and for timing the serial path).
  bool drafts = true;
  // vLLM's priority: while requests wait for a slot or the cache pool, lower values are
  // admitted first (ties: arrival order). Running requests are not preempted.
  int32_t priority = 0;
  // A reply's warm-up (>= 0; the server's REPLY_WARMUP): the prompt is a finished chat with its
  // reply, run only so that its state is kept for the chat's next turn (prompt reuse). It
  // generates nothing (max_tokens 0, one choice) and reports only its finish. It runs only
  // when it resumes from a kept state that reaches this many prompt tokens (the reply's own
  // prompt: what is left to run is the reply) and would keep a state past that one; otherwise
  // it finishes at once. -1: an ordinary request.
  int64_t warm_from = -1;
};

struct TopLogprob {
  std::string token;
  double logprob = 0.0;
  std::vector<uint8_t> bytes;
  int32_t token_id = -1;  // the engine's (a fake engine may leave it unset)
};

struct TokenLogprob {
  std::string token;
  double logprob = 0.0;
  std::vector<uint8_t> bytes;
  std::vector<TopLogprob> top;  // descending
  // Code points of the choice's text before this token's text (/v1/completions
  // text_offset): a token that shows no text (half a character, a skipped special token)
  // adds none. -1 when unknown: the server then counts the text of the events before it.
  int64_t text_offset = -1;
  int32_t token_id = -1;  // the engine's (a fake engine may leave it unset)
  // Prompt logprobs: the token's rank under the model (vLLM's: ids with a logit >= its
  // own, so 1 for the most likely); 0 when not computed.
  int32_t rank = 0;
  // A generated token of the reasoning (the </think> that ends it included), not of the answer.
  bool reasoning = false;
};

struct ToolCallDelta {
  int index = 0;          // position of the call within the message
  std::string id;         // set on the first delta of a call only
  std::string name;       // set on the first delta of a call only
  std::string arguments;  // JSON fragment; fragments concatenate to the final string
};

// kRepetition: the reply fell into a loop its request's repetition_detection describes
// (vLLM's finish_reason "repetition").
enum class FinishReason { kStop, kLength, kToolCalls, kAbort, kRepetition };
const char* finish_reason_name(FinishReason r);

struct GenerationEvent {
  enum class Kind { kDelta, kFinish, kError };
  Kind kind = Kind::kDelta;
  int choice = 0;  // 0..n-1
  // kDelta: text is never split inside a UTF-8 sequence.
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> token_ids;  // kDelta: GenerationRequest::return_token_ids
  // kDelta: the choice's generated tokens so far, this event's included (a running count: an
  // event is only sent with text, logprobs or ids, so the tokens between two events add up).
  int64_t tokens_so_far = 0;
  // kDelta, once per choice before its first token's, when the request asked
  // (GenerationRequest::prompt_logprobs): one entry per prompt token, under the model's own
  // distribution (temperature 1, no penalties). The first token has nothing before it: its
  // entry's logprob and top mean nothing (the API's null). text_offset counts code points
  // of the prompt's text (its tokens decoded, special ones included) before the token.
  std::vector<TokenLogprob> prompt_logprobs;
  // kDelta, once per choice, when the request asked (GenerationRequest::label_tokens): the
  // logprob of each label token at the prompt's end, in the request's order.
  std::vector<double> label_logprobs;
  // kDelta, once per choice, when the request asked (GenerationRequest::embed): the final
  // hidden state of the prompt's last token (not normalized).
  std::vector<float> embedding;
  // kFinish: per choice, exactly once.
  FinishReason finish_reason = FinishReason::kStop;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  std::string stop_string;  // kFinish: the stop string that ended the choice ("" when none did)
  // kFinish: the SHA-256 of the choice's generated token ids, its stop token included (the
  // ids return_token_ids lists, as little-endian int32s; engine/token_digest.h).
  std::string token_sha256;
  // kError: the request failed after it was admitted (ends every choice).
  Status error;
};

using EventSink = std::function<void(GenerationEvent)>;

struct EngineHealth {
  bool ok = true;
  bool loading = false;
  bool busy = false;
  int64_t requests_running = 0;
  int64_t requests_waiting = 0;
  int64_t requests_total = 0;
  int64_t prompt_tokens_total = 0;
  int64_t completion_tokens_total = 0;
  int64_t cached_tokens_total = 0;
  int streams_decoding = 0;
  int streams_prefilling = 0;
  int streams_max = 0;
  int64_t context_length = 0;
  int64_t pool_tokens = 0;
  int64_t pool_free_tokens = 0;  // free for a new request: kept prompts' pages included (they give way)
  // Prompt reuse: the prompt states kept, and the prompt tokens they cover.
  int64_t kept_prompts = 0;
  int64_t kept_prompt_tokens = 0;
  // Why the kept prompts were kept (kept_mix; they add up to kept_prompts): at a prompt's
  // end (a repeated prompt or the chat's next turn resumes there), at the end of a chat's
  // system block, where a prompt stopped agreeing with a kept one (a shared prefix), or read
  // back from the prompt store.
  struct KeptMix {
    int64_t prompt_end = 0, system_block = 0, shared_prefix = 0, restored = 0;
  } kept_mix;
  // Requests that resumed from a kept prompt, and of those the ones that continued a chat:
  // their prompt went past the end of the prompt whose state they resumed from (the next
  // turn), rather than repeating it or sharing only its start.
  int64_t prompts_resumed_total = 0;
  int64_t chats_continued_total = 0;
  // Replies' warm-ups (GenerationRequest::warm_from) that ran, and the tokens they ran (not
  // counted as requests or prompt tokens above).
  int64_t reply_warmups_total = 0;
  int64_t reply_warmup_tokens_total = 0;
  // Engine iterations that ran the model: the last one's seconds and the mean of the last
  // kIterationWindow (0 before the first).
  double iteration_s = 0.0;
  double iteration_s_mean = 0.0;
  // PROMPT_STORE: the states on disk (state files, their blocks, bytes of both), states
  // written so far and the bytes written for them, states not written (the writer's queue
  // was full, or a write failed), resumed from, and states whose files failed their checks
  // when read (deleted).
  bool prompt_store = false;
  int64_t prompt_store_files = 0;
  int64_t prompt_store_blocks = 0;
  int64_t prompt_store_bytes = 0;
  int64_t prompt_store_written_total = 0;
  int64_t prompt_store_written_bytes_total = 0;
  int64_t prompt_store_skipped_total = 0;
  int64_t prompt_store_restored_total = 0;
  int64_t prompt_store_failed_reads_total = 0;
  int64_t prompt_store_read_ahead_total = 0;  // of the resumes, those read while the request waited
  // Model steps run so far, and (tensor parallelism) the world size and what the
  // model's all-reduces cost so far (CommStats): the bench reports per-step figures.
  int64_t model_steps = 0;
  int tp_world = 1;
  int64_t tp_all_reduce_calls = 0;
  double tp_all_reduce_seconds = 0.0;
  // Tokens chosen by the device sampler (Ops::sample_rows) rather than on the host.
  int64_t sampled_on_device_total = 0;
  // Image/video patches the vision tower encoded, and those it did not need to: the pictures
  // before the point a prompt resumed from (prompt reuse).
  int64_t vision_patches_total = 0;
  int64_t vision_patches_skipped_total = 0;
  // Device memory (Ops::memory_use; all zero on the CPU backend): tensors alive now (the
  // weights, the cache pool and the streams' states between steps), what the backend took
  // from the driver, and the most a step (its media encode included) took above what was
  // alive when it began: the working memory that MEMORY_RESERVE_GIB leaves room for.
  int64_t device_memory_in_use_bytes = 0;
  int64_t device_memory_held_bytes = 0;
  int64_t step_memory_peak_bytes = 0;
  // Speculative decoding (COPY): decode steps that verified drafts, the drafts verified,
  // and those kept (each kept draft is a token that cost no step of its own).
  int64_t spec_steps_total = 0;
  int64_t drafted_tokens_total = 0;
  int64_t accepted_tokens_total = 0;
  // Of those, the MTP layer's drafts (DRAFTER=mtp) and the ones kept; and the streams that
  // ran the layer (a server whose layer's drafts do not pay stops running it for new ones).
  int64_t mtp_streams_total = 0;
  int64_t mtp_drafted_tokens_total = 0;
  int64_t mtp_accepted_tokens_total = 0;
  // LOOP_GUARD: replies whose reasoning fell into a loop and was closed by the engine, and
  // replies a request's repetition_detection ended.
  int64_t loop_guard_closed_total = 0;
  int64_t repetition_stops_total = 0;
};

struct ModelInfo {
  std::string id;            // served name, e.g. GLM-5.3-Flash-EXL3
  std::string root;          // checkpoint directory
  int64_t context_length = 0;
  int64_t vocab_size = 0;
  int64_t created = 0;       // unix seconds
  int64_t max_queued_choices = 0;  // choices that may wait at once (MAX_QUEUED); 0: no limit
  int parallel = 0;                // streams decoded together (PARALLEL)
  int64_t reuse_grain = 0;         // prompt reuse keeps states at multiples of this many tokens (0: off)
  int64_t hidden_size = 0;         // the width of the model's hidden state (embeddings)
  bool vision = false;             // images and videos are taken (the vision tower is loaded)
  std::string chat_template;       // the template's Jinja source
  std::string bos_token, eos_token;  // tokenizer_config.json's ("" when it names none)
  std::string device;                // cpu | cuda: where the model runs (DEVICE, auto resolved)
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  virtual ModelInfo model_info() const = 0;
  virtual EngineHealth health() const = 0;
  virtual Expected<std::vector<int32_t>> tokenize(const std::string& text, bool add_special_tokens) const = 0;
  virtual Expected<std::vector<int32_t>> render_chat(const ChatPrompt& chat) const = 0;
  // The same with the messages' image and video parts (data URLs) decoded and their
  // placeholders expanded; a bad or unsupported media part is kInvalidArgument naming it.
  // The default (an engine without a vision tower): render_chat, no media.
  virtual Expected<RenderedPrompt> render_chat_media(const ChatPrompt& chat) const {
    auto tokens = render_chat(chat);
    if (!tokens) return tokens.status();
    return RenderedPrompt{std::move(*tokens), nullptr};
  }
  virtual Expected<std::string> detokenize(const std::vector<int32_t>& tokens) const = 0;
  // Token strings for /tokenize return_token_strs.
  virtual Expected<std::vector<std::string>> token_strings(const std::vector<int32_t>& tokens) const = 0;
  // Admits or queues the request. kResourceExhausted: queue full (429). The sink is
  // called from engine threads until a kFinish for every choice or a kError arrived.
  virtual Status submit(GenerationRequest request, EventSink sink) = 0;
  // Stops a request and frees what it holds; events may still arrive, then stop.
  virtual void cancel(const std::string& request_id) = 0;
};

}  // namespace tf::engine
