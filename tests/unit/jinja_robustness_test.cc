// Templates can arrive with a request (vLLM's `chat_template` field), so the engine must turn any
// input into a result or a Status: never crash, hang or recurse without bound. These tests mutate
// the real chat templates at random and feed hostile constructs; run them under TF_SANITIZE=ON too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "cpu_clock.h"
#include "jinja_test_util.h"
#include "text/jinja_template.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

using tf::jinja_test::kDataDir;
using tf::jinja_test::read_file;

ordered_json sample_context() {
  ordered_json conversations = ordered_json::parse(read_file(kDataDir + "/conversations.json"));
  ordered_json ctx = ordered_json::object();
  for (const auto& c : conversations) {
    if (c["name"] != "tool_call_complex_args") continue;
    ctx["messages"] = c["messages"];
    ctx["tools"] = c["tools"];
  }
  ctx["add_generation_prompt"] = true;
  ctx["bos_token"] = "<s>";
  ctx["eos_token"] = "</s>";
  return ctx;
}

TEST(JinjaRobustness, MutatedTemplatesNeverCrash) {
  const ordered_json ctx = sample_context();
  const std::string alphabet = "{}%#-+()[]'\".|~:,=<>*/ \n\tabcxyz019_";
  std::mt19937 rng(2026);
  int parsed = 0, rendered = 0, total = 0;
  for (const auto& e : fs::directory_iterator(kDataDir)) {
    if (e.path().extension() != ".jinja") continue;
    const std::string source = read_file(e.path().string());
    for (int round = 0; round < 150; ++round) {
      std::string s = source;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        size_t pos = rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s.erase(pos, 1 + rng() % 8);
            break;
          case 1:
            s.insert(pos, 1, alphabet[rng() % alphabet.size()]);
            break;
          case 2:
            s[pos] = alphabet[rng() % alphabet.size()];
            break;
          default:
            s = s.substr(0, pos);
            break;  // truncation
        }
      }
      ++total;
      auto t = tf::jinja::Template::parse(s);
      if (!t.has_value()) {
        EXPECT_FALSE(t.status().message().empty());
        continue;
      }
      ++parsed;
      auto r = t->render(ctx);
      if (r.has_value()) ++rendered;
    }
  }
  EXPECT_GT(total, 1000);
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rendered, 0);
}

TEST(JinjaRobustness, HostileConstructsFailCleanly) {
  const std::vector<std::string> hostile = {
      "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
      "{{ " + std::string(3000, '[') + " }}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{{ range(1000000)|list }}",
      "{{ 'x' * 100000000000 }}",
      "{{ 2 ** 1000 }}",
      "{{ 9223372036854775807 + 1 }}",
      "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}",
      "{{ 99999999999999999999999 + 1 }}",  // arithmetic beyond 64 bits (printing it is exact)
      "{{ 'abc'[::0] }}",
      "{% for x in y %}",
      "{{ '\\xZZ' }}",
      "{#",
      "{{ 1 }",
      // Integer edges that trap or overflow in C++ (Python's integers are unbounded).
      "{{ (-9223372036854775807 - 1) // -1 }}",
      "{{ (-9223372036854775807 - 1)|abs + 1 }}",  // |abs itself is exact: 9223372036854775808
      "{{ 1.5e300|int }}",  // a double outside int64 (casting it is undefined behaviour)
      "{{ '1e300'|int }}",
      "{{ '%d' % -1e19 }}",
      // Sizes chosen by the template: each would build a value of gigabytes (or loop as long).
      "{{ 'a'|center(10000000000) }}",
      "{{ 'x\\ny'|indent(10000000000) }}",
      "{{ '%10000000000s' % 'a' }}",
      "{{ '%99999999999999999999s' % 'a' }}",
      "{{ '{:10000000000}'.format('a') }}",
      "{{ '{:.99999999999999999999}'.format('a') }}",
      "{{ [1]|batch(10000000000, 0)|list }}",
      "{{ [1, 2]|slice(10000000000)|list }}",
      "{{ [1]|tojson(indent=10000000000) }}",
      "{{ 'a\\tb'.expandtabs(10000000000) }}",
  };
  for (const std::string& s : hostile) {
    SCOPED_TRACE(s.substr(0, 80));
    auto t = tf::jinja::Template::parse(s);
    if (!t.has_value()) continue;
    auto r = t->render(ordered_json::object());
    EXPECT_FALSE(r.has_value()) << "expected an error, rendered " << r->substr(0, 80);
  }
  // Deeply nested statements.
  std::string nested;
  for (int i = 0; i < 3000; ++i) nested += "{% if true %}";
  EXPECT_FALSE(tf::jinja::Template::parse(nested).has_value());
}

