// POST /v1/embeddings against the scripted FakeEngine (its "hidden state" of a prompt is
// hidden[i] = prompt[i % n], prompt = the input's bytes): the response's shape, the vectors
// scaled to length 1, base64 as little-endian float32, inputs in order, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/base64.h"
#include "server_test_util.h"

namespace tf::server::testing {
namespace {

Json post(httplib::Client& c, const Json& body, int expect = 200) {
  auto res = c.Post("/v1/embeddings", body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return Json();
  EXPECT_EQ(res->status, expect) << res->body;
  return Json::parse(res->body);
}

// What the fake engine's vector of `bytes` is once scaled to length 1.
std::vector<float> expected(const std::string& bytes) {
  std::vector<double> v;
  double sum = 0;
  for (size_t i = 0; i < 8; ++i) {
    v.push_back(static_cast<unsigned char>(bytes[i % bytes.size()]));
    sum += v.back() * v.back();
  }
  std::vector<float> out;
  for (double x : v) out.push_back(static_cast<float>(x / std::sqrt(sum)));
  return out;
}

TEST(ServerEmbeddings, FloatVectorsOfLengthOneInOrder) {
  TestServer ts;
  auto c = ts.client();
  Json j = post(c, {{"model", "fake-model"}, {"input", {"hello", "a", "zz top"}}});
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "fake-model");
  ASSERT_EQ(j["data"].size(), 3u);
  const std::vector<std::string> inputs = {"hello", "a", "zz top"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    const auto v = j["data"][i]["embedding"].get<std::vector<float>>();
    EXPECT_EQ(v, expected(inputs[i])) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5 + 1 + 6);
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  for (const GenerationRequest& g : ts.engine.requests) {
    EXPECT_TRUE(g.embed);
    EXPECT_EQ(g.sampling.max_tokens, 0);
  }
}

TEST(ServerEmbeddings, Base64IsTheLittleEndianFloat32Bytes) {
  TestServer ts;
  auto c = ts.client();
  Json f = post(c, {{"input", "hello"}});
  Json b = post(c, {{"input", "hello"}, {"encoding_format", "base64"}});
  const std::string text = b["data"][0]["embedding"].get<std::string>();
  auto bytes = decode_base64(text, 1 << 20);
  ASSERT_TRUE(bytes.has_value()) << text;
  ASSERT_EQ(bytes->size(), 8 * sizeof(float));
  std::vector<float> v(8);
  std::memcpy(v.data(), bytes->data(), bytes->size());
  EXPECT_EQ(v, f["data"][0]["embedding"].get<std::vector<float>>());
}

TEST(ServerEmbeddings, TokenIdsAndManyInputsInWaves) {
  TestServer ts;
  auto c = ts.client();
  Json ids = post(c, {{"input", {65, 66, 67}}});
  EXPECT_EQ(ids["data"][0]["embedding"].get<std::vector<float>>(), expected("ABC"));
  Json lists = Json::array();
  for (int i = 0; i < 40; ++i) lists.push_back({65 + i % 26, 97});  // more than one wave (2 x PARALLEL)
  Json many = post(c, {{"input", lists}, {"dimensions", 8}});
  ASSERT_EQ(many["data"].size(), 40u);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(many["data"][i]["index"], i);
    EXPECT_EQ(many["data"][i]["embedding"].get<std::vector<float>>(),
              expected(std::string{static_cast<char>(65 + i % 26), 'a'}));
  }
}

TEST(ServerEmbeddings, RefusalsNameTheirField) {
  TestServer ts;
  auto c = ts.client();
  auto refused = [&](const Json& body, const std::string& param, int status = 400) {
    Json j = post(c, body, status);
    EXPECT_EQ(j["error"]["param"], param) << body.dump() << " " << j.dump();
  };
  refused(Json::object(), "input");
  refused({{"input", ""}}, "input");
  refused({{"input", Json::array()}}, "input");
  refused({{"input", {"ok", 3}}}, "input");
  refused({{"input", {1, -2}}}, "input");
  refused({{"input", {{1, 999}}}}, "input");  // out of the vocabulary
  refused({{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format");
  refused({{"input", "x"}, {"dimensions", 4}}, "dimensions");
  refused({{"input", "x"}, {"model", "other"}}, "model", 404);
  Json long_input = post(c, {{"input", std::string(5000, 'x')}}, 400);
  EXPECT_EQ(long_input["error"]["code"], "context_length_exceeded");
  EXPECT_TRUE(ts.engine.requests.empty()) << "nothing reached the engine";
}

}  // namespace
}  // namespace tf::server::testing
