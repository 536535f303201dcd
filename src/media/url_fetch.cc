// fetch_media_url (see url_fetch.h).
#include "media/url_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace tf::media {
namespace {

bool in_v4(uint32_t a, uint32_t net, int bits) {
  const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  return (a & mask) == (net & mask);
}

bool public_v4(uint32_t a) {
  static const struct {
    uint32_t net;
    int bits;
  } kBlocked[] = {
      {0x00000000, 8},   // "this network"
      {0x0A000000, 8},   // private
      {0x64400000, 10},  // CGNAT
      {0x7F000000, 8},   // loopback
      {0xA9FE0000, 16},  // link-local
      {0xAC100000, 12},  // private
      {0xC0000000, 24},  // IETF protocol assignments
      {0xC0000200, 24},  // TEST-NET-1
      {0xC0586300, 24},  // 6to4 relay anycast
      {0xC0A80000, 16},  // private
      {0xC6120000, 15},  // benchmarking
      {0xC6336400, 24},  // TEST-NET-2
      {0xCB007100, 24},  // TEST-NET-3
      {0xE0000000, 4},   // multicast
      {0xF0000000, 4},   // reserved, broadcast
  };
  for (const auto& b : kBlocked) {
    if (in_v4(a, b.net, b.bits)) return false;
  }
  return true;
}

struct Transfer {
  const UrlFetchOptions* options = nullptr;
  std::string body;
  bool too_large = false;
  std::string refused;  // why a connection was not made
};

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  if (t->body.size() + n > t->options->max_bytes) {
    t->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  t->body.append(data, n);
  return n;
}

// Every connection, the first and each redirect's: checked on the address it is made to.
curl_socket_t on_open_socket(void* user, curlsocktype purpose, curl_sockaddr* address) {
  auto* t = static_cast<Transfer*>(user);
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
  const sockaddr* sa = &address->addr;
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) {
    t->refused = "not an IP address";
    return CURL_SOCKET_BAD;
  }
  if (!t->options->allow_private && !is_public_address(sa)) {
    char text[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof text);
    }
    t->refused = std::string("it resolves to ") + text +
                 ", which is not a public address (VISION_URLS=lan also fetches from private networks)";
    return CURL_SOCKET_BAD;
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The URL for messages: its scheme, host and path, at most 200 characters.
std::string shown(const std::string& url) {
  std::string s = url.substr(0, std::min<size_t>(url.find_first_of("?#"), 200));
  return s.size() < url.size() ? s + "..." : s;
}

}  // namespace

bool is_public_address(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return public_v4(ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr));
  }
  if (address->sa_family != AF_INET6) return false;
  const uint8_t* b = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr.s6_addr;
  static const uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(b, kMappedPrefix, 12) == 0) {
    return public_v4(uint32_t{b[12]} << 24 | uint32_t{b[13]} << 16 | uint32_t{b[14]} << 8 | b[15]);
  }
  // Only global unicast (2000::/3) is public; within it, documentation (2001:db8::/32),
  // 6to4 (2002::/16, it embeds an IPv4 address) and Teredo (2001::/32) are not taken.
  if ((b[0] & 0xe0) != 0x20) return false;
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) return false;
  if (b[0] == 0x20 && b[1] == 0x02) return false;
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00) return false;
  return true;
}

bool is_https_url(const std::string& url) {
  static const char kScheme[] = "https://";
  if (url.size() <= sizeof(kScheme) - 1) return false;
  for (size_t i = 0; i + 1 < sizeof kScheme; ++i) {
    if (std::tolower(static_cast<unsigned char>(url[i])) != kScheme[i]) return false;
  }
  return true;
}

Expected<FetchedMedia> fetch_media_url(const std::string& url, const UrlFetchOptions& options) {
  const std::string where = "fetching " + shown(url);
  if (!is_https_url(url)) return invalid_argument(where + ": only https:// URLs are fetched");
  init_curl_once();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return internal_error(where + ": curl_easy_init failed");
  Transfer t;
  t.options = &options;
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, static_cast<long>(options.max_redirects));
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");  // a proxy would be the address checked, not the media's
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, static_cast<long>(options.connect_timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, static_cast<long>(options.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(options.max_bytes));
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "tensorfold");
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &t);
  if (!options.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str());
  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  char* type = nullptr;
  curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
  FetchedMedia out;
  if (type != nullptr) out.content_type = type;
  curl_easy_cleanup(curl);

  const std::string limit = std::to_string(options.max_bytes) + " bytes";
  if (!t.refused.empty()) return invalid_argument(where + ": refused: " + t.refused);
  if (t.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
    return invalid_argument(where + ": the media is larger than the " + limit + " allowed");
  }
  if (rc == CURLE_TOO_MANY_REDIRECTS) {
    return invalid_argument(where + ": more than " + std::to_string(options.max_redirects) + " redirects");
  }
  if (rc == CURLE_UNSUPPORTED_PROTOCOL) {
    return invalid_argument(where + ": a redirect to a URL that is not https:// is not followed");
  }
  if (rc != CURLE_OK) {
    return invalid_argument(where + ": " + (error[0] != '\0' ? std::string(error) : curl_easy_strerror(rc)));
  }
  if (status >= 400) return invalid_argument(where + ": the server answered HTTP " + std::to_string(status));
  if (t.body.empty()) return invalid_argument(where + ": the server sent no data");
  out.bytes = std::move(t.body);
  return out;
}

}  // namespace tf::media
