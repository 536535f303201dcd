// Fields shared by every generation endpoint: sampling, stop, n, stream options,
// max tokens and structured output (api.md §1.1-§1.3, vLLM and SGLang extensions).
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <regex>

#include "server/api_error.h"
#include "server/openai_requests.h"
#include "text/json_parse.h"

namespace tf::server {

namespace {

constexpr int64_t kMaxTokensCap = int64_t{1} << 40;  // far above any window; keeps sums in range

void parse_structured_field(const Json& body, const char* name, StructuredOutput::Kind kind,
                            StructuredOutput& out, int& count, const char* parent = nullptr) {
  const Json* v = json_field(body, name);
  if (!v) return;
  ++count;
  out.kind = kind;
  out.param = parent ? std::string(parent) + "." + name : std::string(name);
  switch (kind) {
    case StructuredOutput::Kind::kJsonSchema:
      if (v->is_string()) {
        Expected<Json> schema = text::parse_json(v->get<std::string>());
        if (!schema) throw bad_request(std::string("'") + name + "' is not valid JSON: " + schema.status().message(), name);
        out.schema = std::move(*schema);
      } else if (v->is_object() || v->is_boolean()) {
        out.schema = *v;
      } else {
        throw bad_request(std::string("'") + name + "' must be a JSON schema object", name);
      }
      break;
    case StructuredOutput::Kind::kRegex:
    case StructuredOutput::Kind::kGrammar:
      if (!v->is_string()) throw bad_request(std::string("'") + name + "' must be a string", name);
      out.pattern = v->get<std::string>();
      break;
    case StructuredOutput::Kind::kChoice: {
      out.choices = json_string_or_list(body, name, 4096);
      if (out.choices.empty()) throw bad_request(std::string("'") + name + "' must not be empty", name);
      break;
    }
    case StructuredOutput::Kind::kJsonObject:
      if (v->is_boolean() && !v->get<bool>()) {
        --count;
        out.kind = StructuredOutput::Kind::kNone;
      }
      break;
    case StructuredOutput::Kind::kNone:
      break;
  }
}

void parse_structured(const Json& body, StructuredOutput& out) {
  int count = 0;
  using K = StructuredOutput::Kind;
  // Legacy vLLM names, then the structured_outputs object.
  parse_structured_field(body, "guided_json", K::kJsonSchema, out, count);
  parse_structured_field(body, "guided_regex", K::kRegex, out, count);
  parse_structured_field(body, "guided_choice", K::kChoice, out, count);
  parse_structured_field(body, "guided_grammar", K::kGrammar, out, count);
  if (const Json* so = json_field(body, "structured_outputs")) {
    require_object(*so, "structured_outputs");
    const char* so_name = "structured_outputs";
    parse_structured_field(*so, "json", K::kJsonSchema, out, count, so_name);
    parse_structured_field(*so, "regex", K::kRegex, out, count, so_name);
    parse_structured_field(*so, "choice", K::kChoice, out, count, so_name);
    parse_structured_field(*so, "grammar", K::kGrammar, out, count, so_name);
    parse_structured_field(*so, "json_object", K::kJsonObject, out, count, so_name);
  }
  if (const Json* rf = json_field(body, "response_format")) {
    require_object(*rf, "response_format");
    auto type = json_string(*rf, "type");
    if (!type) throw bad_request("'response_format.type' is required", "response_format.type");
    if (*type == "json_object") {
      ++count;
      out.kind = K::kJsonObject;
    } else if (*type == "json_schema") {
      const Json* js = json_field(*rf, "json_schema");
      if (!js || !js->is_object())
        throw bad_request("'response_format.json_schema' is required for type json_schema",
                          "response_format.json_schema");
      auto name = json_string(*js, "name");
      static const std::regex kName("^[A-Za-z0-9_-]{1,64}$");
      if (!name || !std::regex_match(*name, kName))
        throw bad_request("'response_format.json_schema.name' is required and must match ^[A-Za-z0-9_-]{1,64}$",
                          "response_format.json_schema.name");
      const Json* schema = json_field(*js, "schema");
      if (schema && !schema->is_object())
        throw bad_request("'response_format.json_schema.schema' must be an object", "response_format.json_schema.schema");
      ++count;
      out.kind = K::kJsonSchema;
      out.param = "response_format";
      out.schema = schema ? *schema : Json::object();
    } else if (*type != "text") {
      throw bad_request("'response_format.type' must be text, json_object or json_schema", "response_format.type");
    }
  }
  if (count > 1)
    throw bad_request("only one structured-output constraint (json, regex, choice, grammar, response_format) may be set",
                      "structured_outputs");
}

}  // namespace

void parse_common(const Json& body, CommonRequest& out, bool chat_logprobs) {
  out.model = json_string(body, "model");
  SamplingOptions& s = out.sampling;
  s.temperature = json_number(body, "temperature", 0.0, 2.0);
  s.top_p = json_number(body, "top_p", 0.0, 1.0);
  if (s.top_p && *s.top_p <= 0.0) throw bad_request("'top_p' must be in (0, 1]", "top_p");
  if (auto k = json_int(body, "top_k", -1, 1 << 30)) s.top_k = static_cast<int>(*k);
  s.min_p = json_number(body, "min_p", 0.0, 1.0);
  s.seed = json_int(body, "seed", INT64_MIN, INT64_MAX);
  s.presence_penalty = json_number(body, "presence_penalty", -2.0, 2.0).value_or(0.0);
  s.frequency_penalty = json_number(body, "frequency_penalty", -2.0, 2.0).value_or(0.0);
  // The sampler's range (0, 2], checked here so that the 400 names the field; the sampler
  // works in float, so a value too small to be one is refused too.
  if (auto rp = json_number(body, "repetition_penalty", 0.0, kMaxRepetitionPenalty)) {
    if (static_cast<float>(*rp) <= 0.0f) throw bad_request("'repetition_penalty' must be above 0", "repetition_penalty");
    s.repetition_penalty = *rp;
  }
  if (const Json* lb = json_field(body, "logit_bias")) {
    if (!lb->is_object()) throw bad_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      errno = 0;
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id > INT32_MAX)
        throw bad_request("'logit_bias' key '" + key + "' is not a token id", "logit_bias");
      if (!it->is_number()) throw bad_request("'logit_bias' values must be numbers", "logit_bias");
      double b = it->get<double>();
      if (!(b >= -100.0 && b <= 100.0)) throw bad_request("'logit_bias' values must be between -100 and 100", "logit_bias");
      s.logit_bias[static_cast<int32_t>(id)] = b;
    }
  }
  s.stop = json_string_or_list(body, "stop", kMaxStopStrings);
  for (const std::string& stop : s.stop)
    if (stop.size() > kMaxStopStringBytes)
      throw bad_request("'stop' strings must be at most " + std::to_string(kMaxStopStringBytes) + " bytes",
                        "stop");
  s.stop_token_ids = json_int_list(body, "stop_token_ids", 0, INT32_MAX);
  s.include_stop_str_in_output = json_bool(body, "include_stop_str_in_output").value_or(false);
  s.ignore_eos = json_bool(body, "ignore_eos").value_or(false);
  s.skip_special_tokens = json_bool(body, "skip_special_tokens").value_or(true);
  s.min_tokens = static_cast<int>(json_int(body, "min_tokens", 0, 1 << 30).value_or(0));
  s.allowed_token_ids = json_int_list(body, "allowed_token_ids", 0, INT32_MAX);
  if (const Json* a = json_field(body, "allowed_token_ids"); a && s.allowed_token_ids.empty())
    throw bad_request("'allowed_token_ids' must not be empty", "allowed_token_ids");
  s.bad_words = json_string_or_list(body, "bad_words", kMaxBadWords);
  for (const std::string& w : s.bad_words)
    if (w.size() > kMaxStopStringBytes || w.find_first_not_of(' ') == std::string::npos)
      throw bad_request("'bad_words' must be non-blank strings of at most " +
                            std::to_string(kMaxStopStringBytes) + " bytes",
                        "bad_words");
  if (const Json* rd = json_field(body, "repetition_detection")) {
    require_object(*rd, "repetition_detection");
    auto size = [&](const char* name, int64_t hi) {
      try {
        return static_cast<int32_t>(json_int(*rd, name, 0, hi).value_or(0));
      } catch (const ApiError&) {
        throw bad_request(
            "'repetition_detection." + std::string(name) + "' must be an integer in 0.." + std::to_string(hi),
            "repetition_detection." + std::string(name));
      }
    };
    RepetitionRule& rule = s.repetition_detection;
    rule.max_pattern = size("max_pattern_size", RepetitionRule::kMaxPattern);
    rule.min_pattern = size("min_pattern_size", RepetitionRule::kMaxPattern);
    rule.min_count = size("min_count", 1 << 20);
    if (Status st = rule.validate(); !st.is_ok())
      throw bad_request("'repetition_detection': " + st.message(), "repetition_detection");
  }
  if (chat_logprobs) {
    s.logprobs = json_bool(body, "logprobs").value_or(false);
    if (auto tl = json_int(body, "top_logprobs", 0, 20)) {
      if (!s.logprobs) throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
      s.top_logprobs = static_cast<int>(*tl);
    }
  }
  out.n = static_cast<int>(json_int(body, "n", 1, kMaxN).value_or(1));
  out.stream = json_bool(body, "stream").value_or(false);
  if (const Json* so = json_field(body, "stream_options")) {
    require_object(*so, "stream_options");
    if (!out.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    out.include_usage = json_bool(*so, "include_usage").value_or(false);
    out.continuous_usage = out.include_usage && json_bool(*so, "continuous_usage_stats").value_or(false);
  }
  out.return_token_ids = json_bool(body, "return_token_ids").value_or(false);
  out.truncate_prompt_tokens = json_int(body, "truncate_prompt_tokens", -1, INT64_MAX);
  if (out.truncate_prompt_tokens == 0)
    throw bad_request("'truncate_prompt_tokens' must be -1 (the window) or at least 1",
                      "truncate_prompt_tokens");
  if (const Json* salt = json_field(body, "cache_salt")) {
    if (!salt->is_string() || salt->get_ref<const std::string&>().empty() ||
        salt->get_ref<const std::string&>().size() > kMaxCacheSaltBytes)
      throw bad_request("'cache_salt' must be a non-empty string of at most " +
                            std::to_string(kMaxCacheSaltBytes) + " bytes",
                        "cache_salt");
    out.cache_salt = salt->get<std::string>();
  }
  if (const Json* pl = json_field(body, "prompt_logprobs"); pl && !pl->is_null()) {
    if (pl->is_number_integer() && pl->get<int64_t>() == -1)
      throw bad_request("'prompt_logprobs' -1 (every token of the vocabulary) is not supported; at most " +
                            std::to_string(kMaxPromptLogprobs),
                        "prompt_logprobs");
    out.prompt_logprobs = static_cast<int>(*json_int(body, "prompt_logprobs", 0, kMaxPromptLogprobs));
    if (out.stream && *out.prompt_logprobs > 0)
      throw bad_request("'prompt_logprobs' are not available when 'stream' is true", "prompt_logprobs");
  }
  // vLLM's integer priority, or the reference engine's "background": after every request of
  // an ordinary priority.
  if (const Json* p = json_field(body, "priority"); p && p->is_string()) {
    if (p->get<std::string>() != "background")
      throw bad_request("'priority' must be an integer or \"background\"", "priority");
    out.priority = kBackgroundPriority;
  } else {
    out.priority = static_cast<int32_t>(json_int(body, "priority", INT32_MIN, INT32_MAX).value_or(0));
  }
  out.drafts = json_bool(body, "draft").value_or(true);
  if (json_bool(body, "use_beam_search").value_or(false))
    throw bad_request("beam search is not supported", "use_beam_search");
  parse_structured(body, out.structured);
  (void)kMaxTokensCap;
}

