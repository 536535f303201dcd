// The expected tensor list of a glm5_next checkpoint; see glm5_weight_spec.h.
#include "model/glm5_weight_spec.h"

#include "model/weight_names.h"
#include "model/weight_source.h"

namespace tf {
namespace {

class SpecBuilder {
 public:
  SpecBuilder(const Glm5Config& config, std::vector<WeightSpecEntry>* out) : c_(config.text), out_(out) {}

  void add(const std::string& name, Shape shape) { out_->push_back({name, std::move(shape)}); }

  void hyper_connections(const std::string& p) {
    const int64_t hc = c_.hc_mult, mix = (2 + hc) * hc;
    for (const char* site : {"attn", "ffn"}) {
      add(p + "hc_" + site + "_fn", {mix, hc * c_.hidden_size});
      add(p + "hc_" + site + "_base", {mix});
      add(p + "hc_" + site + "_scale", {3});
    }
  }

  void kda(const std::string& p) {
    const int64_t h = c_.hidden_size, hd = c_.linear_head_dim, nh = c_.linear_num_heads, qkv = hd * nh;
    for (const char* x : {"q", "k", "v"}) {
      add(p + "self_attn." + x + "_proj.weight", {qkv, h});
      add(p + "self_attn." + x + "_conv1d.weight", {qkv, 1, c_.linear_conv_kernel_dim});
    }
    add(p + "self_attn.f_a_proj.weight", {hd, h});
    add(p + "self_attn.f_b_proj.weight", {qkv, hd});
    add(p + "self_attn.A_log", {nh});
    add(p + "self_attn.dt_bias", {qkv});
    add(p + "self_attn.b_proj.weight", {nh, h});
    add(p + "self_attn.g_a_proj.weight", {hd, h});
    add(p + "self_attn.g_b_proj.weight", {qkv, hd});
    add(p + "self_attn.o_norm.weight", {hd});
    add(p + "self_attn.o_proj.weight", {h, qkv});
  }

  void mla(const std::string& p, bool with_indexer) {
    const int64_t h = c_.hidden_size, heads = c_.num_attention_heads;
    const int64_t qk = c_.qk_nope_head_dim + c_.qk_rope_head_dim;
    const std::string a = p + "self_attn.";
    if (c_.q_lora_rank > 0) {
      add(a + "q_a_proj.weight", {c_.q_lora_rank, h});
      if (c_.attention_bias) add(a + "q_a_proj.bias", {c_.q_lora_rank});
      add(a + "q_a_layernorm.weight", {c_.q_lora_rank});
      add(a + "q_b_proj.weight", {heads * qk, c_.q_lora_rank});
    } else {
      add(a + "q_proj.weight", {heads * qk, h});
    }
    add(a + "kv_a_proj_with_mqa.weight", {c_.kv_lora_rank + c_.qk_rope_head_dim, h});
    if (c_.attention_bias) add(a + "kv_a_proj_with_mqa.bias", {c_.kv_lora_rank + c_.qk_rope_head_dim});
    add(a + "kv_a_layernorm.weight", {c_.kv_lora_rank});
    add(a + "kv_b_proj.weight", {heads * (c_.qk_nope_head_dim + c_.v_head_dim), c_.kv_lora_rank});
    add(a + "o_proj.weight", {h, heads * c_.v_head_dim});
    if (c_.attention_bias) add(a + "o_proj.bias", {h});
    if (!with_indexer) return;
    const std::string ix = a + "indexer.";
    const int64_t ihd = c_.index_head_dim;
    add(ix + "wq_b.weight", {c_.index_n_heads * ihd, c_.q_lora_rank});
    add(ix + "wk.weight", {ihd, h});
    add(ix + "k_norm.weight", {ihd});
    add(ix + "k_norm.bias", {ihd});
    add(ix + "weights_proj.weight", {c_.index_n_heads, h});
    add(ix + "index_kpool_compress_ape", {c_.index_kpool, ihd});
    add(ix + "index_kpool_compress_gate", {ihd, h});
  }

  void dense_mlp(const std::string& p) {
    const int64_t h = c_.hidden_size, i = c_.intermediate_size;
    add(p + "mlp.gate_proj.weight", {i, h});
    add(p + "mlp.up_proj.weight", {i, h});
    add(p + "mlp.down_proj.weight", {h, i});
  }

  void moe(const std::string& p, int layer) {
    const int64_t h = c_.hidden_size, i = c_.moe_intermediate_size, e = c_.n_routed_experts;
    const int64_t si = i * c_.n_shared_experts;
    add(p + "mlp.gate.weight", {e, h});
    add(p + "mlp.gate.e_score_correction_bias", {e});
    if (si > 0) {
      add(p + "mlp.shared_experts.gate_proj.weight", {si, h});
      add(p + "mlp.shared_experts.up_proj.weight", {si, h});
      add(p + "mlp.shared_experts.down_proj.weight", {h, si});
    }
    for (int x = 0; x < e; ++x) {
      add(expert_weight_name(layer, x, "gate_proj"), {i, h});
      add(expert_weight_name(layer, x, "up_proj"), {i, h});
      add(expert_weight_name(layer, x, "down_proj"), {h, i});
    }
  }

