// What a live check found: a verdict per item, the figures behind it, and the report.
//
// Design: a check is a list of items, each a claim about the server that held or did not
// ("a repeated prompt resumes: cached 2,816 of 2,824 tokens"). Items marked `info` are
// figures shown without a verdict (how many requests waited). A check passes when it ran
// to the end and every judged item holds; one that could not run (the server went away)
// carries the reason in `error`. `data` keeps the raw figures for the JSON report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf::check {

struct CheckItem {
  std::string what;  // the claim, e.g. "a repeated prompt resumes"
  bool ok = false;
  std::string detail;  // the figures that decided it
  bool info = false;   // shown, not judged
};

struct CheckResult {
  std::string name;
  std::vector<CheckItem> items;
  std::string error;  // why the check could not run to the end ("" when it did)
  double seconds = 0.0;
  nlohmann::json data = nlohmann::json::object();

  void expect(std::string what, bool ok, std::string detail) {
    items.push_back({std::move(what), ok, std::move(detail), false});
  }
  void note(std::string what, std::string detail) {
    items.push_back({std::move(what), true, std::move(detail), true});
  }
  bool passed() const;
};

// One check's lines: a header (PASS / FAIL / ERROR, seconds), then its items.
std::string render_check(const CheckResult& result);
// The aligned text report: a header line per check (PASS / FAIL / ERROR, seconds), its items.
std::string render_check_report(const std::vector<CheckResult>& results);
// {"url", "model", "passed", "checks": [{name, passed, seconds, error, items: [...], data}]}.
nlohmann::json check_report_json(const std::vector<CheckResult>& results, const std::string& url,
                                 const std::string& model);

}  // namespace tf::check
