// Engine settings (tensorfold serve flags / environment, see apps/serve_command.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace tf::engine {

// DENSE's default (issue #8): the large dense matrices as q4.
inline constexpr const char* kDefaultDense = "q4";

struct EngineOptions {
  std::string model_dir;          // checkpoint folder (config.json, tokenizer.json, safetensors)
  std::string served_name;        // model id in the API; empty: the folder's name
  int32_t parallel = 4;           // PARALLEL: decoding streams
  int64_t context = 1048576;      // CONTEXT: per-request window; 0 = largest that fits
  std::string kv = "fp8";         // KV: latent cache storage, fp8 | bf16 | f32
  double memory_reserve_gib = 4.0;  // MEMORY_RESERVE_GIB: host memory left free for the OS and other work
  double kv_pool_gib = 0.0;       // KV_POOL_GIB: cap on the cache pool; 0 = no cap
  int32_t max_waiting = 64;       // requests queued beyond PARALLEL before 429 (MAX_QUEUED, 1..kMaxWaiting)
  static constexpr int32_t kMaxWaiting = 4096;
  // Tokens of one prompt per step (aligned: replies do not depend on batch-mates);
  // 0: the device's default (prefill_chunk_or_default).
  int32_t prefill_chunk = 0;
  int32_t step_token_budget = 0;  // 0: prefill_chunk x 2 + parallel
  // Image/video patches the vision tower encodes per engine step, so that a large image or
  // a long video does not stall the other streams for its whole encode (whole segments:
  // an image, or a video's temporal groups, are never split).
  int64_t media_patches_per_step = 32768;
  // At start on a device backend: run the largest step and vision encode once and fail to
  // start when their working memory does not fit (engine_memory_probe.cc).
  bool probe_working_memory = true;
  // VISION=0: the vision tower is not loaded (its memory goes to the cache pool); image and
  // video parts are then refused with a 400 that says so.
  bool vision = true;
  // VISION_URLS: "0" media parts are data: URLs only; "1" https:// URLs are fetched too, from
  // public addresses; "lan" also from private networks. vision_urls_ca: the certificates to
  // trust instead of the system's (VISION_URLS_CA).
  std::string vision_urls = "0";
  std::string vision_urls_ca;
  int64_t page_size = 64;
  // KEPT_PROMPTS: prompt states kept for reuse (engine_prompt_reuse.cc); 0 turns prompt reuse
  // off (SHARED_PREFIX=0). Each holds one stream's KDA state (in the memory plan) and its
  // prompt's cache pages (given back whenever a request needs them).
  int32_t kept_prompts = 16;
  // PROMPT_STORE: a folder where kept prompts' states are also written (prompt_store.h), so
  // that a prompt resumes from one after it left the device or after a restart; empty: none.
  // PROMPT_STORE_GIB bounds what the folder holds (least recently used files deleted first).
  std::string prompt_store;
  double prompt_store_gib = 64.0;
  // The store's blocks (prompt_store.h), in tokens: 0 = 2,048 rounded up to a multiple of where
  // kept states lie (prompt_reuse_grain); a set value must be such a multiple (tests).
  int64_t prompt_store_block_tokens = 0;
  std::string device = "cpu";     // DEVICE: cpu | cuda (GPU 0; needs a CUDA build)
  // DENSE: how the projection matrices are held. "" is kDefaultDense (q4). q4 / fp8: the
  // large dense matrices (load_glm5_weights lists them) are re-quantized at load
  // (model/dense_quant.h), the other matrices as bf16 does; bf16: BF16 on the GPU (the
  // checkpoint's own precision), f32 on the CPU backend (which computes in f32);
  // f32: f32 everywhere.
  std::string dense;
  // LM_HEAD: "" or "dense" keeps lm_head like the matrices DENSE does not re-quantize
  // (BF16 on the GPU, as the reference deployment's head_bits 16); "q4" / "fp8"
  // re-quantize it at load like DENSE's formats (~1.27 GB -> 0.34 / 0.64 GB read per
  // decode step).
  std::string lm_head;
  // EXACT_ROWS (GPU): steps whose matmuls have at most this many rows use the
  // row-independent kernels (a reply does not depend on its batch-mates); larger
  // steps use BF16 tensor cores (cuBLAS). 0..64.
  int32_t exact_rows = 8;
  // BATCH_INVARIANT (GPU, with exact_rows > 0): a step keeps within exact_rows rows or runs one
  // prompt chunk alone, so no row goes through a kernel whose bits depend on its batch-mates:
  // a reply is the same under any load (scheduler_policies.h). false: steps mix decodes and
  // prompt chunks (more throughput while prompts fill, replies then depend on the load).
  bool batch_invariant = true;
  // LOOP_GUARD: a reply whose reasoning ends in at least 3 exact copies of one block of
  // 1..kLoopGuardMaxPattern tokens, together at least this many tokens, has fallen into a loop
  // it rarely leaves before max_tokens: the engine closes the reasoning (</think>, as
  // thinking_budget does) and the model answers from what it has. 0: off.
  int64_t loop_guard = 1024;
  static constexpr int32_t kLoopGuardMaxPattern = 512;
  static constexpr int32_t kLoopGuardCopies = 3;
  // COPY: copy drafts (spec/copy_drafter.h). A decoding stream whose last COPY_MATCH tokens
  // occurred before verifies what followed them (up to COPY_MAX tokens) in its next step
  // and keeps those the model samples itself, so replies are the same token for token,
  // in fewer steps. Drafts go only into steps without a prompt chunk, and only as many
  // as keep the step within EXACT_ROWS rows on the GPU (the rows then equal serial
  // decoding's bit for bit).
  bool copy_drafts = true;
  int32_t copy_max = 7;
  int32_t copy_match = 8;
  // DRAFTER: "mtp" drafts with the checkpoint's own MTP layer (layer 45) where no copy draft
  // is made, up to MTP_MAX tokens a step (only as many as its measured acceptance pays for);
  // "none" turns it off. A checkpoint without the layer drafts nothing. The reference
  // deployment's "dflash2" is accepted and served by the MTP layer (no DFlash2 drafter here).
  std::string draft_model = "mtp";
  int32_t mtp_max = 3;
  // Tests and benchmarks: every stream drafts the most it may every step (COPY_MAX, MTP_MAX,
  // max_tokens and EXACT_ROWS still bound it), the draft policy not consulted.
  bool always_draft = false;
  bool mtp_on() const { return draft_model == "mtp" || draft_model == "dflash2"; }
  // Tests and benchmarks: a drafter used instead of copy drafts (COPY on), asked every step for
  // up to `max` drafts for a choice's prompt + reply so far without the draft policy's say (an
  // oracle that replays a serial run, or one that errs on purpose).
  std::function<std::vector<int32_t>(std::span<const int32_t> tokens, int max)> drafter;
  // Tensor parallelism (issue #7): this engine is rank 0 of tp_comm's world and
  // broadcasts every step to the followers (tp_follower.h). Null: one rank.
  // tp_comm is the host channel (Gloo: step commands, the model setup); the
  // model's collectives go through model_comm when set (NCCL on the GPUs with
  // --device cuda), else through tp_comm (CPU ranks).
  std::shared_ptr<Communicator> tp_comm;
  std::shared_ptr<Communicator> model_comm;
  // --device cuda: this rank's GPU (local rank r uses device r of the visible ones).
  int cuda_device = 0;
  // Called once, from the engine thread, when the world broke (a follower died
  // or hung): the engine has stopped and fails every request; the caller
  // should shut the server down.
  std::function<void(const Status&)> on_tp_failure;

  [[nodiscard]] Status validate() const;
  // prefill_chunk, or when 0: 256 on the CPU, 1024 on CUDA (prefill GEMMs need many
  // rows to approach the tensor cores' rate and to amortise reading the weights once
  // per step; two such chunks' activations stay well inside the memory reserve).
  [[nodiscard]] int32_t prefill_chunk_or_default() const;
};

}  // namespace tf::engine
