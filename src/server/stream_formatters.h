// SSE formatters for the three generation endpoints (api.md §1.5, §2, §3 Streaming).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "server/generation_session.h"

namespace tf::server {

// Which of each choice's logprob entries (ChoiceState::logprobs) a stream has sent. A
// token that shows no text yet (part of a multi-byte character, a skipped special token,
// text held back) gets no chunk of its own: its entry rides on the choice's next chunk,
// or on one sent just before the finish chunk, so the stream carries every entry of the
// non-streaming reply exactly once, in order.
class LogprobCursor {
 public:
  explicit LogprobCursor(int n) : sent_(static_cast<size_t>(n > 0 ? n : 1), 0) {}
  // The entries of `choice` not sent yet, up to `end` (all when end is past them); marks
  // them sent. Returns the range [begin, end). Completions keep back the entries whose
  // text is still held back (their text_offset is past the text sent so far), so that an
  // offset is never clamped before the final text is known.
  std::pair<size_t, size_t> take(int choice, const ChoiceState& state, size_t end = SIZE_MAX);
  bool pending(int choice, const ChoiceState& state) const {
    return sent_.at(static_cast<size_t>(choice)) < state.logprobs.size();
  }

 private:
  std::vector<size_t> sent_;
};

// vLLM's return_token_ids in a stream: each chunk of a choice carries the ids of the tokens
// generated since its last chunk (`token_ids`; a token that showed no text rides on the next
// chunk, or on one just before the finish chunk), and the prompt's ids come once (chat: on the
// stream's first chunk; completions: on each choice's first chunk). Off when built with null.
class TokenIdStream {
 public:
  TokenIdStream(std::shared_ptr<const std::vector<int32_t>> prompt_ids, int n)
      : prompt_ids_(std::move(prompt_ids)),
        sent_(static_cast<size_t>(n > 0 ? n : 1), 0),
        first_(static_cast<size_t>(n > 0 ? n : 1), true) {}
  bool on() const { return prompt_ids_ != nullptr; }
  bool pending(int choice, const ChoiceState& state) const {
    return on() && sent_.at(static_cast<size_t>(choice)) < state.token_ids.size();
  }
  // Adds the ids not sent yet to the chunk's choice; and the prompt's, on a choice's first
  // chunk, at the chunk's top (chat) or in its choice (completions).
  void add(Json& chunk, int choice, const ChoiceState& state, bool prompt_in_choice);

 private:
  std::shared_ptr<const std::vector<int32_t>> prompt_ids_;
  std::vector<size_t> sent_;
  std::vector<bool> first_;
};

// vLLM's stream_options.continuous_usage_stats: every chunk of a choice carries the usage so
// far (the prompt's tokens and the choice's generated tokens). Off when prompt_tokens < 0.
struct ContinuousUsage {
  int64_t prompt_tokens = -1;
  void add(Json& chunk, const ChoiceState& state) const {
    if (prompt_tokens < 0) return;
    chunk["usage"] = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", state.tokens_so_far},
                      {"total_tokens", prompt_tokens + state.tokens_so_far}};
  }
};

class ChatStreamFormatter : public StreamFormatter {
 public:
  ChatStreamFormatter(ResponseMeta meta, int n, bool include_usage, bool include_reasoning, bool logprobs,
                      std::shared_ptr<const std::vector<int32_t>> prompt_ids = nullptr,
                      ContinuousUsage continuous = {})
      : meta_(std::move(meta)),
        n_(n),
        include_usage_(include_usage),
        include_reasoning_(include_reasoning),
        logprobs_(logprobs),
        cursor_(n),
        ids_(std::move(prompt_ids), n),
        continuous_(continuous) {}
  std::string start() override;
  std::string on_event(const GenerationEvent& ev, const ChoiceState& state) override;
  std::string on_error(const Status& error) override;
  std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) override;

 private:
  Json take_logprobs(int choice, const ChoiceState& state);
  ResponseMeta meta_;
  int n_;
  bool include_usage_, include_reasoning_, logprobs_;
  LogprobCursor cursor_;
  TokenIdStream ids_;
  ContinuousUsage continuous_;
  // A chunk of a choice, with its token ids and usage so far when asked for.
  std::string send(Json chunk, int choice, const ChoiceState& state, bool ids = true);
};

