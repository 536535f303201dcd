// See stream_formatters.h.
#include "server/stream_formatters.h"

#include <algorithm>
#include <span>

#include "server/api_error.h"
#include "server/responses_reasoning.h"

namespace tf::server {

namespace {
const char* kDone = "data: [DONE]\n\n";
}  // namespace

std::pair<size_t, size_t> LogprobCursor::take(int choice, const ChoiceState& state, size_t end) {
  size_t& sent = sent_.at(static_cast<size_t>(choice));
  size_t begin = sent;
  sent = std::max(begin, std::min(end, state.logprobs.size()));
  return {begin, sent};
}

void TokenIdStream::add(Json& chunk, int choice, const ChoiceState& state, bool prompt_in_choice) {
  if (!on()) return;
  Json& c = chunk["choices"][0];
  if (first_.at(static_cast<size_t>(choice))) {
    first_[static_cast<size_t>(choice)] = false;
    // Chat sends the prompt once per stream (on choice 0's first chunk); completions per choice.
    if (prompt_in_choice)
      c["prompt_token_ids"] = *prompt_ids_;
    else if (choice == 0)
      chunk["prompt_token_ids"] = *prompt_ids_;
  }
  size_t& sent = sent_.at(static_cast<size_t>(choice));
  c["token_ids"] = std::vector<int32_t>(state.token_ids.begin() + static_cast<std::ptrdiff_t>(sent),
                                        state.token_ids.end());
  sent = state.token_ids.size();
}

// ---- chat ----

std::string ChatStreamFormatter::send(Json chunk, int choice, const ChoiceState& state, bool ids) {
  if (ids) ids_.add(chunk, choice, state, false);
  continuous_.add(chunk, state);
  return sse_data(chunk);
}

std::string ChatStreamFormatter::start() {
  std::string out;
  for (int i = 0; i < n_; ++i)
    out += send(
        chat_chunk_json(meta_, i, {{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}, nullptr), i,
        ChoiceState{});
  return out;
}

std::string ChatStreamFormatter::on_event(const GenerationEvent& ev, const ChoiceState& state) {
  if (ev.kind == GenerationEvent::Kind::kDelta) {
    Json delta = chat_delta_json(ev, include_reasoning_);
    if (delta.is_null()) return "";  // its logprobs and token ids wait for the next chunk
    return send(chat_chunk_json(meta_, ev.choice, delta, nullptr, take_logprobs(ev.choice, state)), ev.choice,
                state);
  }
  std::string out;
  if ((logprobs_ && cursor_.pending(ev.choice, state)) || ids_.pending(ev.choice, state))
    out += send(chat_chunk_json(meta_, ev.choice, Json::object(), nullptr, take_logprobs(ev.choice, state)),
                ev.choice, state);
  Json last = chat_chunk_json(meta_, ev.choice, Json::object(), finish_reason_name(state.finish_reason));
  add_token_sha256(last["choices"][0], state);
  return out + send(std::move(last), ev.choice, state, false);
}

Json ChatStreamFormatter::take_logprobs(int choice, const ChoiceState& state) {
  if (!logprobs_) return Json();
  auto [begin, end] = cursor_.take(choice, state);
  if (begin == end) return Json();
  return chat_logprobs_json(std::span(state.logprobs).subspan(begin, end - begin));
}

std::string ChatStreamFormatter::on_error(const Status& error) {
  return sse_data(api_error_from_status(error).to_json()) + kDone;
}

std::string ChatStreamFormatter::on_done(const std::vector<ChoiceState>&, const UsageTotals& usage) {
  std::string out;
  if (include_usage_) {
    Json chunk = {{"id", meta_.id},       {"object", "chat.completion.chunk"}, {"created", meta_.created},
                  {"model", meta_.model}, {"system_fingerprint", nullptr},      {"choices", Json::array()},
                  {"usage", chat_usage_json(usage)}};
    out += sse_data(chunk);
  }
  return out + kDone;
}

// ---- completions ----

std::string CompletionStreamFormatter::start() {
  std::string out;
  if (echo_.empty() || echo_waits_for_prompt_logprobs()) return out;
  for (int i = 0; i < n_; ++i) out += echo_chunk(i, ChoiceState{});
  return out;
}

std::string CompletionStreamFormatter::echo_chunk(int choice, const ChoiceState& state) {
  if (echoed_.at(static_cast<size_t>(choice))) return "";
  echoed_[static_cast<size_t>(choice)] = true;
  Json logprobs;
  if (logprobs_) logprobs = prompt_logprobs_json(state.prompt_logprobs, echo_chars_);
  return chunk(choice, state, echo_, nullptr, logprobs);
}

std::string CompletionStreamFormatter::chunk(int choice, const ChoiceState& state, const std::string& text,
                                             const Json& finish_reason, const Json& logprobs) {
  Json c = text_completion_chunk_json(meta_, index_offset_ + choice, text, finish_reason, logprobs);
  if (finish_reason.is_null()) ids_.add(c, choice, state, true);
  else
    add_token_sha256(c["choices"][0], state);
  continuous_.add(c, state);
  return sse_data(c);
}

std::string CompletionStreamFormatter::on_event(const GenerationEvent& ev, const ChoiceState& state) {
  if (echo_waits_for_prompt_logprobs()) {
    std::string echo = echo_chunk(ev.choice, state);
    if (!echo.empty()) return echo + on_event(ev, state);
  }
  auto take_logprobs = [&](size_t end) {
    if (!logprobs_) return Json();
    auto [begin, taken] = cursor_.take(ev.choice, state, end);
    return completion_logprobs_json(state, begin, taken, echo_chars_);
  };
  if (ev.kind == GenerationEvent::Kind::kDelta) {
    if (ev.content.empty()) return "";  // its logprobs and token ids wait for the next chunk
    size_t ready = state.logprobs.size();
    while (ready > 0 && state.text_offsets[ready - 1] > state.content_chars) --ready;
    return chunk(ev.choice, state, ev.content, nullptr, take_logprobs(ready));
  }
  std::string out;
  if ((logprobs_ && cursor_.pending(ev.choice, state)) || ids_.pending(ev.choice, state))
    out += chunk(ev.choice, state, "", nullptr, take_logprobs(SIZE_MAX));
  return out + chunk(ev.choice, state, "", finish_reason_name(state.finish_reason));
}

std::string CompletionStreamFormatter::on_error(const Status& error) {
  return sse_data(api_error_from_status(error).to_json()) + kDone;
}

std::string CompletionStreamFormatter::on_done(const std::vector<ChoiceState>&, const UsageTotals& usage) {
  *total_ += usage;
  if (!last_) return "";
  std::string out;
  if (include_usage_) {
    Json chunk = {{"id", meta_.id},       {"object", "text_completion"}, {"created", meta_.created},
                  {"model", meta_.model}, {"choices", Json::array()},     {"usage", completion_usage_json(*total_)}};
    out += sse_data(chunk);
  }
  return out + kDone;
}

// ---- responses ----

std::string ResponsesStreamFormatter::emit(const std::string& type, Json payload) {
  payload["type"] = type;
  payload["sequence_number"] = seq_++;
  return sse_event(type, payload);
}

std::string ResponsesStreamFormatter::start() {
  Json r = response_object_json(meta_, echo_, "in_progress", Json::array(), nullptr);
  std::string out = emit("response.created", {{"response", r}});
  out += emit("response.in_progress", {{"response", r}});
  return out;
}

std::string ResponsesStreamFormatter::close_item() {
  if (open_ == Open::kNone) return "";
  std::string out;
  int idx = static_cast<int>(output_.size());
  std::string id = item_["id"];
  if (open_ == Open::kCall) {
    if (text_.empty()) text_ = "{}";
    out += emit("response.function_call_arguments.done",
                {{"item_id", id}, {"output_index", idx}, {"name", item_["name"]}, {"arguments", text_}});
    item_["arguments"] = text_;
  } else {
    bool reasoning = open_ == Open::kReasoning;
    Json part = reasoning ? Json{{"type", "reasoning_text"}, {"text", text_}}
                          : Json{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}};
    Json done = {{"item_id", id}, {"output_index", idx}, {"content_index", 0}, {"text", text_}};
    if (logprobs_ && !reasoning) {
      for (const Json& lp : answer_logprobs_json(pending_)) part_logprobs_.push_back(lp);
      pending_.clear();
      part["logprobs"] = part_logprobs_;
      done["logprobs"] = part_logprobs_;
      part_logprobs_ = Json::array();
    }
    out += emit(reasoning ? "response.reasoning_text.done" : "response.output_text.done", std::move(done));
    out += emit("response.content_part.done", {{"item_id", id}, {"output_index", idx}, {"content_index", 0}, {"part", part}});
    item_["content"] = Json::array({part});
    if (reasoning && sealed_reasoning_) item_["encrypted_content"] = reasoning_encrypted_content(text_);
  }
  item_["status"] = "completed";
  out += emit("response.output_item.done", {{"output_index", idx}, {"item", item_}});
  output_.push_back(item_);
  open_ = Open::kNone;
  text_.clear();
  return out;
}

std::string ResponsesStreamFormatter::open_text_item(Open kind) {
  std::string out = close_item();
  int idx = static_cast<int>(output_.size());
  std::string suffix = idx == 0 ? "" : "_" + std::to_string(idx);
  bool reasoning = kind == Open::kReasoning;
  std::string id = (reasoning ? "rs_" : "msg_") + meta_.id.substr(5) + suffix;
  item_ = reasoning ? Json{{"type", "reasoning"}, {"id", id}, {"summary", Json::array()}, {"content", Json::array()},
                           {"status", "in_progress"}}
                    : Json{{"type", "message"}, {"id", id}, {"role", "assistant"}, {"status", "in_progress"},
                           {"content", Json::array()}};
  out += emit("response.output_item.added", {{"output_index", idx}, {"item", item_}});
  Json part = reasoning ? Json{{"type", "reasoning_text"}, {"text", ""}}
                        : Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
  out += emit("response.content_part.added", {{"item_id", id}, {"output_index", idx}, {"content_index", 0}, {"part", part}});
  open_ = kind;
  return out;
}

std::string ResponsesStreamFormatter::on_event(const GenerationEvent& ev, const ChoiceState&) {
  if (ev.kind != GenerationEvent::Kind::kDelta || ev.choice != 0) return "";
  std::string out;
  if (logprobs_)
    for (const TokenLogprob& lp : ev.logprobs)
      if (!lp.reasoning) pending_.push_back(lp);
  if (!ev.reasoning.empty()) {
    if (open_ != Open::kReasoning) out += open_text_item(Open::kReasoning);
    text_ += ev.reasoning;
    out += emit("response.reasoning_text.delta", {{"item_id", item_["id"]}, {"output_index", output_.size()},
                                                  {"content_index", 0}, {"delta", ev.reasoning}});
  }
  if (!ev.content.empty()) {
    if (open_ != Open::kMessage) out += open_text_item(Open::kMessage);
    text_ += ev.content;
    Json lps = Json::array();
    if (logprobs_) {
      lps = answer_logprobs_json(pending_);
      pending_.clear();
      for (const Json& lp : lps) part_logprobs_.push_back(lp);
    }
    out += emit("response.output_text.delta", {{"item_id", item_["id"]},
                                               {"output_index", output_.size()},
                                               {"content_index", 0},
                                               {"delta", ev.content},
                                               {"logprobs", std::move(lps)}});
  }
  for (const ToolCallDelta& t : ev.tool_calls) {
    if (open_ != Open::kCall || t.index != call_index_) {
      out += close_item();
      call_index_ = t.index;
      int idx = static_cast<int>(output_.size());
      item_ = {{"type", "function_call"}, {"id", "fc_" + meta_.id.substr(5) + "_" + std::to_string(t.index)},
               {"call_id", t.id},         {"name", t.name},
               {"arguments", ""},         {"status", "in_progress"}};
      out += emit("response.output_item.added", {{"output_index", idx}, {"item", item_}});
      open_ = Open::kCall;
    }
    if (!t.arguments.empty()) {
      text_ += t.arguments;
      out += emit("response.function_call_arguments.delta",
                  {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", t.arguments}});
    }
  }
  return out;
}

std::string ResponsesStreamFormatter::on_error(const Status& error) {
  ApiError e = api_error_from_status(error);
  return emit("error", {{"code", e.code() ? Json(*e.code()) : Json()}, {"message", e.what()}, {"param", nullptr}});
}

std::string ResponsesStreamFormatter::on_done(const std::vector<ChoiceState>& choices, const UsageTotals& usage) {
  std::string out = close_item();
  bool incomplete = !choices.empty() && choices[0].finish_reason == FinishReason::kLength;
  Json r = response_object_json(meta_, echo_, incomplete ? "incomplete" : "completed", output_,
                                response_usage_json(usage));
  if (on_completed_) on_completed_(r);
  out += emit(incomplete ? "response.incomplete" : "response.completed", {{"response", r}});
  return out;
}

}  // namespace tf::server
