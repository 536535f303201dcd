#include "check/live_checks.h"

#include <chrono>
#include <ostream>

namespace tf::check {

const std::vector<LiveCheck>& live_checks() {
  static const std::vector<LiveCheck> checks = {
      {"needle", "a code hidden at 10/50/90 % of a long prompt is found", run_needle_check},
      {"toolcheck", "tool calls whole and streamed, forced, answered from results", run_tool_check},
      {"end_of_turn", "short replies end by themselves", run_end_of_turn_check},
      {"prompt_reuse", "repeats, next turns and shared system prompts resume; resumed = fresh",
       run_prompt_reuse_check},
      {"pool_pressure", "more requests than streams and pool: all answered, solo = concurrent",
       run_pool_pressure_check},
  };
  return checks;
}

Expected<std::vector<CheckResult>> run_live_checks(const CheckContext& ctx,
                                                   const std::vector<std::string>& names,
                                                   std::ostream* progress) {
  std::vector<const LiveCheck*> chosen;
  for (const std::string& name : names) {
    const LiveCheck* found = nullptr;
    for (const LiveCheck& c : live_checks())
      if (name == c.name) found = &c;
    if (!found) {
      std::string known;
      for (const LiveCheck& c : live_checks()) known += std::string(known.empty() ? "" : ", ") + c.name;
      return invalid_argument("no check named '" + name + "' (checks: " + known + ")");
    }
    chosen.push_back(found);
  }
  if (chosen.empty())
    for (const LiveCheck& c : live_checks()) chosen.push_back(&c);
  std::vector<CheckResult> results;
  for (const LiveCheck* c : chosen) {
    CheckResult r;
    r.name = c->name;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Status s = c->run(ctx, r);
      if (!s.is_ok()) r.error = s.message();
    } catch (const std::exception& e) {  // a reply of an unexpected shape
      r.error = std::string("unexpected reply: ") + e.what();
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) *progress << render_check(r) << std::flush;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace tf::check
