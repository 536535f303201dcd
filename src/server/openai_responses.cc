// See openai_responses.h.
#include "server/openai_responses.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "server/responses_reasoning.h"
#include "text/code_points.h"

namespace tf::server {

void ChoiceState::apply(const GenerationEvent& ev) {
  if (ev.kind == GenerationEvent::Kind::kDelta) {
    reasoning += ev.reasoning;
    const int64_t chars_before = content_chars;
    content += ev.content;
    content_chars += code_points(ev.content);
    for (const ToolCallDelta& d : ev.tool_calls) {
      if (d.index < 0 || d.index > 1024) continue;
      if (static_cast<size_t>(d.index) >= tool_calls.size()) tool_calls.resize(static_cast<size_t>(d.index) + 1);
      ToolCallState& t = tool_calls[static_cast<size_t>(d.index)];
      if (!d.id.empty()) t.id = d.id;
      if (!d.name.empty()) t.name = d.name;
      t.arguments += d.arguments;
    }
    if (!ev.prompt_logprobs.empty()) prompt_logprobs = ev.prompt_logprobs;
    if (!ev.label_logprobs.empty()) label_logprobs = ev.label_logprobs;
    if (!ev.embedding.empty()) embedding = ev.embedding;
    token_ids.insert(token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    tokens_so_far = std::max(tokens_so_far, ev.tokens_so_far);
    for (const TokenLogprob& lp : ev.logprobs) {
      logprobs.push_back(lp);
      text_offsets.push_back(lp.text_offset >= 0 ? lp.text_offset : chars_before);
    }
  } else if (ev.kind == GenerationEvent::Kind::kFinish) {
    finished = true;
    finish_reason = ev.finish_reason;
    completion_tokens = ev.completion_tokens;
    tokens_so_far = ev.completion_tokens;
    reasoning_tokens = ev.reasoning_tokens;
    cached_prompt_tokens = ev.cached_prompt_tokens;
    stop_string = ev.stop_string;
    token_sha256 = ev.token_sha256;
  }
}

UsageTotals sum_usage(const std::vector<ChoiceState>& choices, int64_t prompt_tokens) {
  UsageTotals u;
  u.prompt_tokens = prompt_tokens;
  for (const ChoiceState& c : choices) {
    u.completion_tokens += c.completion_tokens;
    u.reasoning_tokens += c.reasoning_tokens;
    u.cached_tokens = std::max(u.cached_tokens, c.cached_prompt_tokens);
  }
  return u;
}

Json chat_usage_json(const UsageTotals& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

// OpenAI's CompletionUsage, as for chat: prompt_tokens_details.cached_tokens says how many
// prompt tokens resumed from a kept state (lm-eval and agents read it from completions too).
Json completion_usage_json(const UsageTotals& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string make_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffULL));
  return prefix + buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

Json bytes_json(const std::vector<uint8_t>& b) {
  Json a = Json::array();
  for (uint8_t x : b) a.push_back(static_cast<int>(x));
  return a;
}

Json null_if_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') return s;
  return nullptr;
}

}  // namespace

