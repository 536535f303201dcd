// Serves the scripted FakeEngine (tests/unit/server_fake_engine.h) over the real
// HttpServer, for end-to-end tests of the HTTP layer (promtool, the openai npm client)
// before the real engine exists. Usage: fake_server [PORT] (0 = any free port).
// Prints "PORT <n>" on stdout once listening; runs until killed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/http_server.h"
#include "server_fake_engine.h"

int main(int argc, char** argv) {
  tf::server::testing::FakeEngine engine;
  engine.set_text_script("The user greets me.", "Hello world", tf::server::FinishReason::kStop);
  // With tools: some text, then get_weather({"city": "Paris"}) streamed in fragments.
  {
    using tf::server::GenerationEvent;
    GenerationEvent text, head, a1, a2, fin;
    text.content = "Let me check.";
    head.tool_calls.push_back({0, "call_fake_1", "get_weather", ""});
    a1.tool_calls.push_back({0, "", "", "{\"city\": \"Pa"});
    a2.tool_calls.push_back({0, "", "", "ris\", \"days\": 3}"});
    fin.kind = GenerationEvent::Kind::kFinish;
    fin.finish_reason = tf::server::FinishReason::kToolCalls;
    fin.completion_tokens = 12;
    engine.tool_script = {text, head, a1, a2, fin};
  }
  tf::server::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = argc > 1 ? std::atoi(argv[1]) : 0;
  tf::server::HttpServer server(engine, options);
  tf::Status s = server.bind();
  if (!s.is_ok()) {
    std::fprintf(stderr, "fake_server: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("PORT %d\n", server.port());
  std::fflush(stdout);
  s = server.listen();
  if (!s.is_ok()) {
    std::fprintf(stderr, "fake_server: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
