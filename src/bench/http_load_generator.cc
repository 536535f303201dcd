// See http_load_generator.h.
#include "bench/http_load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_report.h"
#include "bench/completion_stream.h"
#include "bench/http_errors.h"
#include "bench/prompt_synthesis.h"
#include "bench/sse_parser.h"

namespace tf::bench {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// Bodies of error and non-streamed responses are kept up to this size.
constexpr size_t kMaxBody = size_t{16} << 20;
// Ids used when the server cannot tokenize (no /tokenize route): common range of
// BPE vocabularies past the byte tokens, far below any special token.
constexpr int32_t kFallbackLo = 1000;
constexpr int32_t kFallbackHi = 30000;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

httplib::Headers headers_for(const BenchSpec& spec) {
  httplib::Headers h = {{"Accept", "application/json, text/event-stream"}};
  if (!spec.api_key.empty()) h.emplace("Authorization", "Bearer " + spec.api_key);
  return h;
}

std::unique_ptr<httplib::Client> make_client(const HttpTarget& target, const BenchSpec& spec) {
  auto c = std::make_unique<httplib::Client>(target.base);
  c->set_connection_timeout(10, 0);
  auto whole = static_cast<time_t>(spec.timeout_s);
  c->set_read_timeout(whole, static_cast<time_t>((spec.timeout_s - static_cast<double>(whole)) * 1e6));
  c->set_write_timeout(60, 0);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  return c;
}

// "HTTP 404: The model `x` does not exist." from an OpenAI error body, else its first bytes.
std::string http_error(int status, const std::string& body) {
  std::string detail;
  Json j = Json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) detail = e["message"].get<std::string>();
    else if (e.is_string()) detail = e.get<std::string>();
  }
  if (detail.empty()) detail = body.substr(0, 200);
  return "HTTP " + std::to_string(status) + (detail.empty() ? "" : ": " + detail);
}

Expected<Json> post_json(httplib::Client& client, const HttpTarget& target, const BenchSpec& spec,
                         const std::string& path, const Json& body) {
  auto res = client.Post((target.prefix + path).c_str(), headers_for(spec), body.dump(), "application/json");
  if (!res)
    return unavailable("POST " + target.base + target.prefix + path + ": " +
                       describe_transport_error(res.error()));
  if (res->status != 200) {
    Status s(res->status == 404 ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
             "POST " + target.prefix + path + ": " + http_error(res->status, res->body));
    return s;
  }
  Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return internal_error("POST " + target.prefix + path + ": the reply is not a JSON object");
  return j;
}

// GET /v1/models: proves the server is there and names its model.
Expected<std::string> preflight(httplib::Client& client, const HttpTarget& target, const BenchSpec& spec) {
  auto res = client.Get((target.prefix + "/v1/models").c_str(), headers_for(spec));
  if (!res)
    return unavailable("bench: cannot reach " + target.base + target.prefix + ": " +
                       describe_transport_error(res.error()));
  if (res->status != 200)
    return invalid_argument("bench: GET " + target.prefix + "/v1/models: " + http_error(res->status, res->body));
  if (!spec.model.empty()) return spec.model;
  Json j = Json::parse(res->body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  return std::string();  // the server takes requests without a model name
}

struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> texts;  // chat only
};

