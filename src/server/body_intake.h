// A POST body taken in under the prompt budget (PROMPT_BUDGET_MIB, byte_budget.h): charged
// before its first byte is read, then read (request_body.h) with its charge kept.
//
// Every body is charged kBodyChargeStep up front and then step by step as its bytes arrive
// (decoded bytes for a compressed one), waiting for room as a take does. Charging a body its
// announced size (or, of unknown size, the whole 96 MiB limit) up front let two clients that
// announce large bodies and send them slowly hold the default 128 MiB budget for as long as
// they kept the connections alive, and every other request waited 60 s for a 503. An
// announced body larger than the budget is refused (413) before it is read. A step refused
// (no room within the patience, or every holder waiting to grow: byte_budget.h) gives back
// what the body held, and the rest of it is read through and dropped.
#pragma once

#include <chrono>
#include <string>

#include "server/byte_budget.h"
#include "server/request_body.h"

namespace tf::server {

// How long a body waits for room in the prompt budget before the request is refused (503).
constexpr std::chrono::milliseconds kPromptBudgetPatience = std::chrono::seconds(60);

// What a POST route's handler gets besides the request: the body and its hold on the prompt
// budget, which the handler gives back once the prompt's tokens are in the engine's hands
// (or on return).
struct PostBody {
  std::string text;
  ByteBudget::Lease lease;
};

// Charges `body` to `budget`, then reads it. Throws ApiError: 413 when the body is larger
// than the budget (announced, or once it grew past it) or than the body limit; 503 when no
// room came within `patience`; what RequestBody::read() throws.
PostBody take_in_body(RequestBody& body, ByteBudget& budget,
                      std::chrono::milliseconds patience = kPromptBudgetPatience);

}  // namespace tf::server