Json chat_logprobs_json(std::span<const TokenLogprob> lps) {
  Json content = Json::array();
  for (const TokenLogprob& lp : lps) {
    Json top = Json::array();
    for (const TopLogprob& t : lp.top)
      top.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_json(t.bytes)}});
    content.push_back({{"token", lp.token}, {"logprob", lp.logprob}, {"bytes", bytes_json(lp.bytes)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

int64_t code_points(std::string_view utf8) { return text::count_code_points(utf8); }

Json completion_logprobs_json(const ChoiceState& c, size_t begin, size_t end, int64_t echo_chars) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (size_t i = begin; i < end; ++i) {
    const TokenLogprob& lp = c.logprobs[i];
    tokens.push_back(lp.token);
    token_lps.push_back(lp.logprob);
    Json top = Json::object();
    for (const TopLogprob& t : lp.top) top[t.token] = t.logprob;
    tops.push_back(top);
    offsets.push_back(echo_chars + std::min(c.text_offsets[i], c.content_chars));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json prompt_logprobs_json(std::span<const TokenLogprob> entries, int64_t echo_chars) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TokenLogprob& lp = entries[i];
    tokens.push_back(lp.token);
    Json top = Json::object();
    for (const TopLogprob& t : lp.top) top[t.token] = t.logprob;
    token_lps.push_back(i == 0 ? Json() : Json(lp.logprob));
    tops.push_back(i == 0 ? Json() : top);
    offsets.push_back(std::clamp<int64_t>(lp.text_offset, 0, echo_chars));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json vllm_prompt_logprobs_json(std::span<const TokenLogprob> entries, int top_n) {
  const auto clamped = [](double lp) { return std::isinf(lp) && lp < 0 ? -9999.0 : lp; };
  Json out = Json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TokenLogprob& lp = entries[i];
    if (i == 0 || std::isnan(lp.logprob)) {
      out.push_back(nullptr);
      continue;
    }
    Json position = Json::object();
    position[std::to_string(lp.token_id)] = {
        {"logprob", clamped(lp.logprob)}, {"rank", lp.rank}, {"decoded_token", lp.token}};
    int listed = 0;
    for (const TopLogprob& t : lp.top) {
      if (listed == top_n) break;
      ++listed;  // the top list is most likely first; the own token appended after it is never reached
      if (t.token_id == lp.token_id) continue;
      position[std::to_string(t.token_id)] = {
          {"logprob", clamped(t.logprob)}, {"rank", listed}, {"decoded_token", t.token}};
    }
    out.push_back(std::move(position));
  }
  return out;
}

void keep_top_logprobs(std::vector<TokenLogprob>& entries, int top_n) {
  for (TokenLogprob& lp : entries) {
    std::vector<TopLogprob> kept;
    for (size_t j = 0; j < lp.top.size(); ++j)
      if (static_cast<int>(j) < top_n || (lp.token_id >= 0 && lp.top[j].token_id == lp.token_id))
        kept.push_back(std::move(lp.top[j]));
    lp.top = std::move(kept);
  }
}

Json concat_completion_logprobs(Json first, const Json& then) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const Json& v : then[k]) first[k].push_back(v);
  return first;
}

void add_token_sha256(Json& choice, const ChoiceState& c) {
  if (!c.token_sha256.empty()) choice["token_sha256"] = c.token_sha256;
}

Json chat_completion_json(const ResponseMeta& meta, const std::vector<ChoiceState>& choices, const UsageTotals& usage,
                          bool include_reasoning, bool want_logprobs) {
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceState& c = choices[i];
    Json msg = {{"role", "assistant"}, {"content", null_if_blank(c.content)}, {"refusal", nullptr}};
    if (include_reasoning) {
      Json r = c.reasoning.empty() ? Json() : Json(c.reasoning);
      msg["reasoning_content"] = r;
      msg["reasoning"] = r;
    }
    if (!c.tool_calls.empty()) {
      Json calls = Json::array();
      // The arguments as streamed: a closed call without any is "{}" already (the parser writes it);
      // one cut off by max_tokens right after its name keeps its "" here too (finish_reason "length").
      for (const ToolCallState& t : c.tool_calls)
        calls.push_back({{"id", t.id},
                         {"type", "function"},
                         {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      msg["tool_calls"] = calls;
    }
    out_choices.push_back({{"index", i},
                           {"message", msg},
                           {"logprobs", want_logprobs ? chat_logprobs_json(c.logprobs) : Json()},
                           {"finish_reason", finish_reason_name(c.finish_reason)}});
    add_token_sha256(out_choices.back(), c);
  }
  return {{"id", meta.id},           {"object", "chat.completion"}, {"created", meta.created},
          {"model", meta.model},     {"system_fingerprint", nullptr}, {"choices", out_choices},
          {"usage", chat_usage_json(usage)}};
}

Json chat_chunk_json(const ResponseMeta& meta, int index, Json delta, const Json& finish_reason, const Json& logprobs) {
  Json choice = {{"index", index}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", nullptr},
          {"choices", Json::array({choice})}};
}

Json chat_delta_json(const GenerationEvent& ev, bool include_reasoning) {
  Json d = Json::object();
  if (include_reasoning && !ev.reasoning.empty()) {
    d["reasoning_content"] = ev.reasoning;
    d["reasoning"] = ev.reasoning;
  }
  if (!ev.content.empty()) d["content"] = ev.content;
  if (!ev.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& t : ev.tool_calls) {
      Json c = {{"index", t.index}};
      Json f = Json::object();
      if (!t.id.empty()) {
        c["id"] = t.id;
        c["type"] = "function";
      }
      if (!t.name.empty()) f["name"] = t.name;
      f["arguments"] = t.arguments;
      c["function"] = f;
      calls.push_back(c);
    }
    d["tool_calls"] = calls;
  }
  return d.empty() ? Json() : d;
}

Json text_completion_json(const ResponseMeta& meta, const std::vector<ChoiceState>& choices,
                          const std::vector<std::string>& echo_prefix, int n, const UsageTotals& usage,
                          bool want_logprobs) {
  Json out = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& prefix = echo_prefix.empty() ? std::string() : echo_prefix[i / static_cast<size_t>(n)];
    Json logprobs;
    if (want_logprobs) {
      const ChoiceState& c = choices[i];
      logprobs = completion_logprobs_json(c, 0, c.logprobs.size(), code_points(prefix));
      if (!echo_prefix.empty() && !c.prompt_logprobs.empty())
        logprobs = concat_completion_logprobs(prompt_logprobs_json(c.prompt_logprobs, code_points(prefix)), logprobs);
    }
    out.push_back({{"index", i},
                   {"text", prefix + choices[i].content},
                   {"logprobs", logprobs},
                   {"finish_reason", finish_reason_name(choices[i].finish_reason)}});
    add_token_sha256(out.back(), choices[i]);
  }
  return {{"id", meta.id},       {"object", "text_completion"}, {"created", meta.created},
          {"model", meta.model}, {"system_fingerprint", nullptr}, {"choices", out},
          {"usage", completion_usage_json(usage)}};
}

Json text_completion_chunk_json(const ResponseMeta& meta, int index, const std::string& text,
                                const Json& finish_reason, const Json& logprobs) {
  Json choice = {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", Json::array({choice})}};
}

Json response_usage_json(const UsageTotals& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json response_object_json(const ResponseMeta& meta, const Json& echo, const std::string& status, const Json& output,
                          const Json& usage) {
  Json r = {{"id", meta.id},
            {"object", "response"},
            {"created_at", meta.created},
            {"status", status},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", meta.model},
            {"output", output},
            {"usage", usage}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (auto it = echo.begin(); it != echo.end(); ++it) r[it.key()] = it.value();
  return r;
}

Json answer_logprobs_json(std::span<const TokenLogprob> lps) {
  std::vector<TokenLogprob> answer;
  for (const TokenLogprob& lp : lps)
    if (!lp.reasoning) answer.push_back(lp);
  return chat_logprobs_json(answer)["content"];
}

Json response_output_items(const ChoiceState& c, const std::string& id_seed, bool with_logprobs,
                           bool sealed_reasoning) {
  // Same ids as the streaming formatter: an item's id carries its output index when > 0.
  Json items = Json::array();
  auto suffix = [&] { return items.empty() ? std::string() : "_" + std::to_string(items.size()); };
  if (!c.reasoning.empty()) {
    items.push_back({{"type", "reasoning"},
                     {"id", "rs_" + id_seed + suffix()},
                     {"summary", Json::array()},
                     {"content", Json::array({{{"type", "reasoning_text"}, {"text", c.reasoning}}})},
                     {"status", "completed"}});
    if (sealed_reasoning) items.back()["encrypted_content"] = reasoning_encrypted_content(c.reasoning);
  }
  if (!c.content.empty()) {
    Json part = {{"type", "output_text"}, {"text", c.content}, {"annotations", Json::array()}};
    if (with_logprobs) part["logprobs"] = answer_logprobs_json(c.logprobs);
    items.push_back({{"type", "message"},
                     {"id", "msg_" + id_seed + suffix()},
                     {"role", "assistant"},
                     {"status", "completed"},
                     {"content", Json::array({std::move(part)})}});
  }
  for (size_t i = 0; i < c.tool_calls.size(); ++i) {
    const ToolCallState& t = c.tool_calls[i];
    items.push_back({{"type", "function_call"},
                     {"id", "fc_" + id_seed + "_" + std::to_string(i)},
                     {"call_id", t.id},
                     {"name", t.name},
                     {"arguments", t.arguments.empty() ? "{}" : t.arguments},
                     {"status", "completed"}});
  }
  return items;
}

std::string sse_data(const Json& payload) {
  return "data: " + payload.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string sse_event(const std::string& event, const Json& payload) {
  return "event: " + event + "\n" + sse_data(payload);
}

}  // namespace tf::server
