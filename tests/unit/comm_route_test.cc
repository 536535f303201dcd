// route_address (src/comm/route_address.h): the local address toward a peer is
// the one the kernel's routing picks, and the interface holding it is found.
#include "comm/route_address.h"

#include <gtest/gtest.h>

namespace tf {
namespace {

TEST(RouteAddress, LoopbackPeersAreReachedFromLoopback) {
  auto v4 = local_address_toward("127.0.0.1");
  ASSERT_TRUE(v4.has_value()) << v4.status().to_string();
  EXPECT_EQ(*v4, "127.0.0.1");
  auto named = local_address_toward("localhost");
  ASSERT_TRUE(named.has_value()) << named.status().to_string();
  EXPECT_TRUE(is_loopback_address(*named)) << *named;
  // Any 127/8 peer is reached from a loopback address too.
  auto other = local_address_toward("127.3.2.1");
  ASSERT_TRUE(other.has_value());
  EXPECT_TRUE(is_loopback_address(*other)) << *other;
}

TEST(RouteAddress, TheInterfaceOfAnAddress) {
  auto lo = interface_with_address("127.0.0.1");
  ASSERT_TRUE(lo.has_value()) << lo.status().to_string();
  EXPECT_EQ(*lo, "lo");
  auto none = interface_with_address("192.0.2.254");  // TEST-NET-1: on no interface of a test machine
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("192.0.2.254"), std::string::npos);
}

TEST(RouteAddress, UnresolvablePeersAreNamed) {
  auto bad = local_address_toward("no-such-host.invalid");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(RouteAddress, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.255.0.9"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("localhost"));
  EXPECT_FALSE(is_loopback_address("192.0.2.1"));
  EXPECT_FALSE(is_loopback_address("128.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fe80::1"));
}

}  // namespace
}  // namespace tf
