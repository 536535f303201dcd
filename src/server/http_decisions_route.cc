// POST /v1/decisions (decision_request.h): each question's prompt and its labels' logprobs
// (HttpServer::Impl, http_server_impl.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/decision_request.h"
#include "server/http_answers.h"
#include "server/http_server_impl.h"

namespace tf::server {

using http_detail::parse_body;

HttpServer::Impl::DecisionPrompt HttpServer::Impl::decision_prompt(const DecisionQuestion& q) const {
  const std::string which = "question '" + q.id + "': ";
  ChatPrompt chat;
  chat.messages = Json::array({Json{{"role", "user"}, {"content", q.content}}});
  chat.chat_template_kwargs = Json{{"enable_thinking", false}};
  chat.find_system_block = false;
  auto tokens = engine.render_chat(chat);
  if (!tokens) throw bad_request(which + tokens.status().message(), "questions");
  DecisionPrompt d{std::move(*tokens), {}};
  const auto n = static_cast<int64_t>(d.tokens.size());
  if (model.context_length > 0 && n >= model.context_length)
    throw ApiError(400,
                   which + "the prompt has " + std::to_string(n) +
                       " tokens, which does not fit the context length of " +
                       std::to_string(model.context_length) + " tokens",
                   "invalid_request_error", "questions", "context_length_exceeded");
  // The labels are checked after the prompt's last tokens only (a label can merge with the
  // end of the text and nothing before it), so a long input is not encoded once per label;
  // the window's text must encode back to the window's ids for the check to mean anything
  // (a window that starts inside a word or a character may not: it grows, up to the prompt).
  std::vector<int32_t> tail;
  std::optional<std::string> text;
  for (size_t window = kDecisionLabelWindow;; window *= 8) {
    window = std::min(window, d.tokens.size());
    tail.assign(d.tokens.end() - static_cast<std::ptrdiff_t>(window), d.tokens.end());
    auto t = engine.detokenize(tail);
    if (!t) throw api_error_from_status(t.status());
    auto again = engine.tokenize(*t, false);
    if (again && *again == tail) {
      text = std::move(*t);
      break;
    }
    if (window == d.tokens.size()) break;
  }
  if (!text)
    throw bad_request(
        which +
            "this model's tokenizer does not encode the rendered chat prompt back to the same ids, "
            "so its answer labels cannot be checked",
        "questions");
  if (text->rfind("<think>") != std::string::npos &&
      (text->rfind("</think>") == std::string::npos || text->rfind("<think>") > text->rfind("</think>")))
    throw bad_request(which + "the chat template leaves a reasoning block open at the answer position",
                      "questions");
  for (const std::string& label : q.labels) {
    auto ids = engine.tokenize(*text + label, false);
    const bool one_more =
        ids && ids->size() == tail.size() + 1 && std::equal(tail.begin(), tail.end(), ids->begin());
    if (!one_more || std::find(d.labels.begin(), d.labels.end(), ids->back()) != d.labels.end())
      throw bad_request(
          which + "the answer label '" + label +
              "' is not one distinct token after the chat prompt for this tokenizer, so this model "
              "cannot answer it",
          "questions");
    d.labels.push_back(ids->back());
  }
  return d;
}

void HttpServer::Impl::decisions(const httplib::Request& req, PostBody& in, httplib::Response& res,
                                 Clock::time_point t0) {
  const DecisionRequest r = parse_decision_request(parse_body(in));
  check_model(r.model);
  check_queued_choices(static_cast<int64_t>(r.questions.size()), "questions");
  std::vector<DecisionPrompt> prompts;
  for (const DecisionQuestion& q : r.questions) prompts.push_back(decision_prompt(q));
  // Submitted together: the questions share the input, so their prompts run side by side
  // (and a later request with the same input resumes from a kept prompt).
  std::vector<std::shared_ptr<GenerationSession>> sessions;
  for (const DecisionPrompt& p : prompts) {
    GenerationRequest g;
    g.request_id = make_id("dec-");
    g.prompt_tokens = p.tokens;
    g.sampling.max_tokens = 0;
    g.label_tokens = p.labels;
    sessions.push_back(start_session(std::move(g), static_cast<int64_t>(p.tokens.size()), t0));
  }
  in.lease.release();
  Json answers = Json::object();
  int64_t prompt_tokens = 0, cached_tokens = 0;
  for (size_t i = 0; i < sessions.size(); ++i) {
    wait_for(req, *sessions[i]);
    const ChoiceState& c = sessions[i]->choices().at(0);
    if (c.label_logprobs.size() != prompts[i].labels.size())
      throw ApiError(500,
                     "the engine scored " + std::to_string(c.label_logprobs.size()) + " of " +
                         std::to_string(prompts[i].labels.size()) + " labels",
                     "server_error");
    const bool ids = r.return_prompt_token_ids;
    answers[r.questions[i].id] =
        decision_answer_json(r.questions[i], c.label_logprobs, r.temperature,
                             ids ? &prompts[i].tokens : nullptr, ids ? &prompts[i].labels : nullptr);
    prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
    cached_tokens += c.cached_prompt_tokens;
  }
  Json usage{{"prompt_tokens", prompt_tokens},
             {"completion_tokens", 0},
             {"total_tokens", prompt_tokens},
             {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  write_json(res, 200,
             Json{{"object", "decisions"},
                  {"model", model.id},
                  {"prompt_format_version", kDecisionPromptFormatVersion},
                  {"answers", std::move(answers)},
                  {"usage", std::move(usage)}});
}

}  // namespace tf::server
