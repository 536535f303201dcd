// The roofline of a GLM-5.3-Flash decode step and of a prefill: the bytes that
// must cross HBM and the FLOPs that must run, turned into a tok/s bound for a
// given memory bandwidth and tensor-core rate.
//
// Design: src/bench does not see src/model, so the geometry comes in as plain
// numbers (RooflineModel; apps/bench_roofline_config.cc fills it from a
// Glm5Config) and every count here is a closed formula over them, each one
// checked in tests against hand-computed values and the checkpoint's tensor list.
//
// Decode step of B sequences, each `context` tokens long (compulsory traffic):
//   weights  every non-routed tensor once (KDA / MLA / indexer projections,
//            dense MLPs, shared experts, routers, mHC, norms, lm_head), plus the
//            routed experts actually touched: B tokens each pick k of E experts, so
//            a MoE layer touches E[distinct] = E * (1 - (1 - k/E)^B) experts
//            (uniform routing). The embedding rows read (B x hidden) are ignored.
//   state    KDA: each sequence reads and writes its recurrent state (heads x dk x
//            dv, f32) and its short-conv history, per KDA layer.
//   cache    DSA: each sequence reads min(context, index_topk) selected latents
//            (kv_lora_rank elements + a per-latent scale for fp8) per MLA layer and
//            scans all ceil(context / index_kpool) pooled indexer keys per layer
//            with an indexer. Writes of the one new latent/key are ignored.
// Dtypes follow what the engine holds (glm5_weights.h): projection matrices in
// the weight dtype, except the large dense ones DENSE re-quantizes (KDA q/k/v/o,
// MLA q_a/q_b/kv_a/o, dense MLPs, shared experts) which are counted at the bytes of
// that format (q4: 4 bits + an f16 scale per 64 = 4.25 bits; fp8: 1 byte + an f32
// scale per 128x128 block); routed experts in the weight dtype or, for an EXL3
// checkpoint, at K bits per weight plus their f16 sign vectors; routers, mHC, norms,
// convolutions, A_log, dt_bias and the ape in f32. MTP layers are not counted
// (plain decoding does not run them).
//
// FLOPs: 2 per matmul weight element per token (non-routed matrices, routers,
// mHC, k experts; lm_head once per sequence), plus attention:
//   MLA (absorbed, latent space)  4 x heads x kv_lora_rank x selected latents
//   indexer                       2 x index_heads x index_head_dim x pooled keys
//   KDA                           6 x heads x dk x dv (state read, delta, update)
// A prefill of P tokens costs the sum over positions 0..P-1 (attention grows
// with the position) and lm_head once; its roofline is compute-bound except for
// tiny prompts (weights read once per prompt are counted too).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tf::bench {

struct RooflineModel {
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t hc_mult = 4;  // mHC residual streams (0: no mHC)
  bool tied_embeddings = false;  // lm_head is the embedding table (still read for the logits)
  // Decoder layers by kind (MTP layers excluded).
  int kda_layers = 0;      // Kimi Delta Attention
  int mla_layers = 0;      // MLA + DSA
  int indexer_layers = 0;  // MLA layers with their own indexer ("full")
  int dense_layers = 0;    // dense SwiGLU MLP
  int moe_layers = 0;
  // KDA
  int64_t kda_heads = 0, kda_head_dim = 0, kda_conv_kernel = 0;
  // MLA
  int64_t mla_heads = 0, q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0,
          v_head_dim = 0;
  bool attention_bias = false;
  // DSA indexer
  int64_t index_heads = 0, index_head_dim = 0, index_kpool = 1, index_topk = 0;
  // MLPs
  int64_t intermediate = 0, moe_intermediate = 0;
  int64_t shared_experts = 0, routed_experts = 0, experts_per_token = 0;

  [[nodiscard]] Status validate() const;
};

// Bytes per stored element.
struct RooflineDtypes {
  std::string weight_name = "bf16";
  double matrix = 2.0;        // projection matrices, lm_head (the weight dtype)
  std::string dense_name = "bf16";
  double dense = 2.0;         // the matrices DENSE re-quantizes (WeightElements::quantized)
  std::string expert_name = "bf16";
  double expert = 2.0;        // routed experts
  std::string head_name = "bf16";
  double head = 2.0;          // lm_head (LM_HEAD's format; the weight dtype by default)
  double kept_f32 = 4.0;      // routers, mHC, norms, convolutions, A_log, dt_bias, ape
  double latent = 1.0;        // one latent element (KV=fp8)
  double latent_scale = 4.0;  // per cached latent (fp8's scale; 0 for bf16/f32)
  double index_key = 4.0;     // one pooled indexer-key element (f32 in the engine)
  double state = 4.0;         // KDA recurrent and conv state (f32)
};