// The template is the server's, but its loops run over the request's data: work and output
// are bounded (RenderOptions), so quadratic loops over a long list fail instead of holding a
// server thread for minutes, and a loop cannot multiply a large value into gigabytes.
TEST(JinjaRobustness, LoopsOverLargeDataAreBounded) {
  ordered_json ctx = {{"xs", ordered_json::array()}, {"big", std::string(1 << 20, 'b')}};
  for (int i = 0; i < 5000; ++i) ctx["xs"].push_back(i);
  auto quadratic =
      tf::jinja::Template::parse("{% for a in xs %}{% for b in xs %}{{ '' }}{% endfor %}{% endfor %}");
  ASSERT_TRUE(quadratic.has_value());
  auto r = quadratic->render(ctx);
  ASSERT_FALSE(r.has_value()) << "rendered " << r->size() << " bytes";
  EXPECT_NE(r.status().message().find("too much work"), std::string::npos) << r.status().message();

  auto multiplied = tf::jinja::Template::parse("{% for a in xs[:300] %}{{ big }}{% endfor %}");
  ASSERT_TRUE(multiplied.has_value());
  auto m = multiplied->render(ctx);
  ASSERT_FALSE(m.has_value()) << "rendered " << m->size() << " bytes";
  EXPECT_NE(m.status().message().find("MemoryError"), std::string::npos) << m.status().message();

  // Linear loops over the same data are fine.
  auto linear = tf::jinja::Template::parse("{% for a in xs %}{{ a }}{% endfor %}{{ big|length }}");
  ASSERT_TRUE(linear.has_value());
  EXPECT_TRUE(linear->render(ctx).has_value());
}

// GLM-5.3's template checks each tool result of a block against every other: 1,000 parallel
// tool calls (a 140 KB request) took ~10 s of a server thread, 10,000 would take many minutes.
TEST(JinjaRobustness, QuadraticChatTemplateOverManyToolResultsFails) {
  auto glm = tf::jinja::Template::parse(
      read_file(std::string(TF_SOURCE_DIR) + "/tests/data/glm53/chat_template.jinja"));
  ASSERT_TRUE(glm.has_value()) << glm.status().message();
  const auto context = [](int n) {
    ordered_json calls = ordered_json::array(), messages = ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", "hi"}});
    for (int i = 0; i < n; ++i)
      calls.push_back({{"id", "c" + std::to_string(i)},
                       {"type", "function"},
                       {"function", {{"name", "f"}, {"arguments", ordered_json::object()}}}});
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
    for (int i = 0; i < n; ++i)
      messages.push_back({{"role", "tool"}, {"tool_call_id", "c" + std::to_string(i)}, {"content", "ok"}});
    return ordered_json{{"messages", messages}, {"add_generation_prompt", true}};
  };
  EXPECT_TRUE(glm->render(context(20)).has_value());
  const double start = tf::test::cpu_seconds(CLOCK_THREAD_CPUTIME_ID);  // the render runs on this thread
  auto r = glm->render(context(1000));
  const double cpu_s = tf::test::cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("rendering takes too much work"), std::string::npos)
      << r.status().message();
  // The step budget (kMaxRenderSteps) is ~1.5 s of CPU; 10 times that budget would take ~15 s.
  EXPECT_LT(cpu_s, 10.0);
}

TEST(JinjaRobustness, ErrorsCarryLineAndColumn) {
  auto t = tf::jinja::Template::parse("a\nb\n  {{ x.y }}", {.name = "t.jinja"});
  ASSERT_TRUE(t.has_value());
  auto r = t->render(ordered_json::object());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), tf::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("t.jinja:3:"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'x' is undefined"), std::string::npos) << r.status().message();

  auto syntax = tf::jinja::Template::parse("{% for %}", {.name = "s.jinja"});
  ASSERT_FALSE(syntax.has_value());
  EXPECT_NE(syntax.status().message().find("s.jinja:1:"), std::string::npos) << syntax.status().message();

  auto not_object = t->render(ordered_json::array());
  EXPECT_FALSE(not_object.has_value());
}

}  // namespace
