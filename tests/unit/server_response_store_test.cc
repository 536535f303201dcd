// Stored Responses (`store`, OpenAI's default): previous_response_id continues a stored
// conversation; GET / DELETE /v1/responses/{id}; the store's bounds (response_store.h).
#include <gtest/gtest.h>

#include <string>

#include "server/response_store.h"
#include "server_test_util.h"

namespace tf::server::testing {
namespace {

Json post(httplib::Client& c, const Json& body, int expect = 200) {
  auto res = c.Post("/v1/responses", body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return Json();
  EXPECT_EQ(res->status, expect) << res->body;
  return Json::parse(res->body);
}

int get_status(httplib::Client& c, const std::string& id, Json* body = nullptr) {
  auto res = c.Get(("/v1/responses/" + id).c_str());
  if (!res) return -1;
  if (body) *body = Json::parse(res->body);
  return res->status;
}

TEST(ResponseStore, KeepsTheNewestWithinItsBounds) {
  ResponseStore by_count(2, size_t{1} << 20);
  for (const char* id : {"a", "b", "c"}) by_count.put(id, StoredResponse{Json{{"id", id}}, Json::array()});
  EXPECT_FALSE(by_count.get("a"));
  ASSERT_TRUE(by_count.get("c"));
  EXPECT_EQ(by_count.get("c")->response["id"], "c");
  EXPECT_EQ(by_count.size(), 2u);
  EXPECT_TRUE(by_count.erase("b"));
  EXPECT_FALSE(by_count.erase("b"));
  ResponseStore by_bytes(100, 200);
  const std::string big(150, 'x');
  by_bytes.put("x", StoredResponse{Json{{"t", big}}, Json::array()});
  by_bytes.put("y", StoredResponse{Json{{"t", big}}, Json::array()});  // pushes x out
  EXPECT_FALSE(by_bytes.get("x"));
  EXPECT_TRUE(by_bytes.get("y"));
  by_bytes.put("z", StoredResponse{Json{{"t", std::string(300, 'z')}}, Json::array()});  // larger than all
  EXPECT_FALSE(by_bytes.get("z"));
  EXPECT_TRUE(by_bytes.get("y"));
}

TEST(ServerResponses, PreviousResponseIdContinuesTheStoredConversation) {
  TestServer ts;
  ts.engine.set_text_script("", "Hi there", FinishReason::kStop);
  auto c = ts.client();
  Json first = post(c, {{"input", "hi"}, {"instructions", "be brief"}});
  EXPECT_EQ(first["store"], true);
  const std::string id = first["id"];
  Json got;
  ASSERT_EQ(get_status(c, id, &got), 200);
  EXPECT_EQ(got, first);

  Json second = post(c, {{"input", "and again"}, {"previous_response_id", id}});
  EXPECT_EQ(second["previous_response_id"], id);
  // The prompt holds the earlier turn (its input and its answer; not its instructions).
  const Json& sent = ts.engine.rendered_messages;
  ASSERT_EQ(sent.size(), 3u) << sent.dump();
  EXPECT_EQ(sent[0]["role"], "user");
  EXPECT_EQ(sent[0]["content"], "hi");
  EXPECT_EQ(sent[1]["role"], "assistant");
  EXPECT_NE(sent[1].dump().find("Hi there"), std::string::npos);
  EXPECT_EQ(sent[2]["content"], "and again");
  // A third turn chains through the second.
  post(c, {{"input", [] {
              Json items = Json::array();
              items.push_back({{"role", "user"}, {"content", "third"}});
              return items;
            }()},
           {"previous_response_id", second["id"]}});
  EXPECT_EQ(ts.engine.rendered_messages.size(), 5u) << ts.engine.rendered_messages.dump();

  // Streamed responses are stored too.
  auto res = c.Post("/v1/responses", Json{{"input", "hi"}, {"stream", true}}.dump(), "application/json");
  ASSERT_TRUE(res);
  const std::string marker = "\"id\":\"resp_";
  const size_t at = res->body.find(marker);
  ASSERT_NE(at, std::string::npos);
  const std::string streamed_id = res->body.substr(at + 6, res->body.find('"', at + 6) - at - 6);
  EXPECT_EQ(get_status(c, streamed_id, &got), 200) << streamed_id;
  EXPECT_EQ(got["status"], "completed");
}

TEST(ServerResponses, UnknownUnstoredAndDeletedResponsesAre404) {
  TestServer ts;
  auto c = ts.client();
  Json e = post(c, {{"input", "hi"}, {"previous_response_id", "resp_nope"}}, 404);
  EXPECT_EQ(e["error"]["param"], "previous_response_id");
  EXPECT_EQ(e["error"]["code"], "previous_response_not_found");
  e = post(c, {{"input", "hi"}, {"previous_response_id", 7}}, 400);
  EXPECT_EQ(e["error"]["param"], "previous_response_id");

  Json unstored = post(c, {{"input", "hi"}, {"store", false}});
  EXPECT_EQ(unstored["store"], false);
  EXPECT_EQ(get_status(c, unstored["id"]), 404);
  post(c, {{"input", "hi"}, {"previous_response_id", unstored["id"]}}, 404);

  Json kept = post(c, {{"input", "hi"}});
  auto del = c.Delete(("/v1/responses/" + kept["id"].get<std::string>()).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(Json::parse(del->body)["deleted"], true);
  EXPECT_EQ(get_status(c, kept["id"], &e), 404);
  EXPECT_EQ(e["error"]["code"], "response_not_found");
  EXPECT_EQ(c.Delete(("/v1/responses/" + kept["id"].get<std::string>()).c_str())->status, 404);
}

}  // namespace
}  // namespace tf::server::testing
