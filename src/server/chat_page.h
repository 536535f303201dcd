// GET /: a chat page in the browser, one self-contained HTML file (no external scripts, styles
// or fonts), for trying a server out without a client: it streams /v1/chat/completions, shows
// the reasoning apart from the answer, and offers the reasoning effort, temperature and
// max_tokens. Text is only ever set as text (never parsed as HTML). The page holds no data, so
// it is served without an API key; with API_KEY set it asks for one and sends it as a bearer
// token (kept in the tab's sessionStorage only).
#pragma once

#include <string_view>

namespace tf::server {

std::string_view chat_page_html();

}  // namespace tf::server
