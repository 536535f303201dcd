// MemoryPlan: sizes the shared cache pool and the per-request window from a
// memory budget, once, at start. The pool never grows past it; a request that
// does not fit waits, and one that could never fit is refused (HTTP 400).
//
//   budget       = available - reserve - weights - (parallel + kept prompts) x per-stream state,
//                  capped by pool_cap_bytes (KV_POOL_GIB) when set
//   pool tokens  = budget / cache bytes per token, whole pages, and at most
//                  parallel x window, + 1 window with kept prompts (prompt reuse:
//                  their pages give way to requests, the spare window lets a prompt
//                  as long as the window be kept beside the running ones)
//   window       = CONTEXT, or with CONTEXT=0 the largest that fits
//                  (min(pool, model maximum)); a CONTEXT beyond the pool is
//                  lowered to what fits and said so in `notes`.
// Not enough memory for even one page is an error naming MEMORY_RESERVE_GIB.
// The weights' share comes from estimate_weight_bytes() below, which counts the
// matrices DENSE re-quantizes at their format's bytes (issue #8): with q4 the pool
// gets the memory the 4-bit matrices free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/api/matrix.h"
#include "model/config.h"

namespace tf {

struct MemoryPlanInput {
  int64_t available_bytes = 0;         // free memory now (MemAvailable / cudaMemGetInfo)
  int64_t reserve_bytes = 0;           // MEMORY_RESERVE_GIB
  int64_t weight_bytes = 0;            // what loading the weights will still take
  int64_t pool_cap_bytes = 0;          // KV_POOL_GIB; 0: no cap
  int64_t cache_bytes_per_token = 0;   // latents + indexer keys, all layers
  int64_t state_bytes_per_stream = 0;  // KDA recurrent/conv states of one stream
  int32_t parallel = 1;
  int32_t kept_states = 0;             // KEPT_PROMPTS: prompt states kept for reuse (one stream's state each)
  // COPY (speculative decoding): each stream's second set of states, where a verify step's
  // span runs until the rows kept are known (Glm5Model::commit_speculation).
  int32_t speculative_states = 0;
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

// What the weights will take where the model computes (MemoryPlanInput::weight_bytes).
// From the checkpoint's file bytes: every tensor held in the matrix dtype (BF16 on
// the GPU: the files' bytes + 5% for the f32 norms/routers, twice that for an FP8
// checkpoint; f32 on the CPU: 2x, 4x for FP8), minus what DENSE saves on the matrices
// it re-quantizes: their elements x (matrix bytes - the format's bytes per weight), and
// likewise what LM_HEAD saves on lm_head.
struct WeightBytesInput {
  int64_t file_bytes = 0;               // the checkpoint's *.safetensors
  bool fp8_checkpoint = false;          // the official FP8 release (1-byte matrices in the files)
  DType matrix_dtype = DType::kBF16;    // kBF16 or kF32: how the engine holds a matrix
  int64_t requantized_elements = 0;     // dense_requantized_elements()
  MatrixFormat dense = MatrixFormat::kDense;  // DENSE's format for those
  // Of an FP8 checkpoint: elements held as their own FP8 bytes (its routed experts,
  // Fp8ExpertStack), not converted to matrix_dtype.
  int64_t fp8_kept_elements = 0;
  int64_t head_elements = 0;                  // lm_head_elements(): the stored lm_head
  MatrixFormat head = MatrixFormat::kDense;   // LM_HEAD's format for it
  // The MTP drafts' copy of lm_head (Glm5Options::draft_head_quant), held beside it.
  MatrixFormat draft_head = MatrixFormat::kDense;
  // Of an EXL3 checkpoint: the linears outside the routed experts stored EXL3, which the
  // loader dequantizes (exl3_dense_linears()): their elements (padded) and file bytes.
  // Counted as if the file held them in BF16, as the official release does.
  int64_t exl3_dense_elements = 0;
  int64_t exl3_dense_file_bytes = 0;
};
int64_t estimate_weight_bytes(const WeightBytesInput& in);

// Bytes per weight of a matrix format: q4 4.25 bits (4-bit codes + an f16 scale per
// 64), fp8 1 byte + an f32 scale per 128x128 block; kDense: `dense_bytes`.
double matrix_format_bytes_per_weight(MatrixFormat format, double dense_bytes);

// Elements of the matrices DENSE=q4/fp8 re-quantizes at load (model/glm5/glm5_weights.cc:
// KDA q/k/v/o, MLA q_a/q_b/kv_a/o, dense MLPs, shared experts, the MTP layers' own and
// eh_proj), from the checkpoint's tensor list.
int64_t dense_requantized_elements(const Glm5Config& config);

// Elements of the stored lm_head (0 when tied to the embedding: then LM_HEAD's copy is
// extra, and the estimate keeps counting the table once as before).
int64_t lm_head_elements(const Glm5Config& config);

// Elements of the routed experts' matrices (every MoE layer, MTP included), from the
// checkpoint's tensor list: what an FP8 checkpoint keeps as FP8 bytes.
int64_t routed_expert_elements(const Glm5Config& config);

// MemAvailable from /proc/meminfo in bytes (0 when unreadable).
int64_t host_available_bytes();

// "1.50 GiB": bytes for the plan's and the working-memory probe's messages.
std::string gib_text(int64_t bytes);

}  // namespace tf
