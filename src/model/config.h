// GLM-5.3-Flash (`glm5_next`) configuration, parsed from config.json with
// transformers 5.17's defaults and derived fields (configuration_glm5_next.py).
//
// Two forms are accepted: nested ({"model_type": "glm5_next", "text_config":
// {...}, "vision_config": {...}}) and flat text-only (the text fields at the top
// level). Derived fields follow transformers exactly:
//   mlp_layer_types  default: first min(3, n) layers "dense", the rest "sparse"
//   layer_types      default: layer i is KDA ("linear_attention") unless i % 4 == 3
//                    ("deepseek_sparse_attention"); "full_attention" is an alias
//   indexer_types    index_topk_pattern ("FSS..." or a list) else the freq/offset
//                    schedule: "full" iff max(i - offset + 1, 0) % freq == 0
//   linear_attn_config {head_dim, num_heads, short_conv_kernel_size,
//                    gate_lower_bound, safe_gate} overrides the linear_* fields
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf {

enum class AttentionKind { kLinear, kSparseMla };  // KDA, or MLA + DSA indexer
enum class MlpKind { kDense, kSparse };
enum class IndexerKind { kFull, kShared };           // shared: reuse previous layer's top-k

struct Glm5TextConfig {
  int64_t vocab_size = 154880;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 12288;
  int64_t moe_intermediate_size = 2048;
  int num_hidden_layers = 45;
  int num_attention_heads = 64;
  int num_key_value_heads = 64;
  int n_shared_experts = 1;
  int n_routed_experts = 288;
  double routed_scaling_factor = 2.5;
  int kv_lora_rank = 512;
  int q_lora_rank = 1536;
  int qk_rope_head_dim = 0;
  int v_head_dim = 256;
  int qk_nope_head_dim = 256;
  int qk_head_dim = 256;  // derived: rope + nope
  int n_group = 1;
  int topk_group = 1;
  int num_experts_per_tok = 8;
  bool norm_topk_prob = true;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 1048576;
  double rms_norm_eps = 1e-5;
  std::optional<int64_t> pad_token_id = 154820;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int index_topk = 2048;
  int index_head_dim = 128;
  int index_n_heads = 32;
  int index_kpool = 16;
  bool index_kpool_always_select_tail = true;
  double swiglu_limit = 10.0;
  int linear_head_dim = 128;
  int linear_num_heads = 64;
  int linear_conv_kernel_dim = 4;
  std::optional<double> linear_lower_bound = -5.0;
  int hc_mult = 4;
  double hc_eps = 1e-6;
  int hc_sinkhorn_iters = 20;
  int num_nextn_predict_layers = 0;  // MTP layers stored after the decoder layers

  std::vector<AttentionKind> layer_types;
  std::vector<MlpKind> mlp_layer_types;
  std::vector<IndexerKind> indexer_types;

  int count_layers(AttentionKind k) const;
};

struct Glm5VisionConfig {
  bool present = false;  // false for flat text-only checkpoints
  int depth = 24;
  int hidden_size = 1024;
  std::string hidden_act = "silu";
  bool attention_bias = true;
  int num_heads = 16;
  int in_channels = 3;
  int image_size = 336;
  int patch_size = 14;
  double rms_norm_eps = 1e-5;
  int spatial_merge_size = 2;
  int temporal_patch_size = 2;
  int out_hidden_size = 1536;
  int intermediate_size = 4096;
  int projection_intermediate_size = 10240;
  double swiglu_limit = 10.0;
  // The axial 2-D RoPE's base: rope_parameters.rope_theta (or a top-level rope_theta);
  // transformers' default 10000 when neither is given (the release config has none).
  // rope_parameters.rope_type must be "axial" when given (the only kind the tower has).
  double rope_theta = 10000.0;
};

// Quantization as declared by the checkpoint (FP8 block scales or EXL3).
struct QuantizationConfig {
  std::string method;  // "" (none), "fp8", "exl3", ...
  std::vector<int> weight_block_size;  // fp8: [128, 128]
  nlohmann::json raw;                  // the whole object, for format-specific readers
};

struct Glm5Config {
  std::string model_type = "glm5_next";
  std::vector<std::string> architectures;
  bool nested = true;  // which form config.json used
  Glm5TextConfig text;
  Glm5VisionConfig vision;
  int64_t image_token_id = 154854;
  int64_t video_token_id = 154855;
  int64_t image_start_token_id = 154830;
  int64_t image_end_token_id = 154831;
  int64_t video_start_token_id = 154832;
  int64_t video_end_token_id = 154833;
  QuantizationConfig quantization;
};

// Parses config.json text; `source` names the file in errors.
Expected<Glm5Config> parse_glm5_config(const std::string& json_text, const std::string& source = "config.json");
// Reads DIR/config.json (or a path to a .json file).
Expected<Glm5Config> load_glm5_config(const std::string& path);

}  // namespace tf
