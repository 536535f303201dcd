// Logprobs through the HTTP layer: a stream carries every generated token's entry exactly
// once, in order, the same entries as the non-streaming reply -- also tokens that show no
// text (half of a multi-byte character, a skipped special token, the end token).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_test_util.h"

namespace tf::server::testing {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD: a token that is half a character

struct ScriptToken {
  std::string text;   // what the token adds to the answer ("" when nothing shows yet)
  std::string token;  // its logprob entry's token string
  std::vector<uint8_t> bytes;
};

// "He", the first and second bytes of "é", a skipped special token, "llo", the end token:
// the answer is "Heéllo" from six tokens.
std::vector<ScriptToken> tokens_of_hello() {
  return {{"He", "He", {'H', 'e'}},
          {"", kReplacement, {0xC3}},
          {"\xC3\xA9", kReplacement, {0xA9}},
          {"", "<|sp|>", {}},
          {"llo", "llo", {'l', 'l', 'o'}},
          {"", "<|endoftext|>", {}}};
}

void script_tokens(FakeEngine& engine, const std::vector<ScriptToken>& tokens) {
  engine.script.clear();
  double logprob = -0.25;
  for (const ScriptToken& t : tokens) {
    GenerationEvent ev;
    ev.content = t.text;
    TokenLogprob lp{t.token, logprob, t.bytes, {}};
    lp.top = {{t.token, logprob, t.bytes}, {"x", -3.0, {'x'}}};
    ev.logprobs.push_back(lp);
    engine.script.push_back(ev);
    logprob -= 0.25;
  }
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.completion_tokens = static_cast<int64_t>(tokens.size());
  engine.script.push_back(fin);
}

Json post_json(httplib::Client& c, const std::string& path, const Json& body) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res && res->status == 200) << path << " " << (res ? res->body : "");
  return res ? Json::parse(res->body) : Json();
}

// The JSON chunks of a stream (without [DONE]).
std::vector<Json> post_stream(httplib::Client& c, const std::string& path, Json body) {
  body["stream"] = true;
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res && res->status == 200) << path;
  std::vector<Json> out;
  if (!res) return out;
  for (const std::string& p : sse_payloads(res->body)) {
    if (p != "[DONE]") out.push_back(Json::parse(p));
  }
  return out;
}

TEST(ServerLogprobs, ChatStreamCarriesEveryTokenOnceInOrder) {
  TestServer ts;
  script_tokens(ts.engine, tokens_of_hello());
  auto c = ts.client();
  Json body = {{"model", "fake-model"},
               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"logprobs", true},
               {"top_logprobs", 2},
               {"n", 2}};
  Json plain = post_json(c, "/v1/chat/completions", body);
  ASSERT_EQ(plain["choices"].size(), 2u);
  const Json& expected = plain["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(expected.size(), 6u);
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "He\xC3\xA9llo");

  std::vector<Json> streamed(2, Json::array());
  std::vector<std::string> text(2);
  std::vector<bool> finished(2, false);
  for (const Json& chunk : post_stream(c, "/v1/chat/completions", body)) {
    for (const Json& choice : chunk["choices"]) {
      size_t i = choice["index"].get<size_t>();
      EXPECT_FALSE(finished[i]) << "a chunk after the finish chunk: " << chunk.dump();
      if (choice["delta"].contains("content")) text[i] += choice["delta"]["content"].get<std::string>();
      if (!choice["logprobs"].is_null()) {
        for (const Json& entry : choice["logprobs"]["content"]) streamed[i].push_back(entry);
      }
      if (!choice["finish_reason"].is_null()) finished[i] = true;
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(finished[i]);
    EXPECT_EQ(text[i], "He\xC3\xA9llo");
    EXPECT_EQ(streamed[i], plain["choices"][i]["logprobs"]["content"]) << "choice " << i;
  }
}

TEST(ServerLogprobs, CompletionStreamCarriesEveryTokenOnceInOrder) {
  TestServer ts;
  script_tokens(ts.engine, tokens_of_hello());
  auto c = ts.client();
  Json body = {{"model", "fake-model"}, {"prompt", "ab"}, {"logprobs", 2}, {"max_tokens", 10}};
  Json plain = post_json(c, "/v1/completions", body);
  const Json& expected = plain["choices"][0]["logprobs"];
  ASSERT_EQ(expected["tokens"].size(), 6u);

  Json streamed = {{"tokens", Json::array()},
                   {"token_logprobs", Json::array()},
                   {"top_logprobs", Json::array()},
                   {"text_offset", Json::array()}};
  std::string text;
  for (const Json& chunk : post_stream(c, "/v1/completions", body)) {
    for (const Json& choice : chunk["choices"]) {
      text += choice["text"].get<std::string>();
      const Json& lp = choice["logprobs"];
      if (lp.is_null()) continue;
      EXPECT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
      EXPECT_EQ(lp["tokens"].size(), lp["top_logprobs"].size());
      EXPECT_EQ(lp["tokens"].size(), lp["text_offset"].size());
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (const Json& v : lp[key]) streamed[key].push_back(v);
      }
    }
  }
  EXPECT_EQ(text, plain["choices"][0]["text"]);
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    EXPECT_EQ(streamed[key], expected[key]) << key;
}

