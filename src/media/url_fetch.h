// Media from https:// URLs (VISION_URLS, system.md: "lets the server fetch public
// HTTPS media URLs; by default only data URLs"). libcurl does the transfer;
// this file decides what may be fetched:
// - https only, redirects included (at most max_redirects), no proxy;
// - every address a connection is about to be made to is checked at connect
//   time (so DNS answers that change between a check and the connection cannot
//   reach inside): only public addresses, unless allow_private (VISION_URLS=lan);
// - at most max_bytes, refused as soon as a Content-Length or the body passes it;
// - bounded time (connect_timeout, timeout), an HTTP status >= 400 is an error.
// Errors are kInvalidArgument (a 400 for the request) naming the URL and why.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "core/status.h"

namespace tf::media {

struct UrlFetchOptions {
  bool allow_private = false;  // also loopback, private, link-local, CGNAT addresses
  std::string ca_file;         // trust these certificates instead of the system's (VISION_URLS_CA)
  size_t max_bytes = size_t{10} << 20;
  int max_redirects = 3;
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds timeout{60};
};

struct FetchedMedia {
  std::string bytes;
  std::string content_type;  // as the server sent it ("image/png"), possibly empty
};

Expected<FetchedMedia> fetch_media_url(const std::string& url, const UrlFetchOptions& options);

// True for addresses on the public internet: not loopback, private (10/8,
// 172.16/12, 192.168/16, fc00::/7), link-local, CGNAT (100.64/10), unspecified,
// multicast, reserved or documentation ranges; IPv4-mapped IPv6 as its IPv4.
bool is_public_address(const sockaddr* address);

// "https://host/..." (case-insensitive scheme): a URL fetch_media_url takes.
bool is_https_url(const std::string& url);

}  // namespace tf::media
