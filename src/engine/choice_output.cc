#include "engine/choice_output.h"

#include <utility>

#include "text/code_points.h"

namespace tf::engine {
namespace {

// Markers the reasoning and tool-call parsers read in the text.
constexpr const char* kParserMarkers[] = {"<think>",   "</think>",   "<tool_call>",  "</tool_call>",
                                          "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};

}  // namespace

ChoiceOutput::ChoiceOutput(const text::Tokenizer& tokenizer, ChoiceOutputOptions options, int choice)
    : tok_(tokenizer),
      opt_(std::move(options)),
      choice_(choice),
      detok_(tokenizer, /*skip_special_tokens=*/false),
      stops_(opt_.stop, opt_.include_stop_str_in_output) {
  if (opt_.parse_reasoning) reasoning_.emplace(opt_.starts_in_reasoning);
  if (!opt_.tools.is_null()) tools_.emplace(opt_.tools);
  if (opt_.parse_reasoning || tools_) {
    for (const char* m : kParserMarkers) {
      if (auto id = tok_.token_to_id(m)) parser_markers_.insert(*id);
    }
  }
}

std::string ChoiceOutput::token_text(int32_t token) const {
  const int32_t ids[1] = {token};
  return tok_.decode(ids, /*skip_special_tokens=*/false);
}

void ChoiceOutput::record(int32_t token, const SampledToken& sampled, GenerationEvent& ev) {
  add_logprobs(token, sampled, ev);
  if (opt_.token_ids) ev.token_ids.push_back(token);
  digest_.add(token);
  ev.tokens_so_far = ++tokens_;
}

void ChoiceOutput::add_logprobs(int32_t token, const SampledToken& sampled, GenerationEvent& ev) const {
  if (!opt_.logprobs) return;
  TokenLogprob lp;
  lp.token = token_text(token);
  lp.token_id = token;
  lp.logprob = sampled.logprob;
  lp.text_offset = text_chars_;
  lp.reasoning = in_reasoning();  // before this token's text reaches the parser: </think> counts as reasoning
  const std::string bytes = tok_.token_bytes(token);
  lp.bytes.assign(bytes.begin(), bytes.end());
  for (const auto& t : sampled.top) {
    TopLogprob top;
    top.token = token_text(t.token);
    top.token_id = t.token;
    top.logprob = t.logprob;
    const std::string top_bytes = tok_.token_bytes(t.token);
    top.bytes.assign(top_bytes.begin(), top_bytes.end());
    lp.top.push_back(std::move(top));
  }
  ev.logprobs.push_back(std::move(lp));
}

void ChoiceOutput::count_text(const std::string& piece) {
  text_chars_ += text::count_code_points(piece);
}

void ChoiceOutput::route_content(const std::string& content, bool final, GenerationEvent& ev) {
  if (!tools_) {
    ev.content += content;
    return;
  }
  ToolParserDelta d = tools_->feed(content);
  if (final) {
    ToolParserDelta rest = tools_->finish();
    d.content += rest.content;
    d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  ev.content += d.content;
  for (const auto& c : d.calls) {
    ToolCallDelta out;
    out.index = static_cast<int>(c.index);
    if (c.name) {
      out.name = *c.name;
      out.id = opt_.call_id_prefix + std::to_string(c.index);
      tool_calls_made_ = std::max(tool_calls_made_, c.index + 1);
    }
    out.arguments = c.arguments;
    ev.tool_calls.push_back(std::move(out));
  }
}

void ChoiceOutput::route_text(const std::string& text, bool final, GenerationEvent& ev) {
  if (!reasoning_) {
    route_content(text, final, ev);
    return;
  }
  ReasoningDelta d = reasoning_->feed(text);
  if (final) {
    ReasoningDelta rest = reasoning_->finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
  }
  ev.reasoning += d.reasoning;
  if (!d.content.empty() || final) route_content(d.content, final, ev);
}

GenerationEvent ChoiceOutput::add(int32_t token, const SampledToken& sampled, bool& stopped) {
  GenerationEvent ev;
  ev.choice = choice_;
  record(token, sampled, ev);
  if (reasoning_ && reasoning_->in_reasoning()) ++reasoning_tokens_;
  stopped = stopped_;
  if (stopped_) return ev;
  const bool drop = opt_.skip_special_tokens && tok_.is_special(token) && !parser_markers_.count(token);
  if (drop) return ev;
  const std::string piece = detok_.add(token);
  if (piece.empty()) return ev;
  count_text(piece);
  StopStringMatcher::Result r = stops_.feed(piece);
  route_text(r.text, false, ev);
  if (r.stopped) {
    stopped_ = true;
    stopped = true;
    stop_index_ = r.stop_index;
  }
  return ev;
}

GenerationEvent ChoiceOutput::add_stop_token(int32_t token, const SampledToken& sampled) {
  GenerationEvent ev;
  ev.choice = choice_;
  record(token, sampled, ev);
  return ev;
}

GenerationEvent ChoiceOutput::finish() {
  GenerationEvent ev;
  ev.choice = choice_;
  ev.tokens_so_far = tokens_;
  std::string tail;
  if (!stopped_) {
    const std::string rest = detok_.finish();
    StopStringMatcher::Result r = stops_.feed(rest);
    tail = r.text;
    if (r.stopped) stop_index_ = r.stop_index;
    else tail += stops_.flush();
  }
  route_text(tail, true, ev);
  return ev;
}

}  // namespace tf::engine
