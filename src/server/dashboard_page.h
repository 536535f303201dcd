// GET /dashboard: one self-contained HTML page (no external scripts, styles or fonts) that
// polls /health once a second and shows what the server is doing: decode and prefill
// tokens per second, requests running and waiting, streams, the cache pool's use, prompt
// reuse, speculative decoding's acceptance, device memory. The page itself holds no data,
// so it is served without an API key; with API_KEY set it asks for one and sends it to
// /health as a bearer token (kept in the tab's sessionStorage only).
#pragma once

#include <string_view>

namespace tf::server {

std::string_view dashboard_html();

}  // namespace tf::server
