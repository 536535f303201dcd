// core/base64.h: RFC 4648's test vectors both ways, the URL-safe alphabet, whitespace and
// optional padding on input, and refusals that say what is wrong (and the size limit).
#include "core/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace tf {
namespace {

TEST(Base64, Rfc4648VectorsBothWays) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(encode_base64(plain), coded);
    auto back = decode_base64(coded, 64);
    ASSERT_TRUE(back.has_value()) << coded;
    EXPECT_EQ(*back, plain);
  }
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_EQ(*decode_base64(encode_base64(bytes), 256), bytes);
}

TEST(Base64, LenientInputStrictErrors) {
  EXPECT_EQ(*decode_base64("Zm9v\nYmE", 64), "fooba");               // whitespace, no padding
  EXPECT_EQ(*decode_base64("-_8", 64), *decode_base64("+/8=", 64));  // URL-safe alphabet
  auto bad = decode_base64("Zm9v*", 64, "field");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("field: '*' at offset 4"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(decode_base64("Zm9vY", 64).has_value());    // a lone final character
  EXPECT_FALSE(decode_base64("Zg==Zg", 64).has_value());   // data after padding
  EXPECT_FALSE(decode_base64("Zm9vYmFy", 5).has_value());  // over the limit
}

}  // namespace
}  // namespace tf
