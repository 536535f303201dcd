// toolcheck: the tool-calling paths agents depend on (reference-deployment.md §3 #5).
//   1. a question a tool answers gets a call of that tool, its arguments valid for its schema
//   2. the same request streamed puts together into the same reply (ids, names, arguments)
//   3. a forced call (tool_choice naming a tool) is complete and valid
//   4. a tool result in the history is answered
//   5. an earlier call stored with blank arguments is answered (a client's no-argument call)
//   6. an earlier call whose arguments are not JSON is answered, or refused with a 400 naming
//      the field (never a server error)
// 1 and 3 judge the model; the others the server.
#include "check/chat_reply.h"
#include "check/check_text.h"
#include "check/live_checks.h"
#include "check/schema_check.h"

namespace tf::check {
namespace {

Json tool_definitions() {
  Json weather = {{"type", "object"},
                  {"properties",
                   {{"city", {{"type", "string"}, {"description", "city name"}}},
                    {"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}}}},
                  {"required", {"city", "unit"}}};
  Json time = {
      {"type", "object"},
      {"properties", {{"timezone", {{"type", "string"}, {"description", "IANA name, e.g. Asia/Tokyo"}}}}},
      {"required", {"timezone"}}};
  return Json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"}, {"description", "Current weather in a city"}, {"parameters", weather}}}},
       {{"type", "function"},
        {"function",
         {{"name", "get_time"},
          {"description", "Current local time in a timezone"},
          {"parameters", time}}}}});
}

const Json& schema_of(const Json& tools, const std::string& name) {
  for (const Json& t : tools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  static const Json none = nullptr;
  return none;
}

// "" when the reply's first call is `name` with arguments valid for its schema; else why not.
std::string call_problem(const ChatReply& reply, const Json& tools, const std::string& name) {
  if (reply.tool_calls.empty())
    return "no tool call (finish_reason " + reply.finish_reason + ", content " +
           quoted_excerpt(reply.content, 50) + ")";
  const ToolCall& call = reply.tool_calls[0];
  if (call.name != name) return "called " + quoted_excerpt(call.name, 40) + " instead of " + name;
  if (reply.finish_reason == "length")
    return "the call ran to max_tokens: " + quoted_excerpt(call.arguments, 50);
  Json args = Json::parse(call.arguments, nullptr, false);
  if (args.is_discarded() || !args.is_object())
    return "arguments are not a JSON object: " + quoted_excerpt(call.arguments, 50);
  auto problems = schema_violations(schema_of(tools, name), args);
  if (!problems.empty()) return problems[0];
  if (call.id.empty()) return "the call has no id";
  return "";
}

}  // namespace

Status run_tool_check(const CheckContext& ctx, CheckResult& result) {
  CheckClient client = ctx.client();
  const Json tools = tool_definitions();
  const int64_t budget = ctx.options().reasoning_effort == "none" ? 256 : 4096;

  // 1 + 2: a fitting question, whole and streamed.
  Json ask =
      Json::array({{{"role", "user"}, {"content", "What is the weather in Paris right now? Use celsius."}}});
  Json body = ctx.chat_body(ask, budget);
  body["tools"] = tools;
  TF_ASSIGN_OR_RETURN(HttpReply whole, client.post("/v1/chat/completions", body));
  if (whole.status != 200) return unavailable("POST /v1/chat/completions with tools: " + whole.describe());
  TF_ASSIGN_OR_RETURN(ChatReply reply, parse_chat_reply(whole.json));
  std::string problem = call_problem(reply, tools, "get_weather");
  result.expect("a fitting question calls the tool", problem.empty(),
                problem.empty() ? "get_weather " + reply.tool_calls[0].arguments : problem);
  result.data["auto_reply"] = whole.json;

  Json streamed_body = body;
  streamed_body["stream"] = true;
  streamed_body["stream_options"] = {{"include_usage", true}};
  TF_ASSIGN_OR_RETURN(StreamReply stream, client.post_stream("/v1/chat/completions", streamed_body));
  std::string stream_problem;
  if (stream.status != 200)
    stream_problem = "HTTP " + std::to_string(stream.status) + ": " + stream.body.substr(0, 120);
  else if (!stream.bad_payload.empty())
    stream_problem = "a chunk is not JSON: " + quoted_excerpt(stream.bad_payload, 50);
  else if (!stream.done)
    stream_problem = "the stream ended without [DONE]";
  if (stream_problem.empty()) {
    auto assembled = assemble_chat_stream(stream.chunks);
    if (!assembled)
      stream_problem = assembled.status().message();
    else
      stream_problem = reply_difference(*assembled, reply);
  }
  result.expect("the streamed reply equals the whole one", stream_problem.empty(),
                stream_problem.empty() ? std::to_string(stream.chunks.size()) + " chunks, " +
                                             std::to_string(reply.tool_calls.size()) + " tool call(s)"
                                       : stream_problem);

  // 3: a forced call.
  Json forced =
      ctx.chat_body(Json::array({{{"role", "user"}, {"content", "What time is it in Tokyo?"}}}), budget);
  forced["tools"] = tools;
  forced["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_time"}}}};
  TF_ASSIGN_OR_RETURN(HttpReply forced_reply, client.post("/v1/chat/completions", forced));
  if (forced_reply.status != 200) {
    result.expect("a forced call is complete and valid", false, forced_reply.describe());
  } else {
    TF_ASSIGN_OR_RETURN(ChatReply f, parse_chat_reply(forced_reply.json));
    std::string p = call_problem(f, tools, "get_time");
    result.expect("a forced call is complete and valid", p.empty(),
                  p.empty() ? "get_time " + f.tool_calls[0].arguments : p);
  }

