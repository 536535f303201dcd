// Helpers for the HTTP server tests: a server on a free port over a FakeEngine,
// SSE parsing and a checker of the Prometheus text exposition format.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "server/http_server.h"
#include "server_fake_engine.h"

namespace tf::server::testing {

using Json = nlohmann::json;

struct TestServer {
  FakeEngine engine;
  std::unique_ptr<HttpServer> server;
  explicit TestServer(ServerOptions opts = {}) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    server = std::make_unique<HttpServer>(engine, opts);
    Status s = server->start_background();
    if (!s.is_ok()) throw std::runtime_error(s.to_string());
  }
  ~TestServer() { server->stop(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->port());
    c.set_read_timeout(20, 0);
    return c;
  }
};

// The payloads of `data:` lines, in order ("[DONE]" included as a string).
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  return out;
}

// Returns "" when `text` is a valid exposition (the subset we emit), else the problem.
inline std::string check_exposition(const std::string& text) {
  std::map<std::string, std::string> types;
  std::map<std::string, bool> helped;
  struct Hist { double last_le = -1e300; double last_count = -1; bool inf = false; double inf_count = -1; bool sum = false, count = false; double count_v = -1; };
  std::map<std::string, Hist> hists;  // key: family + labels without le
  std::istringstream in(text);
  std::string line;
  int n = 0;
  if (text.empty() || text.back() != '\n') return "exposition must end with a newline";
  while (std::getline(in, line)) {
    ++n;
    std::string where = "line " + std::to_string(n) + ": ";
    if (line.empty()) return where + "empty line";
    if (line.rfind("# HELP ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      if (helped[name]) return where + "duplicate HELP for " + name;
      helped[name] = true;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream ls(line.substr(7));
      std::string name, type;
      ls >> name >> type;
      if (types.count(name)) return where + "duplicate TYPE for " + name;
      if (type != "counter" && type != "gauge" && type != "histogram") return where + "bad type " + type;
      types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    size_t brace = line.find('{');
    size_t space = line.rfind(' ');
    if (space == std::string::npos) return where + "no value";
    std::string name = line.substr(0, std::min(brace, space));
    std::string labels = brace != std::string::npos && brace < space ? line.substr(brace, line.rfind('}') - brace + 1) : "";
    for (char c : name)
      if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) return where + "bad metric name " + name;
    double value;
    try {
      value = std::stod(line.substr(space + 1));
    } catch (...) {
      return where + "bad value";
    }
    std::string family = name;
    std::string suffix;
    for (const char* s : {"_bucket", "_sum", "_count"}) {
      std::string sx = s;
      if (name.size() > sx.size() && name.compare(name.size() - sx.size(), sx.size(), sx) == 0 &&
          types.count(name.substr(0, name.size() - sx.size())) &&
          types[name.substr(0, name.size() - sx.size())] == "histogram") {
        family = name.substr(0, name.size() - sx.size());
        suffix = sx;
      }
    }
    if (!types.count(family)) return where + "sample before its TYPE: " + name;
    if (!helped[family]) return where + "no HELP for " + family;
    if (types[family] == "counter" && name.size() >= 6 && name.substr(name.size() - 6) != "_total")
      return where + "counter without _total: " + name;
    if (types[family] == "histogram") {
      if (suffix.empty()) return where + "histogram sample without suffix: " + name;
      std::string key_labels = labels;
      size_t le = key_labels.find("le=\"");
      std::string le_value;
      if (le != std::string::npos) {
        size_t end = key_labels.find('"', le + 4);
        le_value = key_labels.substr(le + 4, end - le - 4);
        key_labels.erase(le, end - le + 1);
        for (std::string junk : {",}", "{,"})
          for (size_t p; (p = key_labels.find(junk)) != std::string::npos;) key_labels.replace(p, 2, junk == ",}" ? "}" : "{");
        if (key_labels == "{}") key_labels = "";
      }
      Hist& h = hists[family + key_labels];
      if (suffix == "_bucket") {
        if (le_value.empty()) return where + "bucket without le";
        if (h.inf) return where + "bucket after +Inf";
        if (value < h.last_count) return where + "buckets not cumulative";
        h.last_count = value;
        if (le_value == "+Inf") {
          h.inf = true;
          h.inf_count = value;
        } else {
          double b = std::stod(le_value);
          if (b <= h.last_le) return where + "le not increasing";
          h.last_le = b;
        }
      } else if (suffix == "_sum") {
        h.sum = true;
      } else {
        h.count = true;
        h.count_v = value;
      }
    }
  }
  for (const auto& [key, h] : hists) {
    if (!h.inf) return key + ": no +Inf bucket";
    if (!h.sum || !h.count) return key + ": missing _sum or _count";
    if (h.count_v != h.inf_count) return key + ": _count differs from the +Inf bucket";
  }
  return "";
}

// A raw TCP connection to a test server on loopback (for what httplib's client cannot send),
// its reads timing out after `timeout_s`; -1 when it could not connect.
inline int connect_loopback(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `s` as far as the peer takes it (it may stop reading and close): the bytes sent.
inline size_t send_some(int fd, const std::string& s) {
  size_t sent = 0;
  while (sent < s.size()) {
    const ssize_t n = ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  return sent;
}

// Whether `ready()` holds within ~5 s, asked every 10 ms (server state that other threads change).
template <typename Ready>
bool eventually(Ready&& ready) {
  return test::eventually(ready, std::chrono::seconds(5), std::chrono::milliseconds(10));
}

}  // namespace tf::server::testing
