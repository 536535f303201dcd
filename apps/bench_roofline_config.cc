// See bench_roofline_config.h.
#include "apps/bench_roofline_config.h"

namespace tf::apps {

bench::RooflineModel roofline_model(const Glm5TextConfig& c) {
  bench::RooflineModel m;
  m.hidden = c.hidden_size;
  m.vocab = c.vocab_size;
  m.hc_mult = c.hc_mult;
  m.tied_embeddings = c.tie_word_embeddings;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const bool linear = i < static_cast<int>(c.layer_types.size()) && c.layer_types[i] == AttentionKind::kLinear;
    if (linear) {
      ++m.kda_layers;
    } else {
      ++m.mla_layers;
      const bool shared = i < static_cast<int>(c.indexer_types.size()) && c.indexer_types[i] == IndexerKind::kShared;
      if (!shared) ++m.indexer_layers;
    }
    const bool dense = i < static_cast<int>(c.mlp_layer_types.size()) && c.mlp_layer_types[i] == MlpKind::kDense;
    ++(dense ? m.dense_layers : m.moe_layers);
  }
  m.kda_heads = c.linear_num_heads;
  m.kda_head_dim = c.linear_head_dim;
  m.kda_conv_kernel = c.linear_conv_kernel_dim;
  m.mla_heads = c.num_attention_heads;
  m.q_lora_rank = c.q_lora_rank;
  m.kv_lora_rank = c.kv_lora_rank;
  m.qk_nope_head_dim = c.qk_nope_head_dim;
  m.qk_rope_head_dim = c.qk_rope_head_dim;
  m.v_head_dim = c.v_head_dim;
  m.attention_bias = c.attention_bias;
  m.index_heads = c.index_n_heads;
  m.index_head_dim = c.index_head_dim;
  m.index_kpool = c.index_kpool;
  m.index_topk = c.index_topk;
  m.intermediate = c.intermediate_size;
  m.moe_intermediate = c.moe_intermediate_size;
  m.shared_experts = c.n_shared_experts;
  m.routed_experts = c.n_routed_experts;
  m.experts_per_token = c.num_experts_per_tok;
  return m;
}

}  // namespace tf::apps
