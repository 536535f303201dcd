#include "core/status.h"

#include <gtest/gtest.h>

namespace tf {
namespace {

Expected<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("field 'n': must be positive, got " + std::to_string(x));
  return x;
}

Status use(int x, int* out) {
  TF_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = v * 2;
  return Status::ok();
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = not_found("model.safetensors: no tensor 'lm_head.weight'");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: model.safetensors: no tensor 'lm_head.weight'");
  EXPECT_EQ(s.with_context("loading").message(), "loading: model.safetensors: no tensor 'lm_head.weight'");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Expected, ValueOrError) {
  int out = 0;
  EXPECT_TRUE(use(4, &out).is_ok());
  EXPECT_EQ(out, 8);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("field 'n'"), std::string::npos);
  auto e = parse_positive(3);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, 3);
  EXPECT_TRUE(e.status().is_ok());
}

TEST(StatusError, WrapsStatus) {
  try {
    throw StatusError(out_of_range("index 9 of 3"));
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
    EXPECT_STREQ(e.what(), "OutOfRange: index 9 of 3");
  }
}

}  // namespace
}  // namespace tf
