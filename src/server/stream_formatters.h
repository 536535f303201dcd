// SSE formatters for the three generation endpoints (api.md §1.5, §2, §3 Streaming).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/generation_session.h"

namespace tf::server {

class ChatStreamFormatter : public StreamFormatter {
 public:
  ChatStreamFormatter(ResponseMeta meta, int n, bool include_usage, bool include_reasoning, bool logprobs)
      : meta_(std::move(meta)), n_(n), include_usage_(include_usage), include_reasoning_(include_reasoning),
        logprobs_(logprobs) {}
  std::string start() override;
  std::string on_event(const GenerationEvent& ev, const ChoiceState& state) override;
  std::string on_error(const Status& error) override;
  std::string on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) override;

 private:
  ResponseMeta meta_;
  int n_;
  bool include_usage_, include_reasoning_, logprobs_;
};

class CompletionStreamFormatter : public StreamFormatter {
 public:
  // One formatter per prompt of a multi-prompt request: choices are numbered from
  // index_offset; only the last prompt's formatter ends the stream, with the usage
  // summed over all prompts in `total`.
  CompletionStreamFormatter(ResponseMeta meta, int n, bool include_usage, std::string echo, bool logprobs,
                            int index_offset, bool last, std::shared_ptr<UsageTotals> total)
      : meta_(std::move(meta)), n_(n), include_usage_(include_usage), echo_(std::move(echo)), logprobs_(logprobs),
        index_offset_(index_offset), last_(last), total_(std::move(total)) {}
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
};

// Responses API events: created, in_progress, items (added / deltas / done), completed.
class ResponsesStreamFormatter : public StreamFormatter {
 public:
  ResponsesStreamFormatter(ResponseMeta meta, Json echo) : meta_(std::move(meta)), echo_(std::move(echo)) {}
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
};

}  // namespace tf::server
