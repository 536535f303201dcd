// media/url_fetch.h without a network: which addresses count as public, which URLs
// are taken, and the refusals that need no server (scheme, an address that is not
// public, a host that does not resolve). serve_vision_urls (e2e) fetches over HTTPS.
#include "media/url_fetch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

namespace tf::media {
namespace {

bool is_public(const std::string& text) {
  sockaddr_storage s{};
  if (text.find(':') == std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    EXPECT_EQ(::inet_pton(AF_INET, text.c_str(), &a->sin_addr), 1) << text;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    EXPECT_EQ(::inet_pton(AF_INET6, text.c_str(), &a->sin6_addr), 1) << text;
  }
  return is_public_address(reinterpret_cast<const sockaddr*>(&s));
}

TEST(UrlFetch, PublicAddresses) {
  for (const char* a : {"8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
                        "192.167.1.1", "11.0.0.1", "2001:4860:4860::8888", "2606:4700::1111"}) {
    EXPECT_TRUE(is_public(a)) << a;
  }
  for (const char* a : {"0.0.0.0", "10.1.2.3", "100.64.0.1", "100.127.255.255", "127.0.0.1", "127.9.9.9",
                        "169.254.169.254", "172.16.0.1", "172.31.255.255", "192.168.1.1", "192.0.2.7",
                        "198.51.100.1", "203.0.113.9", "198.18.0.1", "224.0.0.1", "239.1.1.1", "255.255.255.255",
                        "::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "ff02::1", "2001:db8::1", "2002:a00:1::1",
                        "2001:0:4136:e378::1", "::ffff:10.0.0.1", "::ffff:127.0.0.1", "64:ff9b::a00:1"}) {
    EXPECT_FALSE(is_public(a)) << a;
  }
  EXPECT_TRUE(is_public("::ffff:8.8.8.8"));  // an IPv4-mapped address counts as its IPv4
}

TEST(UrlFetch, OnlyHttpsUrls) {
  EXPECT_TRUE(is_https_url("https://example.com/a.png"));
  EXPECT_TRUE(is_https_url("HTTPS://Example.com/a.png"));
  EXPECT_FALSE(is_https_url("https://"));
  EXPECT_FALSE(is_https_url("http://example.com/a.png"));
  EXPECT_FALSE(is_https_url("data:image/png;base64,AAAA"));
  EXPECT_FALSE(is_https_url("file:///etc/passwd"));
  auto http = fetch_media_url("http://example.com/a.png", {});
  ASSERT_FALSE(http.has_value());
  EXPECT_EQ(http.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(http.status().message().find("only https:// URLs are fetched"), std::string::npos);
}

TEST(UrlFetch, AddressesThatAreNotPublicAreNeverConnectedTo) {
  UrlFetchOptions o;
  o.connect_timeout = std::chrono::seconds(5);
  // Refused at connect time, before any byte is sent (no server needs to listen there).
  for (const char* url : {"https://127.0.0.1:9/a.png", "https://169.254.169.254/latest/meta-data",
                          "https://[::1]:9/a.png", "https://localhost:9/a.png"}) {
    auto r = fetch_media_url(url, o);
    ASSERT_FALSE(r.has_value()) << url;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("which is not a public address (VISION_URLS=lan"), std::string::npos)
        << r.status().to_string();
  }
  // With private addresses allowed the connection is tried (nothing listens on port 9).
  o.allow_private = true;
  auto r = fetch_media_url("https://127.0.0.1:9/a.png", o);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message().find("not a public address"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("fetching https://127.0.0.1:9/a.png: "), std::string::npos);
}

TEST(UrlFetch, QueriesAreLeftOutOfMessages) {
  auto r = fetch_media_url("https://no-such-host.invalid/a.png?token=secret", {});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message().find("secret"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("https://no-such-host.invalid/a.png..."), std::string::npos);
}

}  // namespace
}  // namespace tf::media
