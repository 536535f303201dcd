// Canonical GLM-5.3-Flash tensor names and the other spellings a checkpoint may use.
//
// Canonical = the official release's on-disk names (= what transformers 5.17's
// save_pretrained writes). A checkpoint may instead hold transformers' in-memory
// module names (conversion_mapping.py "glm5_next", modeling_glm5_next.py):
//   self_attn.{f_a_proj,f_b_proj}.weight, dt_bias, A_log -> self_attn.forget_gate.*
//   hc_attn_{fn,base,scale} / hc_ffn_*                  -> attn_hc.{fn,base,scale} / ffn_hc.*
//   mlp.experts.E.gate_proj / up_proj (.weight, [I, H])  -> mlp.experts.gate_up_proj [E, 2I, H],
//        gate = rows [0, I) of expert E, up = rows [I, 2I) (MergeModulelist(0) then Concatenate(1);
//        Glm5NextTextExperts._apply_gate chunks the F.linear output the same way)
//   mlp.experts.E.down_proj.weight [H, I]                -> mlp.experts.down_proj [E, H, I]
//   self_attn.{q,k,v}_conv1d.weight [C, 1, K]            -> self_attn.conv1d.weight [3C, 1, K] (cat q,k,v)
// and the flat text-only prefix "model.layers.N." / "model.embed_tokens" for
// "model.language_model.". weight_aliases() lists every place a canonical
// tensor may come from, canonical spelling first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tf {

// Where one canonical tensor may live: checkpoint tensor `name`, then (when
// select >= 0) its slice [select] along dim 0, then part `part` of `parts`
// equal pieces along (the new) dim 0.
struct WeightAlias {
  std::string name;
  int64_t select = -1;
  int part = 0;
  int parts = 1;
  bool is_slice() const { return select >= 0 || parts > 1; }
  std::string describe() const;  // "mlp.experts.gate_up_proj[3] rows 1/2"
};

// Every alias of `canonical`, the canonical spelling first. With tied word
// embeddings, lm_head.weight also resolves to the embedding.
std::vector<WeightAlias> weight_aliases(const std::string& canonical, bool tie_word_embeddings = false);

// Name builders (canonical spelling).
std::string text_prefix();                  // "model.language_model."
std::string layer_prefix(int layer);        // "model.language_model.layers.N."
std::string expert_weight_name(int layer, int expert, const std::string& proj);  // proj: gate_proj|up_proj|down_proj

// The companion block-scale tensor names of an FP8 tensor, most common first:
// "X.weight" -> "X.weight_scale_inv"; fused "X" -> "X_scale_inv", "X_scales_inv".
std::vector<std::string> fp8_scale_names(const std::string& weight_name);

}  // namespace tf
