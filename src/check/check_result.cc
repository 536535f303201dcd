#include "check/check_result.h"

#include <cstdio>

namespace tf::check {

bool CheckResult::passed() const {
  if (!error.empty()) return false;
  for (const CheckItem& item : items)
    if (!item.info && !item.ok) return false;
  return true;
}

std::string render_check(const CheckResult& r) {
  const char* verdict = !r.error.empty() ? "ERROR" : r.passed() ? "PASS" : "FAIL";
  char head[160];
  std::snprintf(head, sizeof head, "%-14s %-5s  (%.1f s)\n", r.name.c_str(), verdict, r.seconds);
  std::string out = head;
  for (const CheckItem& item : r.items) {
    out += item.info ? "  --    " : item.ok ? "  ok    " : "  FAIL  ";
    out += item.what;
    if (!item.detail.empty()) out += ": " + item.detail;
    out += "\n";
  }
  if (!r.error.empty()) out += "  ERROR " + r.error + "\n";
  return out;
}

std::string render_check_report(const std::vector<CheckResult>& results) {
  std::string out;
  size_t passed = 0;
  for (const CheckResult& r : results) {
    out += render_check(r);
    passed += r.passed() ? 1 : 0;
  }
  return out + std::to_string(passed) + " of " + std::to_string(results.size()) + " checks passed\n";
}

nlohmann::json check_report_json(const std::vector<CheckResult>& results, const std::string& url,
                                 const std::string& model) {
  nlohmann::json checks = nlohmann::json::array();
  bool all = true;
  for (const CheckResult& r : results) {
    nlohmann::json items = nlohmann::json::array();
    for (const CheckItem& item : r.items)
      items.push_back({{"what", item.what}, {"ok", item.ok}, {"detail", item.detail}, {"info", item.info}});
    all = all && r.passed();
    checks.push_back({{"name", r.name},
                      {"passed", r.passed()},
                      {"seconds", r.seconds},
                      {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                      {"items", items},
                      {"data", r.data}});
  }
  return {{"url", url}, {"model", model}, {"passed", all}, {"checks", checks}};
}

}  // namespace tf::check