  // 4: the tool's result in the history.
  Json call = {
      {"id", "call_check_1"},
      {"type", "function"},
      {"function", {{"name", "get_weather"}, {"arguments", R"({"city": "Paris", "unit": "celsius"})"}}}};
  Json history = ask;
  history.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}});
  history.push_back({{"role", "tool"},
                     {"tool_call_id", "call_check_1"},
                     {"content", R"({"temperature": 18, "sky": "clear"})"}});
  Json answer = ctx.chat_body(history, 128);
  answer["tools"] = tools;
  TF_ASSIGN_OR_RETURN(HttpReply answered, client.post("/v1/chat/completions", answer));
  auto answered_reply =
      answered.status == 200 ? parse_chat_reply(answered.json) : Expected<ChatReply>(unavailable("no reply"));
  result.expect(
      "a tool result in the history is answered", answered.status == 200 && answered_reply.has_value(),
      answered.status != 200        ? answered.describe()
      : !answered_reply.has_value() ? answered_reply.status().message()
                                    : "finish_reason " + answered_reply->finish_reason + ", content " +
                                          quoted_excerpt(answered_reply->content, 50));

  // 5: an earlier call stored without arguments ("", as many clients keep a no-argument call).
  Json blank = history;
  blank[1]["tool_calls"][0]["function"]["arguments"] = "";
  Json blank_body = ctx.chat_body(blank, 32);
  blank_body["tools"] = tools;
  TF_ASSIGN_OR_RETURN(HttpReply tolerant, client.post("/v1/chat/completions", blank_body));
  result.expect("an earlier call with blank arguments is answered", tolerant.status == 200,
                tolerant.status == 200 ? "HTTP 200" : tolerant.describe());

  // 6: an earlier call whose arguments are not JSON: answered, or a 400 that names the field
  // (never a server error or a template's stack of messages).
  Json broken = history;
  broken[1]["tool_calls"][0]["function"]["arguments"] = "{city: Paris, unit: celsius";
  Json broken_body = ctx.chat_body(broken, 32);
  broken_body["tools"] = tools;
  TF_ASSIGN_OR_RETURN(HttpReply judged, client.post("/v1/chat/completions", broken_body));
  std::string param;
  if (judged.json.is_object() && judged.json.contains("error") && judged.json["error"].is_object() &&
      judged.json["error"].contains("param") && judged.json["error"]["param"].is_string())
    param = judged.json["error"]["param"];
  const bool clear =
      judged.status == 200 || (judged.status == 400 && param.find("arguments") != std::string::npos);
  result.expect("an earlier call with arguments that are not JSON is answered or refused naming the field",
                clear, judged.describe().substr(0, 160));
  return Status();
}

}  // namespace tf::check
