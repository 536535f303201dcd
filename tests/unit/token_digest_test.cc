// TokenDigest: the SHA-256 of token ids as little-endian int32s (what a client recomputes
// from return_token_ids), checked against Python's hashlib.
#include "engine/token_digest.h"

#include <gtest/gtest.h>

namespace tf::engine {
namespace {

TEST(TokenDigest, MatchesSha256OfTheIdsAsLittleEndianInt32s) {
  TokenDigest d;
  // hashlib.sha256(b'').hexdigest()
  EXPECT_EQ(d.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  d.add(1);
  d.add(154820);
  d.add(-1);
  // hashlib.sha256(struct.pack('<3i', 1, 154820, -1)).hexdigest()
  EXPECT_EQ(d.hex(), "461b78e5cdffc569d27b0cac51db474ea7c2ff23c7359bde60f44f8d3da3478c");
  EXPECT_EQ(d.hex(), d.hex()) << "reading the digest leaves the running state alone";
  TokenDigest moved = std::move(d);
  EXPECT_EQ(moved.hex(), "461b78e5cdffc569d27b0cac51db474ea7c2ff23c7359bde60f44f8d3da3478c");
}

}  // namespace
}  // namespace tf::engine
