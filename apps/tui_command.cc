// `tensorfold tui`: a live terminal view of a running server's /health (the /dashboard
// page's figures, for a terminal over SSH), redrawn every --interval seconds.
//
//   tensorfold tui [--url http://127.0.0.1:8888] [--interval 1] [--api-key KEY] [--once]
//
// --once prints one view (two snapshots --interval apart, so the rates are there) and
// exits: 0, or 1 when the server could not be read. Without it the view is redrawn until
// Ctrl-C; a server that stops answering is reported on the screen and tried again.
#include <httplib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "apps/client_api_key.h"
#include "apps/commands.h"
#include "bench/health_view.h"
#include "bench/http_load_generator.h"

namespace tf::apps {
namespace {

using Json = nlohmann::json;

struct TuiOptions {
  std::string url = "http://127.0.0.1:8888";
  std::string api_key;
  double interval_s = 1.0;
  bool once = false;
};

int terminal_width() {
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 100;
}

// One /health snapshot, or why there is none.
Expected<Json> read_health(httplib::Client& client, const bench::HttpTarget& target, const std::string& key) {
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto res = client.Get((target.prefix + "/health").c_str(), headers);
  if (!res) return unavailable(target.base + ": " + httplib::to_string(res.error()));
  if (res->status == 401)
    return invalid_argument(target.base + ": /health needs the API key (--api-key or API_KEY)");
  if (res->status != 200 && res->status != 503)
    return unavailable(target.base + "/health: HTTP " + std::to_string(res->status));
  Json j = Json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return unavailable(target.base + "/health: not a JSON object");
  return j;
}

int run_tui(const TuiOptions& o) {
  auto target = bench::parse_bench_url(o.url);
  if (!target) {
    std::cerr << "tensorfold tui: " << target.status().message() << "\n";
    return 2;
  }
  const std::string key = client_api_key(o.api_key);
  httplib::Client client(target->base);
  client.set_connection_timeout(3, 0);
  client.set_read_timeout(5, 0);
  const auto interval = std::chrono::duration<double>(o.interval_s);
  const bool tty = isatty(STDOUT_FILENO);
  std::optional<Json> before;
  auto taken = std::chrono::steady_clock::now();
  for (int frame = 0;; ++frame) {
    Expected<Json> h = read_health(client, *target, key);
    const auto now = std::chrono::steady_clock::now();
    if (!h) {
      if (o.once || h.status().code() == StatusCode::kInvalidArgument) {
        std::cerr << "tensorfold tui: " << h.status().message() << "\n";
        return 1;
      }
      std::cout << (tty ? "\x1b[H\x1b[J" : "") << "tensorfold tui: " << h.status().message()
                << " (trying again)\n"
                << std::flush;
      before.reset();
    } else {
      const double seconds = std::chrono::duration<double>(now - taken).count();
      const bench::HealthView view = bench::summarize_health(before ? &*before : nullptr, *h, seconds);
      if (!o.once || before) {
        std::cout << (tty && !o.once ? "\x1b[H\x1b[J" : "")
                  << bench::render_health_view(view, terminal_width());
        if (!tty && !o.once) std::cout << "\n";
        std::cout << std::flush;
        if (o.once) return 0;
      }
      before = std::move(*h);
      taken = now;
    }
    std::this_thread::sleep_for(interval);
  }
}

}  // namespace

void add_tui_command(CLI::App& app) {
  auto o = std::make_shared<TuiOptions>();
  CLI::App* cmd = app.add_subcommand("tui", "live terminal view of a running server's /health");
  cmd->add_option("--url", o->url, "the server")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "its API key (default: the first of API_KEY)");
  cmd->add_option("--interval", o->interval_s, "seconds between redraws")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  cmd->add_flag("--once", o->once, "print one view (after one interval, for the rates) and exit");
  cmd->callback([o] { std::exit(run_tui(*o)); });
}

}  // namespace tf::apps
