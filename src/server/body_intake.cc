// See body_intake.h.
#include "server/body_intake.h"

#include <algorithm>
#include <optional>

#include "server/api_error.h"

namespace tf::server {

namespace {

[[noreturn]] void throw_larger_than_budget(const std::string& what, const ByteBudget& budget) {
  throw ApiError(413,
                 what + " is larger than the server's prompt budget of " + byte_size_text(budget.capacity()) +
                     " (PROMPT_BUDGET_MIB: the request bodies it reads and tokenizes at once)",
                 "invalid_request_error", "body", "request_too_large");
}

[[noreturn]] void throw_busy(const ByteBudget& budget) {
  throw ApiError(503,
                 "the server is busy reading and tokenizing other large requests (PROMPT_BUDGET_MIB " +
                     byte_size_text(budget.capacity()) + "); retry later",
                 "server_error", std::nullopt, "service_unavailable");
}

}  // namespace

PostBody take_in_body(RequestBody& body, ByteBudget& budget, std::chrono::milliseconds patience) {
  body.check_length();
  const int64_t capacity = budget.capacity();
  // An announced body that could never fit is refused before a byte of it is read.
  if (body.length_known() && capacity > 0 && body.announced_length() > static_cast<uint64_t>(capacity))
    throw_larger_than_budget(
        "the request body (" + byte_size_text(static_cast<int64_t>(body.announced_length())) + ")", budget);
  PostBody in;
  // The first step fits a budget smaller than a step (a small body goes; a larger one of
  // unknown size is refused when it outgrows the budget).
  const int64_t first = capacity == 0 ? body.charge() : std::min(body.charge(), capacity);
  ByteBudget::Take t = budget.take(first, patience);
  switch (t.outcome) {
    case ByteBudget::Outcome::kTaken:
      break;
    case ByteBudget::Outcome::kLargerThanBudget:
      throw_larger_than_budget("the request body (" + byte_size_text(first) + ")", budget);
    case ByteBudget::Outcome::kTimedOut:
    case ByteBudget::Outcome::kWouldDeadlock:  // a lease of nothing never is
      throw_busy(budget);
  }
  in.lease = std::move(t.lease);
  int64_t charged = first;
  // The next step, up to the size about to be reached (a decoded piece may be larger than a
  // step), within the body limit and the budget (past the budget: 413).
  auto reserve = [&](int64_t size) {
    if (size <= charged) return charged;
    int64_t target = (size + kBodyChargeStep - 1) / kBodyChargeStep * kBodyChargeStep;
    if (body.length_known()) target = std::min(target, static_cast<int64_t>(body.announced_length()));
    target = std::max(size, std::min({target, body.max_bytes(), capacity > 0 ? capacity : target}));
    switch (budget.grow(in.lease, target - charged, patience)) {
      case ByteBudget::Outcome::kTaken:
        return charged = target;
      case ByteBudget::Outcome::kLargerThanBudget:
        in.lease.release();
        throw_larger_than_budget(
            "a chunked or compressed request body (" + byte_size_text(size) + " so far, as decoded)", budget);
      case ByteBudget::Outcome::kTimedOut:
      case ByteBudget::Outcome::kWouldDeadlock:
        break;
    }
    in.lease.release();
    throw_busy(budget);
  };
  in.text = body.read(reserve);
  return in;
}

}  // namespace tf::server