// The completions text_offset fields of a reply, streamed (joined over the chunks) or not.
Json completion_offsets(httplib::Client& c, const Json& body, bool stream) {
  if (!stream) return post_json(c, "/v1/completions", body)["choices"][0]["logprobs"]["text_offset"];
  Json offsets = Json::array();
  for (const Json& chunk : post_stream(c, "/v1/completions", body)) {
    for (const Json& choice : chunk["choices"]) {
      if (choice["logprobs"].is_null()) continue;
      for (const Json& v : choice["logprobs"]["text_offset"]) offsets.push_back(v);
    }
  }
  return offsets;
}

// vLLM's text_offset: code points (Python str indices) into the returned text, counted on
// across chunks, after the echoed prompt; a token without text of its own adds nothing.
TEST(ServerLogprobs, TextOffsetsAreCodePointsIntoTheReturnedText) {
  TestServer ts;
  script_tokens(ts.engine, tokens_of_hello());
  auto c = ts.client();
  Json body = {{"model", "fake-model"}, {"prompt", "ab"}, {"logprobs", 1}};
  for (bool stream : {false, true}) {
    // "He" | half of é | é | special | "llo" | end: "é" is one code point, two bytes.
    EXPECT_EQ(completion_offsets(c, body, stream), Json({0, 2, 2, 3, 3, 6})) << "stream " << stream;
    Json echoed = body;
    echoed["prompt"] = "\xC3\xA9!";  // "é!": two code points, three bytes
    echoed["echo"] = true;
    EXPECT_EQ(completion_offsets(c, echoed, stream), Json({2, 4, 4, 5, 5, 8})) << "stream " << stream;
  }
}

// Offsets the engine gives (TokenLogprob::text_offset) are used as they are: text held
// back (a possible stop string) does not shift them; a token of a stop string that was cut
// points at the end of the text, streamed or not.
TEST(ServerLogprobs, EngineTextOffsetsSurviveHeldBackText) {
  TestServer ts;
  ts.engine.script.clear();
  // Tokens "Hel" "lo" " wo" "rld" "!!"; "lo" is held back until " wo" comes, and "rld!!" is
  // the stop string that was cut: the answer is "Hello wo".
  const std::vector<std::pair<std::string, std::string>> events = {
      {"Hel", "Hel"}, {"lo", ""}, {" wo", "lo wo"}, {"rld", ""}, {"!!", ""}};
  int64_t offset = 0;
  for (const auto& [token, content] : events) {
    GenerationEvent ev;
    ev.content = content;
    TokenLogprob lp{token, -1.0, {}, {}};
    lp.text_offset = offset;
    offset += static_cast<int64_t>(token.size());
    ev.logprobs.push_back(lp);
    ts.engine.script.push_back(ev);
  }
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.completion_tokens = 5;
  ts.engine.script.push_back(fin);
  auto c = ts.client();
  Json body = {{"model", "fake-model"}, {"prompt", "ab"}, {"logprobs", 0}};
  for (bool stream : {false, true})
    EXPECT_EQ(completion_offsets(c, body, stream), Json({0, 3, 5, 8, 8})) << "stream " << stream;
}

// Echo with logprobs scores the prompt (lm-evaluation-harness): the engine's prompt entries
// come first (the first token's logprob and top null, offsets within the echoed prompt), then
// the reply's; the stream's echo chunk carries the prompt's, and the whole equals the reply.
TEST(ServerLogprobs, EchoedPromptEntriesComeFirstStreamedOrNot) {
  TestServer ts;
  script_tokens(ts.engine, {{"!", "!", {'!'}}});
  GenerationEvent prompt_scored;  // the prompt "ab" as two tokens
  TokenLogprob a{"a", 0.0, {'a'}, {}};
  a.text_offset = 0;
  TokenLogprob b{"b", -1.5, {'b'}, {{"c", -0.5, {'c'}}, {"b", -1.5, {'b'}}}};
  b.text_offset = 1;
  prompt_scored.prompt_logprobs = {a, b};
  ts.engine.script.insert(ts.engine.script.begin(), prompt_scored);
  auto c = ts.client();
  const Json body = {{"model", "fake-model"}, {"prompt", "ab"}, {"logprobs", 1}, {"echo", true}};
  const Json j = post_json(c, "/v1/completions", body);
  EXPECT_EQ(ts.engine.requests.back().prompt_logprobs, 1);
  EXPECT_EQ(j["choices"][0]["text"], "ab!");
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json({"a", "b", "!"}));
  EXPECT_EQ(lp["token_logprobs"], Json({nullptr, -1.5, -0.25}));
  EXPECT_EQ(lp["top_logprobs"][0], nullptr);
  EXPECT_EQ(lp["top_logprobs"][1], Json({{"c", -0.5}, {"b", -1.5}}));
  EXPECT_EQ(lp["text_offset"], Json({0, 1, 2}));
  std::string text;
  Json joined = {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
                 {"text_offset", Json::array()}};
  for (const Json& chunk : post_stream(c, "/v1/completions", body)) {
    for (const Json& choice : chunk["choices"]) {
      text += choice["text"].get<std::string>();
      if (choice["logprobs"].is_null()) continue;
      for (auto& [k, v] : joined.items())
        for (const Json& x : choice["logprobs"][k]) v.push_back(x);
    }
  }
  EXPECT_EQ(text, "ab!");
  EXPECT_EQ(joined, lp);
  // Without echo the prompt is not scored.
  Json plain = body;
  plain.erase("echo");
  (void)post_json(c, "/v1/completions", plain);
  EXPECT_EQ(ts.engine.requests.back().prompt_logprobs, -1);
}

}  // namespace
}  // namespace tf::server::testing
