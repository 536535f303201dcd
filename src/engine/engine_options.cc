#include "engine/engine_options.h"

#include <string>

namespace tf::engine {

Status EngineOptions::validate() const {
  if (parallel < 1 || parallel > 256) {
    return invalid_argument("PARALLEL (--parallel) must be in 1..256, got " + std::to_string(parallel));
  }
  if (context < 0) return invalid_argument("CONTEXT (--context) must be >= 0, got " + std::to_string(context));
  if (kv != "fp8" && kv != "bf16" && kv != "f32") {
    return invalid_argument("KV (--kv) must be fp8, bf16 or f32, got '" + kv + "'");
  }
  if (!(memory_reserve_gib >= 0.0)) {
    return invalid_argument("MEMORY_RESERVE_GIB must be >= 0, got " + std::to_string(memory_reserve_gib));
  }
  if (!(kv_pool_gib >= 0.0)) return invalid_argument("KV_POOL_GIB must be >= 0, got " + std::to_string(kv_pool_gib));
  // Every waiting request holds an HTTP worker thread (server/http_server.cc): bounded.
  if (max_waiting < 1 || max_waiting > kMaxWaiting)
    return invalid_argument("MAX_QUEUED (--max-waiting) must be 1.." + std::to_string(kMaxWaiting) + ", got " +
                            std::to_string(max_waiting));
  if (prefill_chunk < 0)
    return invalid_argument("--prefill-chunk must be >= 1 (or 0: the default), got " + std::to_string(prefill_chunk));
  if (page_size < 1) return invalid_argument("page size must be >= 1");
  if (copy_max < 1 || copy_max > 63)
    return invalid_argument("COPY_MAX (--copy-max) must be in 1..63, got " + std::to_string(copy_max));
  if (copy_match < 2 || copy_match > 64)
    return invalid_argument("COPY_MATCH (--copy-match) must be in 2..64, got " + std::to_string(copy_match));
  if (loop_guard < 0 || loop_guard > (int64_t{1} << 30))
    return invalid_argument("LOOP_GUARD (--loop-guard) must be in 0..2^30 tokens, got " +
                            std::to_string(loop_guard));
  if (draft_model != "mtp" && draft_model != "none" && draft_model != "dflash2")
    return invalid_argument("DRAFTER (--drafter) must be mtp or none, got '" + draft_model + "'");
  if (mtp_max < 1 || mtp_max > 63)
    return invalid_argument("MTP_MAX (--mtp-max) must be in 1..63, got " + std::to_string(mtp_max));
  if (!(prompt_store_gib > 0.0) || prompt_store_gib > 1048576.0)
    return invalid_argument("PROMPT_STORE_GIB (--prompt-store-gib) must be in (0, 1048576], got " +
                            std::to_string(prompt_store_gib));
  if (kept_prompts < 0 || kept_prompts > 4096)
    return invalid_argument("KEPT_PROMPTS (--kept-prompts) must be in 0..4096, got " + std::to_string(kept_prompts));
  if (device != "cpu" && device != "cuda") {
    return invalid_argument("DEVICE (--device) must be cpu or cuda, got '" + device + "'");
  }
  if (cuda_device < 0) return invalid_argument("cuda device must be >= 0, got " + std::to_string(cuda_device));
  if (exact_rows < 0 || exact_rows > 64)
    return invalid_argument("EXACT_ROWS (--exact-rows) must be in 0..64, got " + std::to_string(exact_rows));
  if (!dense.empty() && dense != "bf16" && dense != "f32" && dense != "q4" && dense != "fp8")
    return invalid_argument("DENSE (--dense) must be q4, fp8, bf16 or f32, got '" + dense + "'");
  if (!lm_head.empty() && lm_head != "dense" && lm_head != "q4" && lm_head != "fp8")
    return invalid_argument("LM_HEAD (--lm-head) must be dense, q4 or fp8, got '" + lm_head + "'");
  if (step_token_budget != 0 && step_token_budget < prefill_chunk_or_default() + parallel) {
    return invalid_argument("--step-tokens must be >= prefill chunk + PARALLEL (" +
                            std::to_string(prefill_chunk_or_default() + parallel) + ")");
  }
  return Status::ok();
}

int32_t EngineOptions::prefill_chunk_or_default() const {
  if (prefill_chunk > 0) return prefill_chunk;
  return device == "cuda" ? 1024 : 256;
}

}  // namespace tf::engine
