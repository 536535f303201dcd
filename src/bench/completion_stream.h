// Reads one /v1/completions or /v1/chat/completions response into a RequestRecord.
//
// Design: fed the SSE `data:` payloads as they arrive (or the whole body of a
// non-streamed response), with the arrival time of each. A chunk counts as a
// token time when it carries generated text: `text` (completions) or the delta's
// `content` / `reasoning_content` / tool-call arguments (chat). The token count is
// the server's usage.completion_tokens when it sends usage (we ask for it), else
// the number of such chunks. Anything malformed becomes an error on the record,
// never an exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_record.h"

namespace tf::bench {

class CompletionStreamReader {
 public:
  explicit CompletionStreamReader(bool chat) : chat_(chat) {}

  // One SSE data payload (a JSON chunk or "[DONE]") that arrived at `now_s`.
  void on_payload(const std::string& payload, double now_s);
  // The whole JSON body of a non-streamed response that ended at `now_s`.
  void on_body(const std::string& body, double now_s);

  // Copies what was read into `record` (first/each token time, token counts,
  // finish reason); sets record.ok = false with a message when the response
  // carried an error, was malformed, or (streamed) ended without [DONE].
  void finish(RequestRecord& record, bool streamed) const;

  bool failed() const { return !error_.empty(); }

 private:
  // Generated text of a completion choice or chat delta/message.
  std::string choice_text(const nlohmann::json& choice) const;
  void take_usage(const nlohmann::json& chunk);

  bool chat_;
  bool done_ = false;
  std::string error_;
  double first_token_s_ = -1.0;
  std::vector<double> token_times_s_;
  int64_t usage_completion_tokens_ = -1;
  int64_t usage_prompt_tokens_ = -1;
  std::string finish_reason_;
};

}  // namespace tf::bench
