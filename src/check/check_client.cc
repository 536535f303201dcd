#include "check/check_client.h"

#include <chrono>

#include "bench/http_errors.h"
#include "bench/sse_parser.h"

namespace tf::check {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string transport_error(const std::string& what, httplib::Error e) {
  return what + ": " + bench::describe_transport_error(e);
}

}  // namespace

std::string HttpReply::describe() const {
  std::string out = "HTTP " + std::to_string(status);
  if (json.is_object() && json.contains("error") && json["error"].is_object()) {
    const Json& e = json["error"];
    if (std::string code = error_code(); !code.empty()) out += " " + code;
    if (e.contains("message") && e["message"].is_string()) out += ": " + e["message"].get<std::string>();
    return out;
  }
  if (!body.empty()) out += ": " + body.substr(0, 160);
  return out;
}

std::string HttpReply::error_code() const {
  if (!json.is_object() || !json.contains("error") || !json["error"].is_object()) return "";
  const Json& e = json["error"];
  if (e.contains("code") && e["code"].is_string()) return e["code"].get<std::string>();
  if (e.contains("type") && e["type"].is_string()) return e["type"].get<std::string>();
  return "";
}

CheckClient::CheckClient(bench::HttpTarget target, std::string api_key, double timeout_s)
    : target_(std::move(target)), api_key_(std::move(api_key)), timeout_s_(timeout_s) {
  client_ = std::make_unique<httplib::Client>(target_.base);
  client_->set_connection_timeout(10, 0);
  const auto whole = static_cast<time_t>(timeout_s_);
  client_->set_read_timeout(whole, static_cast<time_t>((timeout_s_ - static_cast<double>(whole)) * 1e6));
  client_->set_write_timeout(60, 0);
  client_->set_keep_alive(true);
}

httplib::Headers CheckClient::headers() const {
  httplib::Headers h = {{"Accept", "application/json, text/event-stream"}};
  if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
  return h;
}

Expected<HttpReply> CheckClient::get(const std::string& path) {
  const auto t0 = Clock::now();
  auto res = client_->Get((target_.prefix + path).c_str(), headers());
  if (!res) return unavailable(transport_error("GET " + target_.base + target_.prefix + path, res.error()));
  HttpReply r{res->status, res->headers, res->body, Json::parse(res->body, nullptr, false), since(t0)};
  if (r.json.is_discarded()) r.json = nullptr;
  return r;
}

Expected<HttpReply> CheckClient::post(const std::string& path, const Json& body) {
  const auto t0 = Clock::now();
  auto res = client_->Post((target_.prefix + path).c_str(), headers(), body.dump(), "application/json");
  if (!res) return unavailable(transport_error("POST " + target_.base + target_.prefix + path, res.error()));
  HttpReply r{res->status, res->headers, res->body, Json::parse(res->body, nullptr, false), since(t0)};
  if (r.json.is_discarded()) r.json = nullptr;
  return r;
}

Expected<StreamReply> CheckClient::post_stream(const std::string& path, const Json& body) {
  StreamReply out;
  bench::SseParser parser;
  auto take = [&](const std::vector<std::string>& payloads) {
    for (const std::string& p : payloads) {
      if (p == "[DONE]") {
        out.done = true;
        continue;
      }
      Json j = Json::parse(p, nullptr, false);
      if (j.is_discarded()) {
        if (out.bad_payload.empty()) out.bad_payload = p.substr(0, 200);
        continue;
      }
      out.chunks.push_back(std::move(j));
    }
  };
  httplib::Request req;
  req.method = "POST";
  req.path = target_.prefix + path;
  req.headers = headers();
  req.headers.emplace("Content-Type", "application/json");
  req.body = body.dump();
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.status == 200)
      take(parser.feed(std::string_view(data, n)));
    else if (out.body.size() < (size_t{1} << 20))
      out.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const auto t0 = Clock::now();
  if (!client_->send(req, res, err))
    return unavailable(transport_error("POST " + target_.base + req.path + " (streamed)", err));
  if (out.status == 200) take(parser.finish());
  out.seconds = since(t0);
  return out;
}

}  // namespace tf::check
