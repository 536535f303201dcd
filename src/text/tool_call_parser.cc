// GLM tool-call parsing, streaming by re-parse and diff (see tool_call_parser.h).
#include "text/tool_call_parser.h"

#include <algorithm>

#include "text/jinja_strings.h"
#include "text/jinja_value.h"
#include "text/json_parse.h"
#include "text/reasoning_parser.h"

namespace tf {
namespace {

constexpr std::string_view kCallStart = "<tool_call>";
constexpr std::string_view kCallEnd = "</tool_call>";
constexpr std::string_view kKeyStart = "<arg_key>";
constexpr std::string_view kKeyEnd = "</arg_key>";
constexpr std::string_view kValueStart = "<arg_value>";
constexpr std::string_view kValueEnd = "</arg_value>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string json_string(std::string_view s) {
  std::string out;
  jinja::json_escape_string(out, s, false);
  return out;
}

}  // namespace

bool tool_parameter_is_string(const nlohmann::json& schema) {
  if (!schema.is_object()) return false;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string() && t->get<std::string>() == "string") return true;
    if (t->is_array())
      for (const auto& x : *t)
        if (x.is_string() && x.get<std::string>() == "string") return true;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto alt = schema.find(key); alt != schema.end() && alt->is_array())
      for (const auto& x : *alt)
        if (tool_parameter_is_string(x)) return true;
  }
  return false;
}

GlmToolCallParser::GlmToolCallParser(const nlohmann::json& tools)
    : tools_(tools.is_array() ? tools : nlohmann::json::array()) {}

bool GlmToolCallParser::is_string_param(const std::string& tool, const std::string& key) const {
  for (const auto& t : tools_) {
    if (!t.is_object()) continue;
    const nlohmann::json& fn = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!fn.contains("name") || fn["name"] != tool) continue;
    auto params = fn.find("parameters");
    if (params == fn.end() || !params->is_object()) return false;
    auto props = params->find("properties");
    if (props == params->end() || !props->is_object()) return false;
    auto prop = props->find(key);
    return prop != props->end() && tool_parameter_is_string(*prop);
  }
  return false;
}

std::string GlmToolCallParser::typed_value(const std::string& tool, const std::string& key,
                                           const std::string& raw) const {
  if (is_string_param(tool, key)) return json_string(raw);
  std::string stripped = trim(raw);
  // json.dumps(json.loads(value)) as vLLM's parser writes it: an integer of any size stays exact
  // (a 20-digit id must reach the client as the model wrote it, not as 1.2345678901234567e+19).
  try {
    jinja::JsonDumpOptions options;  // json.dumps defaults with ensure_ascii=False
    return jinja::json_dumps(jinja::Value::parse_json(stripped, text::kMaxJsonDepth), options);
  } catch (const jinja::JinjaError&) {
    // not JSON: Python literals, else the text as a string
  }
  if (stripped == "True") return "true";
  if (stripped == "False") return "false";
  if (stripped == "None") return "null";
  return json_string(raw);
}