Expected<Prompts> make_prompts(httplib::Client& client, const HttpTarget& target, const BenchSpec& spec, int count,
                               std::vector<std::string>& notes) {
  TokenizeFn tokenize = [&](const std::string& text) -> Expected<std::vector<int32_t>> {
    // No model name: the server tokenizes with its own, and a 404 then means
    // "no /tokenize route" rather than "unknown model".
    Json body = {{"prompt", text}, {"add_special_tokens", false}};
    TF_ASSIGN_OR_RETURN(Json j, post_json(client, target, spec, "/tokenize", body));
    if (!j.contains("tokens") || !j["tokens"].is_array()) return internal_error("POST /tokenize: no 'tokens' array");
    std::vector<int32_t> ids;
    for (const Json& t : j["tokens"]) {
      if (!t.is_number_integer()) return internal_error("POST /tokenize: a token id is not an integer");
      ids.push_back(t.get<int32_t>());
    }
    return ids;
  };
  Prompts p;
  auto ids = synthesize_prompts(tokenize, spec.seed, 0, count, spec.prompt_tokens);
  if (ids) {
    p.ids = std::move(*ids);
    if (spec.repeat_prompt) std::fill(p.ids.begin(), p.ids.end(), p.ids.front());
  } else if (ids.status().code() == StatusCode::kNotFound) {
    notes.push_back("the server has no /tokenize: prompts are deterministic ids in [" + std::to_string(kFallbackLo) +
                    ", " + std::to_string(kFallbackHi) + ")");
    for (int i = 0; i < count; ++i)
      p.ids.push_back(fallback_prompt_ids(spec.seed, i, spec.prompt_tokens, kFallbackLo, kFallbackHi));
  } else {
    return ids.status();
  }
  if (!spec.chat) return p;
  notes.push_back("chat prompts are the text of prompt_tokens ids; prompt tokens come from the server's usage "
                  "(chat template included)");
  for (int i = 0; i < count; ++i) {
    Json body = {{"tokens", p.ids[static_cast<size_t>(i)]}};
    auto j = post_json(client, target, spec, "/detokenize", body);
    if (j && j->contains("prompt") && (*j)["prompt"].is_string()) {
      p.texts.push_back((*j)["prompt"].get<std::string>());
    } else {
      if (i == 0) notes.push_back("the server cannot detokenize: chat prompts are synthetic text of about "
                                  "prompt_tokens words");
      p.texts.push_back(synthetic_text(spec.seed, i, spec.prompt_tokens));
    }
  }
  return p;
}

std::string request_body(const BenchSpec& spec, const std::string& model, const Prompts& prompts, size_t i) {
  Json b = {{"max_tokens", spec.output_tokens},
            {"temperature", spec.temperature},
            {"ignore_eos", spec.ignore_eos},
            {"stream", spec.streaming}};
  if (!model.empty()) b["model"] = model;
  if (spec.streaming) b["stream_options"] = {{"include_usage", true}};
  if (spec.chat) {
    b["messages"] = Json::array({{{"role", "user"}, {"content", prompts.texts[i]}}});
    b["chat_template_kwargs"] = {{"enable_thinking", spec.thinking}};
  } else {
    b["prompt"] = prompts.ids[i];
  }
  return b.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Sends one request and fills `rec`; never throws.
void send_one(httplib::Client& client, const std::string& path, const BenchSpec& spec, const std::string& body,
              Clock::time_point t0, RequestRecord& rec) {
  CompletionStreamReader reader(spec.chat);
  SseParser parser;
  std::string raw;
  bool is_sse = false;
  bool timed_out = false;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers_for(spec);
  req.headers.emplace("Content-Type", "application/json");
  req.body = body;
  req.response_handler = [&](const httplib::Response& r) {
    rec.http_status = r.status;
    is_sse = r.status == 200 && r.get_header_value("Content-Type").find("text/event-stream") != std::string::npos;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    double now = seconds_since(t0);
    if (now - rec.start_s > spec.timeout_s) {
      timed_out = true;
      return false;
    }
    if (is_sse) {
      for (const std::string& payload : parser.feed(std::string_view(data, n))) reader.on_payload(payload, now);
    } else if (raw.size() < kMaxBody) {
      raw.append(data, std::min(n, kMaxBody - raw.size()));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  rec.start_s = seconds_since(t0);
  bool sent = client.send(req, res, err);
  rec.end_s = seconds_since(t0);
  rec.ok = false;
  if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "timed out after %g s", spec.timeout_s);
    rec.error = buf;
    return;
  }
  if (!sent) {
    rec.error = "request failed: " + describe_transport_error(err);
    return;
  }
  if (res.status != 200) {
    rec.error = http_error(res.status, raw);
    return;
  }
  if (is_sse) {
    for (const std::string& payload : parser.finish()) reader.on_payload(payload, rec.end_s);
    reader.finish(rec, true);
    if (parser.overflowed() && rec.ok) {
      rec.ok = false;
      rec.error = "an SSE line exceeded 64 MiB";
    }
  } else {
    reader.on_body(raw, rec.end_s);
    reader.finish(rec, false);
  }
}

// Runs every body with at most `concurrency` in flight; returns the records and the wall time.
std::vector<RequestRecord> run_phase(const HttpTarget& target, const BenchSpec& spec, const std::vector<std::string>& bodies,
                                     const std::vector<int64_t>& prompt_tokens, double& wall_s) {
  std::vector<RequestRecord> records(bodies.size());
  std::atomic<size_t> next{0};
  const std::string path = target.prefix + (spec.chat ? "/v1/chat/completions" : "/v1/completions");
  Clock::time_point t0 = Clock::now();
  auto client_loop = [&] {
    std::unique_ptr<httplib::Client> client;
    for (size_t i; (i = next.fetch_add(1)) < bodies.size();) {
      RequestRecord& rec = records[i];
      rec.index = static_cast<int>(i);
      rec.prompt_tokens = prompt_tokens[i];
      try {
        if (!client) client = make_client(target, spec);
        send_one(*client, path, spec, bodies[i], t0, rec);
        // A failed request may leave the connection mid-response: start afresh.
        if (!rec.ok) client.reset();
      } catch (const std::exception& e) {
        rec.ok = false;
        rec.error = std::string("client error: ") + e.what();
        rec.end_s = seconds_since(t0);
        client.reset();
      }
    }
  };
  size_t n_threads = std::min(bodies.size(), static_cast<size_t>(spec.concurrency));
  std::vector<std::thread> threads;
  threads.reserve(n_threads);
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(client_loop);
  for (auto& t : threads) t.join();
  wall_s = 0.0;
  for (const RequestRecord& r : records) wall_s = std::max(wall_s, r.end_s);
  return records;
}

}  // namespace