 private:
  const Glm5TextConfig& c_;
  std::vector<WeightSpecEntry>* out_;
};

void vision_spec(const Glm5VisionConfig& v, std::vector<WeightSpecEntry>* out) {
  const std::string p = "model.visual.";
  const int64_t h = v.hidden_size, o = v.out_hidden_size, m = v.spatial_merge_size;
  auto add = [&](const std::string& n, Shape s) { out->push_back({p + n, std::move(s)}); };
  add("patch_embed.proj.weight", {h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  add("patch_embed.proj.bias", {h});
  for (int b = 0; b < v.depth; ++b) {
    const std::string bp = "blocks." + std::to_string(b) + ".";
    add(bp + "norm1.weight", {h});
    add(bp + "norm2.weight", {h});
    add(bp + "attn.qkv.weight", {3 * h, h});
    if (v.attention_bias) add(bp + "attn.qkv.bias", {3 * h});
    add(bp + "attn.proj.weight", {h, h});
    if (v.attention_bias) add(bp + "attn.proj.bias", {h});
    add(bp + "attn.q_norm.weight", {h / v.num_heads});
    add(bp + "attn.k_norm.weight", {h / v.num_heads});
    for (const char* x : {"gate_proj", "up_proj"}) {
      add(bp + "mlp." + x + ".weight", {v.intermediate_size, h});
      add(bp + "mlp." + x + ".bias", {v.intermediate_size});
    }
    add(bp + "mlp.down_proj.weight", {h, v.intermediate_size});
    add(bp + "mlp.down_proj.bias", {h});
  }
  add("post_layernorm.weight", {h});
  add("downsample.weight", {o, h, m, m});
  add("downsample.bias", {o});
  add("merger.proj.weight", {o, o});
  add("merger.post_projection_norm.weight", {o});
  add("merger.post_projection_norm.bias", {o});
  add("merger.gate_proj.weight", {v.projection_intermediate_size, o});
  add("merger.up_proj.weight", {v.projection_intermediate_size, o});
  add("merger.down_proj.weight", {o, v.projection_intermediate_size});
}

}  // namespace

std::vector<WeightSpecEntry> glm5_weight_spec(const Glm5Config& config, const WeightSpecOptions& options) {
  const Glm5TextConfig& c = config.text;
  std::vector<WeightSpecEntry> out;
  SpecBuilder b(config, &out);
  b.add(text_prefix() + "embed_tokens.weight", {c.vocab_size, c.hidden_size});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layer_prefix(i);
    b.add(p + "input_layernorm.weight", {c.hidden_size});
    b.add(p + "post_attention_layernorm.weight", {c.hidden_size});
    b.hyper_connections(p);
    const bool linear = i < static_cast<int>(c.layer_types.size()) && c.layer_types[i] == AttentionKind::kLinear;
    if (linear) {
      b.kda(p);
    } else {
      const bool shared = i < static_cast<int>(c.indexer_types.size()) && c.indexer_types[i] == IndexerKind::kShared;
      b.mla(p, !shared);
    }
    const bool dense = i < static_cast<int>(c.mlp_layer_types.size()) && c.mlp_layer_types[i] == MlpKind::kDense;
    if (dense) {
      b.dense_mlp(p);
    } else {
      b.moe(p, i);
    }
  }
  if (options.include_mtp) {
    for (int j = 0; j < c.num_nextn_predict_layers; ++j) {
      const int i = c.num_hidden_layers + j;
      const std::string p = layer_prefix(i);
      b.add(p + "eh_proj.weight", {c.hidden_size, 2 * c.hidden_size});
      b.add(p + "enorm.weight", {c.hidden_size});
      b.add(p + "hnorm.weight", {c.hidden_size});
      b.add(p + "shared_head.norm.weight", {c.hidden_size});
      b.add(p + "input_layernorm.weight", {c.hidden_size});
      b.add(p + "post_attention_layernorm.weight", {c.hidden_size});
      b.mla(p, /*with_indexer=*/true);
      b.moe(p, i);
    }
  }
  b.add(text_prefix() + "norm.weight", {c.hidden_size});
  if (!c.tie_word_embeddings) b.add("lm_head.weight", {c.vocab_size, c.hidden_size});
  if (options.include_vision && config.vision.present) vision_spec(config.vision, &out);
  return out;
}

Status validate_checkpoint(const WeightSource& source, const Glm5Config& config, std::vector<Status>* problems,
                           const WeightSpecOptions& options) {
  Status first;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, options)) {
    Expected<Shape> shape = source.shape(e.name);
    Status s;
    if (!shape.has_value()) {
      s = shape.status();
    } else if (*shape != e.shape) {
      s = invalid_argument("tensor '" + e.name + "' has shape " + shape_to_string(*shape) + " but the config needs " +
                           shape_to_string(e.shape));
    }
    if (s.is_ok()) continue;
    if (first.is_ok()) first = s;
    if (problems == nullptr) break;
    problems->push_back(s);
  }
  return first;
}

}  // namespace tf
