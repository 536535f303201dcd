#include "engine/engine_api.h"

namespace tf::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kRepetition:
      return "repetition";
  }
  return "stop";
}

}  // namespace tf::engine
