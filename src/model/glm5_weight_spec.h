// Every tensor a GLM-5.3-Flash checkpoint must hold for a config, by canonical
// name with its shape, and a check of a checkpoint against that list.
//
// Per decoder layer 0..L-1 (glm53-checkpoint-facts.md §4, modeling_glm5_next.py):
// input/post_attention layernorms, hc_attn_* / hc_ffn_* (fn [(2+hc)*hc, hc*H],
// base [(2+hc)*hc], scale [3]); KDA (q/k/v proj, q/k/v conv1d [C,1,K], f_a/f_b,
// A_log, dt_bias, b_proj, g_a/g_b, o_norm, o_proj) or MLA (q_a/q_b or q_proj,
// kv_a_proj_with_mqa, layernorms, kv_b_proj, o_proj; biases when attention_bias)
// with its DSA indexer unless the layer reuses the previous top-k ("shared");
// dense MLP or MoE (router, correction bias, shared experts, per-expert
// gate/up/down). MTP layers L..L+n-1 (num_nextn_predict_layers): eh_proj
// [H, 2H], enorm, hnorm, shared_head.norm, layernorms, MLA + indexer, MoE; no
// hc_* tensors, no embedding or head of their own. Globals: embed_tokens, norm,
// lm_head (absent when tied). Vision tower (model.visual.*) when configured.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"

namespace tf {

class WeightSource;

struct WeightSpecEntry {
  std::string name;  // canonical
  Shape shape;
};

struct WeightSpecOptions {
  bool include_mtp = true;     // layers num_hidden_layers .. + num_nextn_predict_layers
  bool include_vision = true;  // model.visual.* when config.vision.present
};

std::vector<WeightSpecEntry> glm5_weight_spec(const Glm5Config& config, const WeightSpecOptions& options = {});

// Checks that every expected tensor is present with its shape. Returns the
// first problem (ok when none); `problems` (optional) receives all of them.
// Each message names the tensor (and both shapes when mis-shaped).
Status validate_checkpoint(const WeightSource& source, const Glm5Config& config,
                           std::vector<Status>* problems = nullptr, const WeightSpecOptions& options = {});

}  // namespace tf
