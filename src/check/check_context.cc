#include "check/check_context.h"

#include <algorithm>

#include "check/haystack.h"

namespace tf::check {

Expected<CheckContext> CheckContext::connect(const CheckOptions& options) {
  CheckContext ctx;
  ctx.options_ = options;
  TF_ASSIGN_OR_RETURN(ctx.target_, bench::parse_bench_url(options.url));
  CheckClient c = ctx.client();
  TF_ASSIGN_OR_RETURN(HttpReply models, c.get("/v1/models"));
  if (models.status == 401) return invalid_argument(options.url + " needs an API key (--api-key or API_KEY)");
  if (models.status != 200) return unavailable("GET /v1/models: " + models.describe());
  const Json& data = models.json.is_object() ? models.json.value("data", Json::array()) : Json::array();
  if (!data.is_array() || data.empty() || !data[0].is_object())
    return unavailable("GET /v1/models lists no model");
  ctx.facts_.model = options.model;
  if (ctx.facts_.model.empty() && data[0].contains("id") && data[0]["id"].is_string())
    ctx.facts_.model = data[0]["id"];
  if (data[0].contains("max_model_len") && data[0]["max_model_len"].is_number_integer())
    ctx.facts_.context_length = data[0]["max_model_len"];
  // Other servers' /health says less or nothing (vLLM's is an empty 200): their defaults stand.
  Json h = Json::object();
  if (auto health = ctx.health(c))
    h = std::move(*health);
  else
    ctx.facts_.health = false;
  if (h.contains("streams") && h["streams"].is_object() && h["streams"].value("max", 0) > 0)
    ctx.facts_.streams_max = h["streams"]["max"];
  if (ctx.facts_.context_length <= 0 && h.contains("context_length") &&
      h["context_length"].is_number_integer())
    ctx.facts_.context_length = h["context_length"];
  if (h.contains("pool_tokens") && h["pool_tokens"].is_number_integer())
    ctx.facts_.pool_tokens = h["pool_tokens"];
  if (ctx.facts_.context_length <= 0)
    return unavailable("the server reports no context length (max_model_len)");
  return ctx;
}

Json CheckContext::chat_body(Json messages, int64_t max_tokens) const {
  Json body = {{"model", facts_.model},
               {"messages", std::move(messages)},
               {"temperature", 0},
               {"max_tokens", max_tokens}};
  if (!options_.reasoning_effort.empty()) body["reasoning_effort"] = options_.reasoning_effort;
  return body;
}

Expected<std::vector<int32_t>> CheckContext::tokenize(CheckClient& client, const std::string& text) const {
  TF_ASSIGN_OR_RETURN(HttpReply r,
                      client.post("/tokenize", {{"prompt", text}, {"add_special_tokens", false}}));
  if (r.status != 200) return unavailable("POST /tokenize: " + r.describe());
  if (!r.json.is_object() || !r.json.contains("tokens") || !r.json["tokens"].is_array())
    return unavailable("POST /tokenize: no tokens array");
  std::vector<int32_t> ids;
  for (const Json& t : r.json["tokens"]) {
    if (!t.is_number_integer()) return unavailable("POST /tokenize: a token is not an integer");
    ids.push_back(t.get<int32_t>());
  }
  return ids;
}

Expected<double> CheckContext::tokens_per_filler_sentence(CheckClient& client) const {
  constexpr int kSample = 100;
  TF_ASSIGN_OR_RETURN(std::vector<int32_t> sample, tokenize(client, filler_sentences(1, kSample)));
  return std::max(1.0, static_cast<double>(sample.size()) / kSample);
}

Expected<Json> CheckContext::health(CheckClient& client) const {
  TF_ASSIGN_OR_RETURN(HttpReply r, client.get("/health"));
  if ((r.status != 200 && r.status != 503) || !r.json.is_object())
    return unavailable("GET /health: " + r.describe());
  return r.json;
}

}  // namespace tf::check
