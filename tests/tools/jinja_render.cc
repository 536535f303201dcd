// Test-only driver for the Jinja engine: renders a batch of templates with our engine so that
// tests/tools/jinja_diff.py can compare them with Python's jinja2.
//
//   jinja_render CASES.json
//
// CASES.json is a JSON list of {"template": str, "context": object}; the tool prints a JSON list with
// one {"output": str} or {"error": str} per case, in order. strftime_now sees the same fixed instant
// as tests/tools/render_templates.py (2026-01-15 12:00:00 local time).
#include <iostream>
#include <nlohmann/json.hpp>

#include "jinja_test_util.h"
#include "text/jinja_template.h"

namespace {

using nlohmann::ordered_json;

ordered_json render_case(const ordered_json& test_case) {
  ordered_json result = ordered_json::object();
  auto tmpl = tf::jinja::Template::parse(test_case.at("template").get<std::string>());
  if (!tmpl) {
    result["error"] = tmpl.status().to_string();
    return result;
  }
  tf::jinja::RenderOptions options;
  options.now = tf::jinja_test::fixed_now();
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
  ordered_json cases = ordered_json::parse(tf::jinja_test::read_file(argv[1]));
  ordered_json results = ordered_json::array();
  for (const auto& test_case : cases) results.push_back(render_case(test_case));
  // Invalid UTF-8 in an output is replaced, not fatal: the comparison then simply reports a difference.
  std::cout << results.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  return 0;
}
