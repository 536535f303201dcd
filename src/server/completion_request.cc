// POST /v1/completions, /tokenize and /detokenize request bodies (api.md §2, §4).
#include "server/api_error.h"
#include "server/openai_requests.h"

namespace tf::server {

namespace {

std::vector<int32_t> token_list(const Json& v, const std::string& param) {
  std::vector<int32_t> ids;
  for (const Json& x : v) {
    if (!x.is_number_integer() || (!x.is_number_unsigned() && x.get<int64_t>() < 0) ||
        (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) ||
        (!x.is_number_unsigned() && x.get<int64_t>() > INT32_MAX))
      throw bad_request("'" + param + "' token ids must be non-negative integers", param);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  if (ids.empty()) throw bad_request("'" + param + "' must not be empty", param);
  return ids;
}

}  // namespace

std::vector<PromptInput> parse_prompt_inputs(const Json& v, const std::string& param) {
  const std::string q = "'" + param + "'";
  std::vector<PromptInput> out;
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) throw bad_request(q + " must not be empty", param);
    out.emplace_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.empty()) throw bad_request(q + " must not be empty", param);
    if (v[0].is_number()) {
      out.emplace_back(token_list(v, param));
    } else {
      for (const Json& p : v) {
        if (p.is_string()) {
          if (p.get_ref<const std::string&>().empty())
            throw bad_request(q + " must not contain empty strings", param);
          out.emplace_back(p.get<std::string>());
        } else if (p.is_array()) {
          out.emplace_back(token_list(p, param));
        } else {
          throw bad_request(q + " must be a string, a list of strings or token ids", param);
        }
      }
    }
  } else {
    throw bad_request(q + " must be a string, a list of strings or token ids", param);
  }
  return out;
}

CompletionRequest parse_completion_request(const Json& body) {
  require_object(body, "body");
  CompletionRequest req;
  if (json_field(body, "suffix")) throw bad_request("suffix is not currently supported", "suffix");
  const Json* prompt = json_field(body, "prompt");
  if (!prompt) throw bad_request("'prompt' is required", "prompt");
  req.prompts = parse_prompt_inputs(*prompt, "prompt");
  if (req.prompts.size() > 1024) throw bad_request("'prompt' has more than 1024 prompts", "prompt");
  parse_common(body, req, /*chat_logprobs=*/false);
  if (req.prompts.size() * static_cast<size_t>(req.n) > 1024)
    throw bad_request("'prompt' count times 'n' must not exceed 1024", "n");
  req.max_tokens = parse_max_tokens(body, "max_tokens", nullptr, 0).value_or(16);
  check_min_tokens(req.sampling.min_tokens, req.max_tokens);
  req.echo = json_bool(body, "echo").value_or(false);
  if (auto lp = json_int(body, "logprobs", 0, 20)) {
    req.logprobs = static_cast<int>(*lp);
    req.sampling.logprobs = true;
    req.sampling.top_logprobs = req.logprobs;
  }
  if (auto best_of = json_int(body, "best_of", 1, kMaxN)) {
    if (*best_of < req.n) throw bad_request("'best_of' must be greater than or equal to 'n'", "best_of");
    if (*best_of > req.n) throw bad_request("'best_of' > 'n' is not supported", "best_of");
  }
  if (*req.max_tokens == 0 && !req.echo) throw bad_request("'max_tokens' must be at least 1 without 'echo'", "max_tokens");
  return req;
}

TokenizeRequest parse_tokenize_request(const Json& body, MediaUrlPolicy policy) {
  require_object(body, "body");
  TokenizeRequest req;
  req.model = json_string(body, "model");
  req.return_token_strs = json_bool(body, "return_token_strs").value_or(false);
  if (json_field(body, "messages")) {
    // The chat form renders exactly what a chat request with the same fields renders
    // (tools, chat_template_kwargs, reasoning_effort, generation-prompt flags), so its
    // count equals that request's usage.prompt_tokens.
    req.is_chat = true;
    req.chat = parse_chat_request(body, policy).chat;
    req.add_special_tokens = json_bool(body, "add_special_tokens").value_or(false);
  } else {
    auto prompt = json_string(body, "prompt");
    if (!prompt) throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    req.prompt = std::move(*prompt);
    req.add_special_tokens = json_bool(body, "add_special_tokens").value_or(true);
  }
  return req;
}

DetokenizeRequest parse_detokenize_request(const Json& body) {
  require_object(body, "body");
  DetokenizeRequest req;
  req.model = json_string(body, "model");
  const Json* tokens = json_field(body, "tokens");
  if (!tokens || !tokens->is_array()) throw bad_request("'tokens' (a list of token ids) is required", "tokens");
  req.tokens = json_int_list(body, "tokens", 0, INT32_MAX);
  return req;
}

}  // namespace tf::server
