#include "server/media_parts.h"

#include <cctype>
#include <set>

#include "server/api_error.h"

namespace tf::server {

namespace {

// The member of a normalized part that holds the client's path of the part.
constexpr const char* kClientPath = "_client_path";

// The URL of `field`: a string, or an object with a "url" string.
std::string url_field(const Json& part, const char* field, const std::string& pp) {
  const Json* v = json_field(part, field);
  if (v && v->is_string()) return v->get<std::string>();
  if (v && v->is_object()) {
    if (auto url = json_string(*v, "url")) return *url;
    throw bad_request("'" + pp + "." + field + ".url' is required and must be a string", pp + "." + field + ".url");
  }
  return {};
}

// "https://..." in any letter case: handed on to the engine (the server layer sees no media code).
bool https_url(const std::string& url) {
  static const std::string kScheme = "https://";
  if (url.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != kScheme[i]) return false;
  }
  return true;
}

Json checked(const std::string& url, bool video, const std::string& pp, MediaUrlPolicy policy) {
  // https:// URLs go on to the engine, which fetches them (engine/prompt_media.cc).
  if (url.rfind("data:", 0) != 0 && !(policy.https && https_url(url))) {
    const std::string https = policy.https ? " and https:// URLs"
                                           : " (https:// URLs too when the server runs with VISION_URLS=1)";
    throw bad_request("'" + pp + "': only data: URLs" + https + " are accepted for " + (video ? "videos" : "images") +
                          "; send the bytes as data:<mime>;base64,...",
                      pp, "invalid_image_url");
  }
  const char* key = video ? "video_url" : "image_url";
  return Json{{"type", key}, {key, Json{{"url", url}}}};
}

}  // namespace

bool is_media_part_type(const std::string& type) {
  static const std::set<std::string> kTypes = {"image_url", "input_image", "image", "video_url", "input_video", "video"};
  return kTypes.count(type) > 0;
}

Json normalized_media_part(const Json& part, const std::string& type, const std::string& pp,
                           MediaUrlPolicy policy) {
  const bool video = type == "video_url" || type == "input_video" || type == "video";
  std::string url = url_field(part, video ? "video_url" : "image_url", pp);
  if (url.empty()) url = url_field(part, video ? "video" : "image", pp);
  if (url.empty() && json_field(part, "file_id"))
    throw bad_request("'" + pp + ".file_id': uploaded files are not supported; send a data: URL", pp + ".file_id");
  if (url.empty())
    throw bad_request("'" + pp + "' needs the " + std::string(video ? "video" : "image") + " as a data: URL in '" +
                          (video ? "video_url" : "image_url") + "'",
                      pp);
  Json out = checked(url, video, pp, policy);
  // A converted request's part keeps the path its converter marked. (A client that sends
  // the mark itself only renames its own part in an error.)
  const Json* mark = json_field(part, kClientPath);
  out[kClientPath] = mark && mark->is_string() ? *mark : Json(pp);
  return out;
}

Json anthropic_image_part(const Json& block, const std::string& pp, MediaUrlPolicy policy) {
  const Json* source = json_field(block, "source");
  if (!source || !source->is_object()) throw bad_request("'" + pp + ".source' is required", pp + ".source");
  const std::string kind = json_string(*source, "type").value_or("");
  if (kind == "base64") {
    auto mime = json_string(*source, "media_type");
    auto data = json_string(*source, "data");
    if (!mime || !data)
      throw bad_request("'" + pp + ".source' needs 'media_type' and 'data' strings", pp + ".source");
    Json out = checked("data:" + *mime + ";base64," + *data, false, pp + ".source", policy);
    out[kClientPath] = pp;
    return out;
  }
  if (kind == "url") {
    auto url = json_string(*source, "url");
    if (!url) throw bad_request("'" + pp + ".source.url' is required", pp + ".source.url");
    Json out = checked(*url, false, pp + ".source.url", policy);
    out[kClientPath] = pp;
    return out;
  }
  throw bad_request("'" + pp + ".source.type' must be base64 or url", pp + ".source.type");
}

MediaSources take_media_sources(Json& messages) {
  MediaSources sources;
  if (!messages.is_array()) return sources;
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    Json& content = m["content"];
    for (size_t j = 0; j < content.size(); ++j) {
      Json& part = content[j];
      if (!part.is_object() || !part.contains(kClientPath)) continue;
      if (part[kClientPath].is_string()) {
        sources.emplace_back("messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]",
                             part[kClientPath].get<std::string>());
      }
      part.erase(kClientPath);
    }
  }
  return sources;
}

ApiError media_error(const Status& status, const MediaSources& sources) {
  ApiError plain = api_error_from_status(status);
  const std::string& message = status.message();
  for (const auto& [converted, client] : sources) {
    // The path must end there: messages[1].content[1] is not messages[1].content[10].
    if (message.rfind(converted, 0) != 0) continue;
    if (message.size() > converted.size() && message[converted.size()] != ':' && message[converted.size()] != '.')
      continue;
    return ApiError(plain.http_status(), client + message.substr(converted.size()), plain.type(), client,
                    plain.code());
  }
  // The rest is the conversation's as a whole: the chat template's errors (its raise_exception, a
  // render past its budget), the images and videos it holds in all.
  if (plain.http_status() == 400 && !plain.param())
    return ApiError(400, message, plain.type(), "messages", plain.code());
  return plain;
}

}  // namespace tf::server
