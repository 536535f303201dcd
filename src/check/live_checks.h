// `tensorfold check`: live checks of a running server, the ones users of the reference
// deployment run before trusting a build (reference-deployment.md §5 "live check scripts").
//
//   needle        a code hidden at 10 / 50 / 90 % of a long prompt is found
//   toolcheck     tool calls: called when fitting, streamed = whole, forced calls complete and
//                 valid, tool results and blank or malformed earlier calls handled
//   end_of_turn   short replies end by themselves instead of running to max_tokens
//   prompt_reuse  repeated prompts, a chat's next turn and a shared system prompt resume from
//                 kept state, and a resumed reply equals the fresh one
//   pool_pressure more requests than streams and than the cache pool holds: every one answered
//                 (or refused with 429 + Retry-After), streams never above PARALLEL, replies
//                 under pressure equal to solo ones, an over-long prompt refused with 400
//
// needle, toolcheck (its first and forced items) and end_of_turn judge the model; the others
// judge the server and pass on any checkpoint, the demo's random weights included.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "check/check_context.h"
#include "check/check_result.h"

namespace tf::check {

Status run_needle_check(const CheckContext& ctx, CheckResult& result);
Status run_tool_check(const CheckContext& ctx, CheckResult& result);
Status run_end_of_turn_check(const CheckContext& ctx, CheckResult& result);
Status run_prompt_reuse_check(const CheckContext& ctx, CheckResult& result);
Status run_pool_pressure_check(const CheckContext& ctx, CheckResult& result);

struct LiveCheck {
  const char* name;
  const char* summary;
  Status (*run)(const CheckContext&, CheckResult&);
};
// Every check, in the order `tensorfold check` runs them when none is named.
const std::vector<LiveCheck>& live_checks();

// Runs the named checks in order (all when `names` is empty; an unknown name is an error
// before anything runs), writing each one's report to `progress` as it ends.
Expected<std::vector<CheckResult>> run_live_checks(const CheckContext& ctx,
                                                   const std::vector<std::string>& names,
                                                   std::ostream* progress);

}  // namespace tf::check
