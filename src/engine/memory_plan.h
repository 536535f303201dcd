// MemoryPlan: sizes the shared cache pool and the per-request window from a
// memory budget, once, at start. The pool never grows past it; a request that
// does not fit waits, and one that could never fit is refused (HTTP 400).
//
//   budget       = available - reserve - weights - parallel x per-stream state,
//                  capped by pool_cap_bytes (KV_POOL_GIB) when set
//   pool tokens  = budget / cache bytes per token, whole pages, and at most
//                  parallel x window (nothing else would use more yet)
//   window       = CONTEXT, or with CONTEXT=0 the largest that fits
//                  (min(pool, model maximum)); a CONTEXT beyond the pool is
//                  lowered to what fits and said so in `notes`.
// Not enough memory for even one page is an error naming MEMORY_RESERVE_GIB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf {

struct MemoryPlanInput {
  int64_t available_bytes = 0;         // free memory now (MemAvailable / cudaMemGetInfo)
  int64_t reserve_bytes = 0;           // MEMORY_RESERVE_GIB
  int64_t weight_bytes = 0;            // what loading the weights will still take
  int64_t pool_cap_bytes = 0;          // KV_POOL_GIB; 0: no cap
  int64_t cache_bytes_per_token = 0;   // latents + indexer keys, all layers
  int64_t state_bytes_per_stream = 0;  // KDA recurrent/conv states of one stream
  int32_t parallel = 1;
  int64_t context = 0;                 // CONTEXT; 0: largest that fits
  int64_t model_max_context = 0;       // max_position_embeddings
  int64_t page_size = 64;
};

struct MemoryPlan {
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t pool_tokens = 0;
  int64_t context = 0;      // per-request window (prompt + max_tokens)
  int64_t pool_bytes = 0;
  std::vector<std::string> notes;  // adjustments worth a log line
};

[[nodiscard]] Expected<MemoryPlan> plan_memory(const MemoryPlanInput& in);

// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
int64_t host_available_bytes();

}  // namespace tf