class CompletionStreamFormatter : public StreamFormatter {
 public:
  // One formatter per prompt of a multi-prompt request: choices are numbered from
  // index_offset; only the last prompt's formatter ends the stream, with the usage
  // summed over all prompts in `total`. With echo and logprobs, a choice's echo chunk waits
  // for its first event, which carries the prompt's logprobs (ChoiceState::prompt_logprobs).
  CompletionStreamFormatter(ResponseMeta meta, int n, bool include_usage, std::string echo, bool logprobs,
                            int index_offset, bool last, std::shared_ptr<UsageTotals> total,
                            std::shared_ptr<const std::vector<int32_t>> prompt_ids = nullptr,
                            ContinuousUsage continuous = {})
      : meta_(std::move(meta)),
        n_(n),
        include_usage_(include_usage),
        echo_(std::move(echo)),
        logprobs_(logprobs),
        index_offset_(index_offset),
        last_(last),
        total_(std::move(total)),
        cursor_(n),
        echo_chars_(code_points(echo_)),
        echoed_(static_cast<size_t>(n > 0 ? n : 1), false),
        ids_(std::move(prompt_ids), n),
        continuous_(continuous) {}
  std::string start() override;
  std::string on_event(const GenerationEvent& ev, const ChoiceState& state) override;
  std::string on_error(const Status& error) override;
  std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) override;

 private:
  ResponseMeta meta_;
  int n_;
  bool include_usage_;
  std::string echo_;
  bool logprobs_;
  int index_offset_;
  bool last_;
  std::shared_ptr<UsageTotals> total_;
  LogprobCursor cursor_;
  int64_t echo_chars_;  // text_offset of the first generated character
  std::vector<bool> echoed_;  // per choice: its echo chunk was sent
  TokenIdStream ids_;
  ContinuousUsage continuous_;
  bool echo_waits_for_prompt_logprobs() const { return !echo_.empty() && logprobs_; }
  std::string echo_chunk(int choice, const ChoiceState& state);
  // A chunk of `choice` (its token ids added when asked for).
  std::string chunk(int choice, const ChoiceState& state, const std::string& text, const Json& finish_reason,
                    const Json& logprobs = nullptr);
};

// Responses API events: created, in_progress, items (added / deltas / done), completed.
class ResponsesStreamFormatter : public StreamFormatter {
 public:
  // on_completed: called with the final response object (the handler stores it).
  // logprobs: each output_text delta carries its tokens' logprobs, the done part all of them.
  // sealed_reasoning: a reasoning item, when done, carries its text as encrypted_content.
  ResponsesStreamFormatter(ResponseMeta meta, Json echo,
                           std::function<void(const Json&)> on_completed = nullptr, bool logprobs = false,
                           bool sealed_reasoning = false)
      : meta_(std::move(meta)),
        echo_(std::move(echo)),
        on_completed_(std::move(on_completed)),
        logprobs_(logprobs),
        sealed_reasoning_(sealed_reasoning) {}
  std::string start() override;
  std::string on_event(const GenerationEvent& ev, const ChoiceState& state) override;
  std::string on_error(const Status& error) override;
  std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) override;

 private:
  enum class Open { kNone, kReasoning, kMessage, kCall };
  std::string emit(const std::string& type, Json payload);
  std::string close_item();
  std::string open_text_item(Open kind);
  ResponseMeta meta_;
  Json echo_;
  int64_t seq_ = 0;
  Open open_ = Open::kNone;
  int call_index_ = -1;
  Json item_;        // the open item
  std::string text_; // its accumulated text or arguments
  Json output_ = Json::array();
  std::function<void(const Json&)> on_completed_;
  bool logprobs_ = false;
  bool sealed_reasoning_ = false;
  std::vector<TokenLogprob> pending_;   // the answer's token logprobs not sent with a delta yet
  Json part_logprobs_ = Json::array();  // the open message's, for its done part
};

}  // namespace tf::server
