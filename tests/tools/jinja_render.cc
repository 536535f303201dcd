// Test-only driver for the Jinja engine: renders a batch of templates with our engine so that
// tests/tools/jinja_diff.py can compare them with Python's jinja2.
//
//   jinja_render CASES.json
//
// CASES.json is a JSON list of {"template": str, "context": object}; the tool prints a JSON list with
// one {"output": str} or {"error": str} per case, in order. strftime_now sees the same fixed instant
// as tests/tools/render_templates.py (2026-01-15 12:00:00 local time).
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/jinja_template.h"

namespace {

using nlohmann::ordered_json;

std::time_t fixed_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

ordered_json render_case(const ordered_json& test_case) {
  ordered_json result = ordered_json::object();
  auto tmpl = tf::jinja::Template::parse(test_case.at("template").get<std::string>());
  if (!tmpl) {
    result["error"] = tmpl.status().to_string();
    return result;
  }
  tf::jinja::RenderOptions options;
  options.now = fixed_now();
  auto rendered = tmpl->render(test_case.value("context", ordered_json::object()), options);
  if (rendered)
    result["output"] = *rendered;
  else
    result["error"] = rendered.status().to_string();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: jinja_render CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  ordered_json cases = ordered_json::parse(text.str());
  ordered_json results = ordered_json::array();
  for (const auto& test_case : cases) results.push_back(render_case(test_case));
  // Invalid UTF-8 in an output is replaced, not fatal: the comparison then simply reports a difference.
  std::cout << results.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  return 0;
}
