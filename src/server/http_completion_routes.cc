// POST /v1/embeddings and /v1/completions: prompts given as text or token ids
// (HttpServer::Impl, http_server_impl.h).
#include <algorithm>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "server/embedding_request.h"
#include "server/http_answers.h"
#include "server/http_server_impl.h"
#include "server/openai_requests.h"
#include "server/openai_responses.h"
#include "server/stream_formatters.h"

namespace tf::server {

using http_detail::parse_body;

std::vector<int32_t> HttpServer::Impl::prompt_ids(const PromptInput& p, const char* param) const {
  if (const auto* s = std::get_if<std::string>(&p)) {
    auto t = engine.tokenize(*s, true);
    if (!t) throw api_error_from_status(t.status());
    return std::move(*t);
  }
  const auto& ids = std::get<std::vector<int32_t>>(p);
  for (int32_t id : ids)
    if (model.vocab_size > 0 && id >= model.vocab_size)
      throw bad_request(
          "token id " + std::to_string(id) + " is out of range [0, " + std::to_string(model.vocab_size) + ")",
          param);
  return ids;
}

void HttpServer::Impl::embeddings(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                  Clock::time_point t0) {
  const EmbeddingRequest r = parse_embedding_request(parse_body(in));
  check_model(r.model);
  if (r.dimensions && *r.dimensions != model.hidden_size)
    throw bad_request("'dimensions' must be " + std::to_string(model.hidden_size) +
                          ": this model's embeddings cannot be shortened",
                      "dimensions");
  std::vector<std::vector<int32_t>> prompts;
  for (const PromptInput& p : r.inputs) {
    std::vector<int32_t> ids = prompt_ids(p, "input");
    if (ids.empty()) throw bad_request("an input has no tokens", "input");
    const auto n = static_cast<int64_t>(ids.size());
    if (model.context_length > 0 && n > model.context_length)
      throw context_length_exceeded(model.context_length, n, 0);
    prompts.push_back(std::move(ids));
  }
  in.lease.release();
  // In waves of a few per stream, so that a batch of thousands neither overflows the queue
  // (MAX_QUEUED) nor keeps other clients' requests waiting behind all of it.
  int64_t wave = std::max<int64_t>(1, 2 * std::max(1, model.parallel));
  if (model.max_queued_choices > 0) wave = std::min(wave, model.max_queued_choices);
  Json data = Json::array();
  int64_t prompt_tokens = 0;
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(wave)) {
    const size_t last = std::min(prompts.size(), first + static_cast<size_t>(wave));
    std::vector<std::shared_ptr<GenerationSession>> sessions;
    for (size_t i = first; i < last; ++i) {
      GenerationRequest g;
      g.request_id = make_id("emb-");
      g.prompt_tokens = prompts[i];
      g.sampling.max_tokens = 0;
      g.embed = true;
      sessions.push_back(start_session(std::move(g), static_cast<int64_t>(prompts[i].size()), t0));
    }
    for (size_t k = 0; k < sessions.size(); ++k) {
      wait_for(req, *sessions[k]);
      const std::vector<float>& hidden = sessions[k]->choices().at(0).embedding;
      if (hidden.empty() ||
          (model.hidden_size > 0 && static_cast<int64_t>(hidden.size()) != model.hidden_size))
        throw ApiError(500,
                       "the engine returned an embedding of " + std::to_string(hidden.size()) + " values",
                       "server_error");
      data.push_back(embedding_json(static_cast<int>(first + k), hidden, r.base64));
      prompt_tokens += static_cast<int64_t>(prompts[first + k].size());
    }
  }
  write_json(res, 200,
             Json{{"object", "list"},
                  {"data", std::move(data)},
                  {"model", model.id},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

void HttpServer::Impl::completions(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                   Clock::time_point t0) {
  CompletionRequest r = [&] {  // the body is let go once read: the prompts hold their text
    const Json body = parse_body(in);
    CompletionRequest parsed = parse_completion_request(body);
    if (parsed.structured.kind == StructuredOutput::Kind::kJsonSchema)
      parsed.structured.schema_text = ordered_schema_text(body, SchemaSource::kChat);
    return parsed;
  }();
  check_model(r.model);
  check_queued_choices(static_cast<int64_t>(r.prompts.size()) * r.n, r.prompts.size() > 1 ? "prompt" : "n");
  ResponseMeta meta = meta_for("cmpl-", model.id);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;
  for (PromptInput& p : r.prompts) {
    std::vector<int32_t> ids = prompt_ids(p, "prompt");
    std::string text;
    if (auto* s = std::get_if<std::string>(&p)) {
      if (r.echo)
        text = std::move(*s);
      else
        std::string().swap(*s);  // tokenized: the text is not needed any more
    } else if (r.echo) {
      auto d = engine.detokenize(ids);
      if (!d) throw api_error_from_status(d.status());
      text = *d;
    }
    if (truncate_prompt(ids, r.truncate_prompt_tokens, false) && r.echo) {
      auto d = engine.detokenize(ids);  // the echo is the prompt that ran
      if (!d) throw api_error_from_status(d.status());
      text = *d;
    }
    resolve_max_tokens(r.max_tokens, static_cast<int64_t>(ids.size()), false);
    prompts.push_back(std::move(ids));
    echo.push_back(std::move(text));  // empty without echo
  }
  std::vector<std::shared_ptr<GenerationSession>> sessions;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g;
    g.request_id = i == 0 ? meta.id : meta.id + "-" + std::to_string(i);
    g.prompt_tokens = prompts[i];
    g.sampling = r.sampling;
    g.sampling.max_tokens = *r.max_tokens;
    g.structured = r.structured;
    g.n = r.n;
    g.return_token_ids = r.return_token_ids;
    g.cache_salt = r.cache_salt;
    g.priority = r.priority;
    g.drafts = r.drafts;
    if (r.echo && r.logprobs >= 0) g.prompt_logprobs = r.logprobs;  // the echoed prompt is scored too
    if (r.prompt_logprobs) g.prompt_logprobs = std::max(g.prompt_logprobs, *r.prompt_logprobs);
    sessions.push_back(start_session(std::move(g), static_cast<int64_t>(prompts[i].size()), t0));
  }
  in.lease.release();
  if (r.stream) {
    auto total = std::make_shared<UsageTotals>();
    std::vector<std::shared_ptr<StreamFormatter>> fmts;
    for (size_t i = 0; i < sessions.size(); ++i)
      fmts.push_back(std::make_shared<CompletionStreamFormatter>(
          meta, r.n, r.include_usage, echo[i], r.logprobs >= 0, static_cast<int>(i) * r.n,
          i + 1 == sessions.size(), total,
          r.return_token_ids ? std::make_shared<const std::vector<int32_t>>(prompts[i]) : nullptr,
          ContinuousUsage{r.continuous_usage ? static_cast<int64_t>(prompts[i].size()) : -1}));
    stream(res, sessions, fmts);
    return;
  }
  std::vector<ChoiceState> all;
  UsageTotals total;
  for (auto& s : sessions) {
    wait_for(req, *s);
    all.insert(all.end(), s->choices().begin(), s->choices().end());
    total += s->usage();
  }
  Json prompt_lps = Json::array();  // vLLM's prompt_logprobs, per choice
  if (r.prompt_logprobs) {
    for (ChoiceState& c : all) {
      prompt_lps.push_back(vllm_prompt_logprobs_json(c.prompt_logprobs, *r.prompt_logprobs));
      if (r.echo && r.logprobs >= 0)
        keep_top_logprobs(c.prompt_logprobs, r.logprobs);  // the echo's own count
    }
  }
  Json out = text_completion_json(meta, all, r.echo ? echo : std::vector<std::string>{}, r.n, total,
                                  r.logprobs >= 0);
  for (size_t i = 0; i < prompt_lps.size(); ++i) out["choices"][i]["prompt_logprobs"] = prompt_lps[i];
  if (r.return_token_ids)  // vLLM's places: each choice holds its prompt's ids and its own
    for (size_t i = 0; i < all.size(); ++i) {
      out["choices"][i]["prompt_token_ids"] = prompts[i / static_cast<size_t>(r.n)];
      out["choices"][i]["token_ids"] = all[i].token_ids;
    }
  write_json(res, 200, out);
}

}  // namespace tf::server
