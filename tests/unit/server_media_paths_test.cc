// An error the engine finds in an image or video names the part where the client put it
// (media_parts.h): its path in the client's own request, in the message and in `param`,
// not its place in the chat messages a request was converted to.
#include <gtest/gtest.h>

#include <string>

#include "server_test_util.h"

namespace tf::server::testing {
namespace {

const char* kPng = "data:image/png;base64,iVBORw0KGgo=";

// The error object of a refused request.
Json refusal(TestServer& ts, const std::string& path, const Json& body) {
  auto c = ts.client();
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res) << path;
  if (!res) return Json();
  EXPECT_EQ(res->status, 400) << res->body;
  return Json::parse(res->body)["error"];
}

bool starts_with(const Json& message, const std::string& prefix) {
  return message.is_string() && message.get<std::string>().rfind(prefix, 0) == 0;
}

// No client-path mark reaches the engine.
void expect_no_marks(const FakeEngine& engine) {
  EXPECT_EQ(engine.rendered_messages.dump().find("_client_path"), std::string::npos)
      << engine.rendered_messages.dump();
}

TEST(ServerMediaPaths, ChatErrorsNameTheMessageAndGiveParam) {
  TestServer ts;
  ts.engine.refuse_media = true;
  Json body = {{"model", "fake-model"},
               {"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"},
                  {"content", {{{"type", "text"}, {"text", "What is this?"}},
                               {{"type", "image_url"}, {"image_url", {{"url", kPng}}}}}}}}}};
  Json e = refusal(ts, "/v1/chat/completions", body);
  EXPECT_TRUE(starts_with(e["message"], "messages[1].content[1]: ")) << e.dump();
  EXPECT_EQ(e["param"], "messages[1].content[1]");
  expect_no_marks(ts.engine);
  // /tokenize with messages takes the same path.
  e = refusal(ts, "/tokenize", body);
  EXPECT_EQ(e["param"], "messages[1].content[1]") << e.dump();
}

// An error of the conversation as a whole (the chat template refused it) gives param "messages".
TEST(ServerMediaPaths, ConversationErrorsGiveParamMessages) {
  TestServer ts;
  ts.engine.refuse_conversation = true;
  Json body = {{"model", "fake-model"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  Json e = refusal(ts, "/v1/chat/completions", body);
  EXPECT_TRUE(starts_with(e["message"], "chat template: ")) << e.dump();
  EXPECT_EQ(e["param"], "messages") << e.dump();
}

TEST(ServerMediaPaths, ResponsesErrorsNameTheInputItem) {
  TestServer ts;
  ts.engine.refuse_media = true;
  // instructions become messages[0]; the reasoning item and the reasoning text are left
  // out, so the image is messages[1].content[1] of the converted chat.
  Json body = {{"model", "fake-model"},
               {"instructions", "Be brief."},
               {"input",
                {{{"type", "reasoning"}, {"summary", Json::array()}},
                 {{"role", "user"},
                  {"content", {{{"type", "input_text"}, {"text", "What is this?"}},
                               {{"type", "reasoning_text"}, {"text", "hm"}},
                               {{"type", "input_image"}, {"image_url", kPng}}}}}}}};
  Json e = refusal(ts, "/v1/responses", body);
  EXPECT_TRUE(starts_with(e["message"], "input[1].content[2]: ")) << e.dump();
  EXPECT_EQ(e["param"], "input[1].content[2]");
  expect_no_marks(ts.engine);
}

TEST(ServerMediaPaths, AnthropicErrorsNameTheClientsMessage) {
  TestServer ts;
  ts.engine.refuse_media = true;
  Json body = {{"model", "fake-model"},
               {"max_tokens", 10},
               {"system", "Be brief."},
               {"messages",
                {{{"role", "user"},
                  {"content", {{{"type", "image"},
                                {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "iVBORw0KGgo="}}}},
                               {{"type", "text"}, {"text", "What is this?"}}}}}}}};
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    Json e = refusal(ts, path, body);
    EXPECT_TRUE(starts_with(e["message"], "messages[0].content[0]: ")) << path << " " << e.dump();
  }
  expect_no_marks(ts.engine);
}

}  // namespace
}  // namespace tf::server::testing