GlmToolCallParser::Snapshot GlmToolCallParser::scan(std::string_view text, bool final) const {
  Snapshot snap;
  size_t first = text.find(kCallStart);
  if (first == std::string_view::npos) {
    size_t hold = final ? 0 : std::max(partial_tag_suffix(text, kCallStart), incomplete_utf8_suffix(text));
    snap.content_end = text.size() - hold;
    return snap;
  }
  snap.content_end = first;
  size_t pos = first;
  while (pos != std::string_view::npos) {
    size_t body_start = pos + kCallStart.size();
    size_t end = text.find(kCallEnd, body_start);
    CallView call;
    call.closed = end != std::string_view::npos;
    std::string_view body = text.substr(body_start, call.closed ? end - body_start : std::string_view::npos);
    // Name: up to a newline or the first <arg_key> (or the end of a closed call).
    size_t name_end = std::min(body.find('\n'), body.find(kKeyStart));
    call.name_complete = name_end != std::string_view::npos || call.closed;
    if (name_end == std::string_view::npos) name_end = body.size();
    call.name = trim(body.substr(0, name_end));
    if (!call.closed && !call.name_complete) {
      snap.calls.push_back(std::move(call));
      break;
    }
    size_t p = name_end;
    while (true) {
      size_t k = body.find(kKeyStart, p);
      if (k == std::string_view::npos) break;
      size_t ke = body.find(kKeyEnd, k + kKeyStart.size());
      if (ke == std::string_view::npos) break;
      PairView pair;
      pair.key = std::string(body.substr(k + kKeyStart.size(), ke - k - kKeyStart.size()));
      size_t v = ke + kKeyEnd.size();
      while (v < body.size() && is_space(body[v])) ++v;
      if (body.substr(v, kValueStart.size()) != kValueStart) break;  // value not started (yet)
      size_t vs = v + kValueStart.size();
      size_t ve = body.find(kValueEnd, vs);
      if (ve == std::string_view::npos) {
        std::string_view partial = body.substr(vs);
        size_t hold =
            final ? 0 : std::max(partial_tag_suffix(partial, kValueEnd), incomplete_utf8_suffix(partial));
        pair.value = std::string(partial.substr(0, partial.size() - hold));
        call.pairs.push_back(std::move(pair));
        break;
      }
      pair.value = std::string(body.substr(vs, ve - vs));
      pair.complete = true;
      call.pairs.push_back(std::move(pair));
      p = ve + kValueEnd.size();
    }
    snap.calls.push_back(std::move(call));
    if (!snap.calls.back().closed) break;
    pos = text.find(kCallStart, end + kCallEnd.size());
  }
  return snap;
}

std::string GlmToolCallParser::arguments_so_far(const CallView& call) const {
  std::string out;
  bool any = false;
  for (const auto& pair : call.pairs) {
    bool streamable = pair.complete || is_string_param(call.name, pair.key);
    if (!streamable) break;
    out += any ? ", " : "{";
    any = true;
    out += json_string(pair.key) + ": ";
    if (pair.complete) {
      out += typed_value(call.name, pair.key, pair.value);
    } else {
      std::string partial = json_string(pair.value);
      partial.pop_back();  // no closing quote until </arg_value>
      out += partial;
      break;
    }
  }
  if (call.closed) out += any ? "}" : "{}";
  return out;
}

ToolParserDelta GlmToolCallParser::step(bool final) {
  ToolParserDelta delta;
  Snapshot snap = scan(text_, final);
  if (snap.content_end > content_sent_) {
    delta.content = text_.substr(content_sent_, snap.content_end - content_sent_);
    content_sent_ = snap.content_end;
  }
  completed_ = 0;
  for (size_t i = 0; i < snap.calls.size(); ++i) {
    const CallView& call = snap.calls[i];
    if (call.closed) ++completed_;
    if (!call.name_complete || call.name.empty()) continue;
    if (sent_.size() <= i) sent_.resize(i + 1);
    ToolCallDelta d;
    d.index = i;
    bool changed = false;
    if (!sent_[i].name) {
      d.name = call.name;
      sent_[i].name = true;
      changed = true;
    }
    std::string args = arguments_so_far(call);
    if (args.size() > sent_[i].arguments.size() &&
        args.compare(0, sent_[i].arguments.size(), sent_[i].arguments) == 0) {
      d.arguments = args.substr(sent_[i].arguments.size());
      sent_[i].arguments = std::move(args);
      changed = true;
    }
    if (changed) delta.calls.push_back(std::move(d));
  }
  return delta;
}

ToolParserDelta GlmToolCallParser::feed(std::string_view text) {
  text_.append(text);
  return step(false);
}

ToolParserDelta GlmToolCallParser::finish() { return step(true); }

size_t GlmToolCallParser::completed_calls() const { return completed_; }

ToolCallParseResult GlmToolCallParser::parse(std::string_view text) const {
  ToolCallParseResult result;
  Snapshot snap = scan(text, true);
  std::string content(text.substr(0, snap.content_end));
  if (!std::all_of(content.begin(), content.end(), is_space)) result.content = std::move(content);
  for (const auto& call : snap.calls) {
    if (!call.closed || call.name.empty()) continue;
    result.calls.push_back(ToolCall{call.name, arguments_so_far(call)});
  }
  return result;
}

}  // namespace tf
