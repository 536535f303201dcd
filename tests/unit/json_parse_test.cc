// text::parse_json (src/text/json_parse.h): nlohmann's values and errors, in linear time,
// with nesting bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "text/json_parse.h"

namespace tf::text {
namespace {

TEST(JsonParse, SameValueAsNlohmann) {
  const std::string text =
      R"({"b":1,"a":[true,null,-2,3.5,18446744073709551615,"x\u00e9"],"c":{"z":{},"y":[]},"":"e"})";
  auto parsed = parse_json(text);
  ASSERT_TRUE(parsed) << parsed.status().to_string();
  EXPECT_EQ(*parsed, nlohmann::ordered_json::parse(text));
  EXPECT_EQ(parsed->dump(), nlohmann::ordered_json::parse(text).dump());  // key order kept
  EXPECT_EQ(*parse_json("7"), 7);
  EXPECT_EQ(*parse_json(" \"s\" "), "s");
}

TEST(JsonParse, RepeatedKeyKeepsFirstPlaceAndLastValue) {
  auto parsed = parse_json(R"({"a":1,"b":2,"a":{"x":3}})");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->dump(), nlohmann::ordered_json::parse(R"({"a":1,"b":2,"a":{"x":3}})").dump());
  EXPECT_EQ(parsed->dump(), R"({"a":{"x":3},"b":2})");
}

TEST(JsonParse, InvalidJsonIsAnError) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "nul", "\"\\ud800\"", "1 2", "{\"a\":1}}"}) {
    auto parsed = parse_json(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(JsonParse, NestingIsBounded) {
  auto deep = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_TRUE(parse_json(deep(kMaxJsonDepth)));
  auto parsed = parse_json(deep(kMaxJsonDepth + 1));
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.status().message().find("deeper than 256"), std::string::npos);
  // A depth that used to overflow the stack once the value was copied or rendered.
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  EXPECT_FALSE(parse_json(objects));
  EXPECT_TRUE(parse_json("[[1]]", 2));
  EXPECT_FALSE(parse_json("[[[1]]]", 2));
}

// nlohmann's ordered_json parse scans for repeated keys on every insert: 200k members took
// a minute. Here they take well under a second.
TEST(JsonParse, ManyMembersInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const auto t0 = std::chrono::steady_clock::now();
  auto parsed = parse_json(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->size(), 200000u);
  EXPECT_EQ(parsed->begin().key(), "0");
  EXPECT_EQ((*parsed)["199999"], 199999);
  EXPECT_LT(s, 5.0);
}

}  // namespace
}  // namespace tf::text