Expected<HttpTarget> parse_bench_url(const std::string& url) {
  size_t sep = url.find("://");
  if (sep == std::string::npos) return invalid_argument("bench: --url must look like http://host:port, got '" + url + "'");
  std::string scheme = url.substr(0, sep);
  if (scheme != "http" && scheme != "https")
    return invalid_argument("bench: --url scheme must be http or https, got '" + scheme + "'");
  std::string rest = url.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  std::string host = authority;
  std::string port = scheme == "https" ? "443" : "80";
  size_t colon = authority.rfind(':');
  size_t bracket = authority.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument("bench: --url has no host: '" + url + "'");
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    return invalid_argument("bench: --url port must be 1..65535, got '" + port + "'");
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  return HttpTarget{scheme + "://" + host + ":" + port, path};
}

Expected<BenchRun> run_http_bench(const BenchSpec& spec) {
  TF_RETURN_IF_ERROR(validate(spec));
  TF_ASSIGN_OR_RETURN(HttpTarget target, parse_bench_url(spec.url));
  BenchRun run;
  run.mode = "http";
  auto setup_client = make_client(target, spec);
  TF_ASSIGN_OR_RETURN(run.model, preflight(*setup_client, target, spec));
  // Measured prompts are 0..requests-1, warmup prompts follow: none shares a prefix.
  int total = spec.requests + spec.warmup;
  TF_ASSIGN_OR_RETURN(Prompts prompts, make_prompts(*setup_client, target, spec, total, run.notes));
  std::vector<std::string> bodies, warm_bodies;
  std::vector<int64_t> lens, warm_lens;
  for (int i = 0; i < total; ++i) {
    bool warm = i >= spec.requests;
    (warm ? warm_bodies : bodies).push_back(request_body(spec, run.model, prompts, static_cast<size_t>(i)));
    (warm ? warm_lens : lens).push_back(static_cast<int64_t>(prompts.ids[static_cast<size_t>(i)].size()));
  }
  setup_client.reset();
  double warm_wall = 0.0;
  if (!warm_bodies.empty()) {
    auto warm = run_phase(target, spec, warm_bodies, warm_lens, warm_wall);
    int failed = static_cast<int>(std::count_if(warm.begin(), warm.end(), [](const RequestRecord& r) { return !r.ok; }));
    if (failed > 0) run.notes.push_back(std::to_string(failed) + " of " + std::to_string(warm.size()) + " warmup requests failed");
  }
  if (spec.prime_prompts) {
    const BenchSpec prime = priming_spec(spec);
    std::vector<std::string> prime_bodies;
    for (int i = 0; i < spec.requests; ++i)
      prime_bodies.push_back(request_body(prime, run.model, prompts, static_cast<size_t>(i)));
    double prime_wall = 0.0;
    auto records = run_phase(target, prime, prime_bodies, lens, prime_wall);
    run.notes.push_back(prime_note(records, prime_wall));
  }
  run.records = run_phase(target, spec, bodies, lens, run.wall_s);
  if (!spec.streaming) run.notes.push_back("not streamed: TTFT is the whole latency and decode tok/s is not measured");
  return run;
}

}  // namespace tf::bench