// Exposed for the three endpoints: max_completion_tokens wins over max_tokens.
std::optional<int64_t> parse_max_tokens(const Json& body, const char* primary, const char* secondary, int64_t lo) {
  auto a = json_int(body, primary, lo, kMaxTokensCap);
  auto b = secondary ? json_int(body, secondary, lo, kMaxTokensCap) : std::nullopt;
  return a ? a : b;
}

void check_min_tokens(int min_tokens, std::optional<int64_t> max_tokens) {
  if (max_tokens && min_tokens > *max_tokens)
    throw bad_request("'min_tokens' (" + std::to_string(min_tokens) + ") must not exceed 'max_tokens' (" +
                          std::to_string(*max_tokens) + ")",
                      "min_tokens");
}

void check_call_arguments(const std::string& args, const std::string& param) {
  if (args.find_first_not_of(" \t\r\n") == std::string::npos) return;
  Expected<nlohmann::ordered_json> parsed = text::parse_json(args);
  if (!parsed || !parsed->is_object())
    throw bad_request("'" + param + "' must be a JSON object in a string" +
                          (parsed ? std::string() : " (" + parsed.status().message() + ")"),
                      param);
}

std::string ordered_schema_text(const Json& j, SchemaSource source) {
  if (!j.is_object()) return "";
  auto at = [](const nlohmann::ordered_json& o, std::initializer_list<const char*> path) -> const nlohmann::ordered_json* {
    const nlohmann::ordered_json* cur = &o;
    for (const char* key : path) {
      if (!cur->is_object() || !cur->contains(key)) return nullptr;
      cur = &(*cur)[key];
    }
    return cur->is_null() ? nullptr : cur;
  };
  // Only the fields the endpoint's parser reads: another API's field in the body is ignored
  // there and must not replace the schema the request's constraint came from.
  using Path = std::initializer_list<const char*>;
  auto first = [&](std::initializer_list<Path> paths) -> std::string {
    for (Path path : paths)
      if (const nlohmann::ordered_json* v = at(j, path)) return v->is_string() ? v->get<std::string>() : v->dump();
    return "";
  };
  switch (source) {
    case SchemaSource::kResponses: return first({Path{"text", "format", "schema"}});
    case SchemaSource::kMessages: return first({Path{"output_config", "format", "schema"}});
    case SchemaSource::kChat: break;
  }
  return first({Path{"guided_json"}, Path{"structured_outputs", "json"}, Path{"response_format", "json_schema", "schema"}});
}

}  // namespace tf::server