// weight: "bf16" | "f32" | "fp8"; kv: "fp8" | "bf16" | "f32". The dense matrices and
// the routed experts start in the weight dtype.
Expected<RooflineDtypes> roofline_dtypes(const std::string& weight, const std::string& kv);

// Bytes per weight of a DENSE format: "q4" 4.25 bits, "fp8" 1 byte + 4 per 128x128
// block; "bf16" / "f32" / "" leave the weight dtype. Errors name DENSE.
Expected<double> dense_format_bytes(const std::string& dense, const RooflineDtypes& d);
// `d` with the DENSE matrices at `dense`'s bytes.
[[nodiscard]] Status set_dense_format(RooflineDtypes& d, const std::string& dense);
// `d` with lm_head at LM_HEAD's bytes: "" / "dense" the weight dtype, "q4" / "fp8" as DENSE's.
[[nodiscard]] Status set_head_format(RooflineDtypes& d, const std::string& lm_head);

// Bytes per weight of an EXL3 matrix of `in` x `out` at K bits: the trellis (K / 8 bytes
// per weight) and its f16 input and output sign vectors (suh, svh).
double exl3_bytes_per_weight(double bits, int64_t in, int64_t out);
// `d` with the routed experts EXL3 at `bits` per weight (0, 8] for the model's expert shape.
[[nodiscard]] Status set_exl3_experts(RooflineDtypes& d, const RooflineModel& m, double bits);
// The routed experts as the official FP8 release stores them and the engine serves them
// (Fp8ExpertStack): 1 byte per weight + an f32 scale per 128x128 block.
void set_fp8_experts(RooflineDtypes& d);

// Element counts of the weights, split by the dtype they are held in.
struct WeightElements {
  int64_t matrix = 0;     // projection matrices (the weight dtype, or DENSE's format for `quantized`)
  int64_t quantized = 0;  // the part of `matrix` DENSE re-quantizes
  int64_t kept_f32 = 0;   // held in f32
  int64_t total() const { return matrix + kept_f32; }
};

struct ModelWeights {
  WeightElements non_routed;   // every tensor except routed experts and the embedding table; lm_head included
  int64_t per_expert = 0;      // one routed expert (gate, up, down), weight dtype
  int64_t routed_total = 0;    // all routed experts of all MoE layers
  int64_t active_experts = 0;  // experts run per token: MoE layers x k
  int64_t embedding = 0;       // vocab x hidden
  bool tied = false;           // lm_head is the embedding table
  // Stored parameters (the embedding once when tied).
  int64_t total_params() const { return non_routed.total() + routed_total + (tied ? 0 : embedding); }
  // Parameters one token runs through (the embedding row excluded).
  int64_t active_params() const { return non_routed.total() + active_experts * per_expert; }
};

ModelWeights model_weights(const RooflineModel& m);

// E[distinct experts] touched by `batch` tokens each choosing k of E (uniform).
double expected_distinct_experts(int64_t experts, int64_t k, int64_t batch);

struct DecodeTraffic {
  double weights = 0;                // non-routed weights
  double routed_experts = 0;         // expected distinct experts x bytes, all MoE layers
  double experts_per_moe_layer = 0;  // E[distinct]
  double kda_state = 0;              // recurrent + conv state, read and written, all sequences
  double latents = 0;                // selected latents, all MLA layers and sequences
  double indexer_keys = 0;           // pooled keys scanned, all indexer layers and sequences
  double total() const { return weights + routed_experts + kda_state + latents + indexer_keys; }
};

DecodeTraffic decode_traffic(const RooflineModel& m, const RooflineDtypes& d, int64_t batch, int64_t context);

// FLOPs of the attention terms for one token at `context` tokens (itself included).
double attention_flops(const RooflineModel& m, int64_t context);
// FLOPs of one decode step of `batch` sequences at `context` tokens.
double decode_flops(const RooflineModel& m, int64_t batch, int64_t context);
// FLOPs of a whole prefill of `prompt` tokens (lm_head once, for the last token).
double prefill_flops(const RooflineModel& m, int64_t prompt);

struct RooflineHardware {
  double hbm_gbps = 0;    // GB/s (1e9 bytes), read + write
  double tc_tflops = 0;   // dense BF16 tensor-core TFLOP/s
  std::string source;     // "flags", "probe (...)", ...
  [[nodiscard]] Status validate() const;
};

// The report's roofline object for a decode run at `batch` streams:
// decode_tok_s (per stream), aggregate_tok_s (all streams), with the bytes and
// FLOPs per step, their split, the binding resource and the inputs.
nlohmann::json decode_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw,
                               int64_t batch, int64_t context);
// The roofline object for a prefill of `prompt` tokens: prefill_tok_s, FLOPs per token, the split.
nlohmann::json prefill_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw,
                                int64_t prompt);

}  // namespace tf::bench
