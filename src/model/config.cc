#include "model/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tf {
namespace {

using json = nlohmann::json;

// Reads typed fields of one JSON object; the first error is kept and names
// the file and the field path ("config.json: text_config.hidden_size: ...").
class FieldReader {
 public:
  FieldReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  Status status() const { return status_; }
  std::string path(const char* key) const { return where_ + key; }
  void fail(const char* key, const std::string& what) {
    if (status_.is_ok()) status_ = invalid_argument(path(key) + ": " + what);
  }

  template <typename T>
  void integer(const char* key, T* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (!v->is_number_integer()) return fail(key, "expected an integer, got " + std::string(v->type_name()));
    *out = static_cast<T>(v->get<int64_t>());
  }
  void optional_integer(const char* key, std::optional<int64_t>* out) {
    const json* v = find(key);
    if (!v) return;
    if (v->is_null()) { out->reset(); return; }
    if (!v->is_number_integer()) return fail(key, "expected an integer or null, got " + std::string(v->type_name()));
    *out = v->get<int64_t>();
  }
  void number(const char* key, double* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (!v->is_number()) return fail(key, "expected a number, got " + std::string(v->type_name()));
    *out = v->get<double>();
  }
  void optional_number(const char* key, std::optional<double>* out) {
    const json* v = find(key);
    if (!v) return;
    if (v->is_null()) { out->reset(); return; }
    if (!v->is_number()) return fail(key, "expected a number or null, got " + std::string(v->type_name()));
    *out = v->get<double>();
  }
  void boolean(const char* key, bool* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (!v->is_boolean()) return fail(key, "expected true or false, got " + std::string(v->type_name()));
    *out = v->get<bool>();
  }
  void string(const char* key, std::string* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (!v->is_string()) return fail(key, "expected a string, got " + std::string(v->type_name()));
    *out = v->get<std::string>();
  }
  // An int or a list of ints ([image_size] or [h, w] forms collapse to the first).
  void int_or_first(const char* key, int* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) { *out = (*v)[0].get<int>(); return; }
    integer(key, out);
  }
  void string_list(const char* key, std::optional<std::vector<std::string>>* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (!v->is_array()) return fail(key, "expected a list of strings, got " + std::string(v->type_name()));
    std::vector<std::string> items;
    for (const auto& e : *v) {
      if (!e.is_string()) return fail(key, "expected a list of strings, found " + std::string(e.type_name()));
      items.push_back(e.get<std::string>());
    }
    *out = std::move(items);
  }
  void id_list(const char* key, std::vector<int64_t>* out) {
    const json* v = find(key);
    if (!v || v->is_null()) return;
    if (v->is_number_integer()) { *out = {v->get<int64_t>()}; return; }
    if (!v->is_array()) return fail(key, "expected an integer or a list of integers");
    out->clear();
    for (const auto& e : *v) {
      if (!e.is_number_integer()) return fail(key, "expected a list of integers");
      out->push_back(e.get<int64_t>());
    }
  }

 private:
  const json& obj_;
  std::string where_;
  Status status_;
};

Status parse_text(const json& obj, const std::string& where, Glm5TextConfig* c) {
  FieldReader r(obj, where);
  r.integer("vocab_size", &c->vocab_size);
  r.integer("hidden_size", &c->hidden_size);
  r.integer("intermediate_size", &c->intermediate_size);
  r.integer("moe_intermediate_size", &c->moe_intermediate_size);
  r.integer("num_hidden_layers", &c->num_hidden_layers);
  r.integer("num_attention_heads", &c->num_attention_heads);
  c->num_key_value_heads = c->num_attention_heads;  // transformers: None -> num_attention_heads
  r.integer("num_key_value_heads", &c->num_key_value_heads);
  r.integer("n_shared_experts", &c->n_shared_experts);
  r.integer("n_routed_experts", &c->n_routed_experts);
  r.integer("num_local_experts", &c->n_routed_experts);  // attribute_map alias
  r.number("routed_scaling_factor", &c->routed_scaling_factor);
  r.integer("kv_lora_rank", &c->kv_lora_rank);
  r.integer("q_lora_rank", &c->q_lora_rank);
  r.integer("qk_rope_head_dim", &c->qk_rope_head_dim);
  r.integer("v_head_dim", &c->v_head_dim);
  r.integer("qk_nope_head_dim", &c->qk_nope_head_dim);
  r.integer("n_group", &c->n_group);
  r.integer("topk_group", &c->topk_group);
  r.integer("num_experts_per_tok", &c->num_experts_per_tok);
  r.boolean("norm_topk_prob", &c->norm_topk_prob);
  r.string("hidden_act", &c->hidden_act);
  r.integer("max_position_embeddings", &c->max_position_embeddings);
  r.number("rms_norm_eps", &c->rms_norm_eps);
  r.optional_integer("pad_token_id", &c->pad_token_id);
  r.optional_integer("bos_token_id", &c->bos_token_id);
  r.id_list("eos_token_id", &c->eos_token_ids);
  r.boolean("tie_word_embeddings", &c->tie_word_embeddings);
  r.boolean("attention_bias", &c->attention_bias);
  r.integer("index_topk", &c->index_topk);
  r.integer("index_head_dim", &c->index_head_dim);
  r.integer("index_n_heads", &c->index_n_heads);
  r.integer("index_kpool", &c->index_kpool);
  r.boolean("index_kpool_always_select_tail", &c->index_kpool_always_select_tail);
  r.number("swiglu_limit", &c->swiglu_limit);
  r.integer("linear_head_dim", &c->linear_head_dim);
  r.integer("linear_num_heads", &c->linear_num_heads);
  r.integer("linear_conv_kernel_dim", &c->linear_conv_kernel_dim);
  r.optional_number("linear_lower_bound", &c->linear_lower_bound);
  r.integer("hc_mult", &c->hc_mult);
  r.number("hc_eps", &c->hc_eps);
  r.integer("hc_sinkhorn_iters", &c->hc_sinkhorn_iters);
  r.integer("num_nextn_predict_layers", &c->num_nextn_predict_layers);
  TF_RETURN_IF_ERROR(r.status());

  const int n = c->num_hidden_layers;
  if (n <= 0) return invalid_argument(r.path("num_hidden_layers") + ": must be positive, got " + std::to_string(n));

  // mlp_layer_types
  std::optional<std::vector<std::string>> mlp, attn, indexer;
  r.string_list("mlp_layer_types", &mlp);
  r.string_list("layer_types", &attn);
  r.string_list("indexer_types", &indexer);
  TF_RETURN_IF_ERROR(r.status());
  if (!mlp) {
    mlp.emplace();
    for (int i = 0; i < n; ++i) mlp->push_back(i < std::min(3, n) ? "dense" : "sparse");
  }
  if (!attn) {
    attn.emplace();
    for (int i = 0; i < n; ++i) attn->push_back(i % 4 != 3 ? "linear_attention" : "deepseek_sparse_attention");
  }
  if (!indexer) {
    indexer.emplace();
    const json* pattern = r.find("index_topk_pattern");
    if (pattern && pattern->is_string()) {
      for (char ch : pattern->get<std::string>()) {
        if (ch != 'F' && ch != 'S') {
          return invalid_argument(r.path("index_topk_pattern") + ": characters must be F or S, got '" +
                                  std::string(1, ch) + "'");
        }
        indexer->push_back(ch == 'F' ? "full" : "shared");
      }
    } else if (pattern && pattern->is_array()) {
      r.string_list("index_topk_pattern", &indexer);
      TF_RETURN_IF_ERROR(r.status());
    } else {
      int freq = 1, offset = 2;
      r.integer("index_topk_freq", &freq);
      r.integer("index_skip_topk_offset", &offset);
      TF_RETURN_IF_ERROR(r.status());
      freq = std::max(freq, 1);
      for (int i = 0; i < n; ++i) indexer->push_back(std::max(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
    }
  }
  auto check_len = [&](const char* key, const std::vector<std::string>& v) -> Status {
    if (static_cast<int>(v.size()) != n) {
      return invalid_argument(r.path(key) + ": has " + std::to_string(v.size()) + " entries for " +
                              std::to_string(n) + " layers");
    }
    return Status::ok();
  };
  TF_RETURN_IF_ERROR(check_len("mlp_layer_types", *mlp));
  TF_RETURN_IF_ERROR(check_len("layer_types", *attn));
  TF_RETURN_IF_ERROR(check_len("indexer_types", *indexer));
  c->mlp_layer_types.clear();
  c->layer_types.clear();
  c->indexer_types.clear();
  for (int i = 0; i < n; ++i) {
    const std::string& m = (*mlp)[i];
    if (m != "dense" && m != "sparse") {
      return invalid_argument(r.path("mlp_layer_types") + "[" + std::to_string(i) + "]: unknown value '" + m + "'");
    }
    c->mlp_layer_types.push_back(m == "dense" ? MlpKind::kDense : MlpKind::kSparse);
    const std::string& a = (*attn)[i];
    if (a == "linear_attention") {
      c->layer_types.push_back(AttentionKind::kLinear);
    } else if (a == "deepseek_sparse_attention" || a == "full_attention") {
      c->layer_types.push_back(AttentionKind::kSparseMla);
    } else {
      return invalid_argument(r.path("layer_types") + "[" + std::to_string(i) + "]: unknown value '" + a + "'");
    }
    const std::string& x = (*indexer)[i];
    if (x != "full" && x != "shared") {
      return invalid_argument(r.path("indexer_types") + "[" + std::to_string(i) + "]: unknown value '" + x + "'");
    }
    c->indexer_types.push_back(x == "full" ? IndexerKind::kFull : IndexerKind::kShared);
  }

  if (const json* lac = r.find("linear_attn_config"); lac && lac->is_object()) {
    FieldReader l(*lac, r.path("linear_attn_config") + ".");
    l.integer("head_dim", &c->linear_head_dim);
    l.integer("num_heads", &c->linear_num_heads);
    l.integer("short_conv_kernel_size", &c->linear_conv_kernel_dim);
    l.optional_number("gate_lower_bound", &c->linear_lower_bound);
    bool safe_gate = true;
    l.boolean("safe_gate", &safe_gate);
    TF_RETURN_IF_ERROR(l.status());
    if (safe_gate && !c->linear_lower_bound) c->linear_lower_bound = -5.0;
  }
  c->qk_head_dim = c->qk_rope_head_dim + c->qk_nope_head_dim;

  // transformers' validate_architecture, plus what our kernels assume.
  if (c->num_attention_heads != c->num_key_value_heads) {
    return invalid_argument(r.path("num_key_value_heads") + ": must equal num_attention_heads (" +
                            std::to_string(c->num_attention_heads) + "), got " + std::to_string(c->num_key_value_heads));
  }
  if (c->index_kpool < 1) return invalid_argument(r.path("index_kpool") + ": must be positive");
  if (c->index_topk % c->index_kpool != 0) {
    return invalid_argument(r.path("index_topk") + ": " + std::to_string(c->index_topk) +
                            " is not divisible by index_kpool " + std::to_string(c->index_kpool));
  }
  if (c->qk_rope_head_dim > 0) {
    return unimplemented(r.path("qk_rope_head_dim") + ": GLM-5.3-Flash attention uses no RoPE, got " +
                         std::to_string(c->qk_rope_head_dim));
  }
  if (c->hidden_act != "silu") return unimplemented(r.path("hidden_act") + ": only silu is supported");
  if (c->n_group < 1 || c->n_routed_experts % c->n_group != 0) {
    return invalid_argument(r.path("n_group") + ": must divide n_routed_experts");
  }
  if (c->num_experts_per_tok > c->n_routed_experts) {
    return invalid_argument(r.path("num_experts_per_tok") + ": larger than n_routed_experts");
  }
  for (int i = 0; i < n; ++i) {
    if (c->layer_types[i] == AttentionKind::kSparseMla && c->indexer_types[i] == IndexerKind::kShared &&
        (i == 0 || c->layer_types[i - 1] != AttentionKind::kSparseMla)) {
      // transformers hands top-k only from one DSA layer to the next one.
      return invalid_argument(r.path("indexer_types") + "[" + std::to_string(i) +
                              "]: a shared indexer layer must directly follow a DSA layer");
    }
  }
  return Status::ok();
}

Status parse_vision(const json& obj, const std::string& where, Glm5VisionConfig* v) {
  FieldReader r(obj, where);
  v->present = true;
  r.integer("depth", &v->depth);
  r.integer("hidden_size", &v->hidden_size);
  r.string("hidden_act", &v->hidden_act);
  r.boolean("attention_bias", &v->attention_bias);
  r.integer("num_heads", &v->num_heads);
  r.integer("num_attention_heads", &v->num_heads);
  r.integer("in_channels", &v->in_channels);
  r.int_or_first("image_size", &v->image_size);
  r.int_or_first("patch_size", &v->patch_size);
  r.number("rms_norm_eps", &v->rms_norm_eps);
  r.integer("spatial_merge_size", &v->spatial_merge_size);
  r.int_or_first("temporal_patch_size", &v->temporal_patch_size);
  r.integer("out_hidden_size", &v->out_hidden_size);
  r.integer("intermediate_size", &v->intermediate_size);
  r.integer("projection_intermediate_size", &v->projection_intermediate_size);
  r.number("swiglu_limit", &v->swiglu_limit);
  r.number("rope_theta", &v->rope_theta);  // the legacy top-level spelling
  if (const json* rp = r.find("rope_parameters"); rp && !rp->is_null()) {
    if (!rp->is_object()) {
      r.fail("rope_parameters", "expected an object, got " + std::string(rp->type_name()));
    } else {
      FieldReader rr(*rp, where + "rope_parameters.");
      rr.number("rope_theta", &v->rope_theta);
      std::string type = "axial";
      rr.string("rope_type", &type);
      TF_RETURN_IF_ERROR(r.status());
      TF_RETURN_IF_ERROR(rr.status());
      if (type != "axial")
        return unimplemented(where + "rope_parameters.rope_type: '" + type +
                             "' (the vision tower supports only axial rope)");
    }
  }
  if (r.status().is_ok() && !(v->rope_theta > 0))
    return invalid_argument(where + "rope_theta: must be positive, got " + std::to_string(v->rope_theta));
  return r.status();
}

}  // namespace

int Glm5TextConfig::count_layers(AttentionKind k) const {
  return static_cast<int>(std::count(layer_types.begin(), layer_types.end(), k));
}

Expected<Glm5Config> parse_glm5_config(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(source + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(source + ": expected a JSON object");
  Glm5Config cfg;
  FieldReader top(j, source + ": ");
  top.string("model_type", &cfg.model_type);
  if (const json* a = top.find("architectures"); a && a->is_array()) {
    for (const auto& e : *a) if (e.is_string()) cfg.architectures.push_back(e.get<std::string>());
  }
  if (!top.find("model_type")) return invalid_argument(source + ": missing 'model_type'");
  if (cfg.model_type != "glm5_next" && cfg.model_type != "glm5_next_text") {
    return unimplemented(source + ": model_type '" + cfg.model_type +
                         "' is not supported (tensorfold serves glm5_next, GLM-5.3-Flash)");
  }
  top.integer("image_token_id", &cfg.image_token_id);
  top.integer("video_token_id", &cfg.video_token_id);
  top.integer("image_start_token_id", &cfg.image_start_token_id);
  top.integer("image_end_token_id", &cfg.image_end_token_id);
  top.integer("video_start_token_id", &cfg.video_start_token_id);
  top.integer("video_end_token_id", &cfg.video_end_token_id);
  TF_RETURN_IF_ERROR(top.status());

  const json* text_cfg = top.find("text_config");
  if (text_cfg && !text_cfg->is_null()) {
    if (!text_cfg->is_object()) return invalid_argument(source + ": text_config: expected an object");
    cfg.nested = true;
    TF_RETURN_IF_ERROR(parse_text(*text_cfg, source + ": text_config.", &cfg.text));
  } else {
    cfg.nested = false;
    TF_RETURN_IF_ERROR(parse_text(j, source + ": ", &cfg.text));
  }
  if (const json* vis = top.find("vision_config"); vis && !vis->is_null()) {
    if (!vis->is_object()) return invalid_argument(source + ": vision_config: expected an object");
    TF_RETURN_IF_ERROR(parse_vision(*vis, source + ": vision_config.", &cfg.vision));
  }
  const json* q = top.find("quantization_config");
  if (!q && text_cfg && text_cfg->is_object() && text_cfg->contains("quantization_config")) {
    q = &(*text_cfg)["quantization_config"];
  }
  if (q && !q->is_null() && !q->is_object()) {
    return invalid_argument(source + ": quantization_config: expected an object, got " +
                            std::string(q->type_name()));
  }
  if (q && q->is_object()) {
    cfg.quantization.raw = *q;
    FieldReader qr(*q, source + ": quantization_config.");
    qr.string("quant_method", &cfg.quantization.method);
    TF_RETURN_IF_ERROR(qr.status());
    // Other methods (gptq, awq, compressed-tensors, ...) store tensors under names and layouts we do not
    // read: refused here, rather than as a missing weight after minutes of loading.
    const std::string& method = cfg.quantization.method;
    if (!method.empty() && method != "fp8" && method != "exl3") {
      return invalid_argument(source + ": quantization_config.quant_method '" + method +
                              "' is not supported (tensorfold loads 'fp8' block-scaled e4m3/e5m2 and 'exl3' "
                              "checkpoints, or unquantized ones)");
    }
    if (const json* b = qr.find("weight_block_size"); b && !b->is_null()) {
      // FP8 block scales are [rows, cols] blocks; a malformed size would silently decode as 128x128.
      const bool pair =
          b->is_array() && b->size() == 2 && std::all_of(b->begin(), b->end(), [](const json& e) {
            return e.is_number_integer() && e.get<int64_t>() > 0 && e.get<int64_t>() <= (1 << 20);
          });
      if (!pair) {
        return invalid_argument(source +
                                ": quantization_config.weight_block_size: expected [rows, cols], two "
                                "positive integers, got " +
                                b->dump());
      }
      for (const auto& e : *b) cfg.quantization.weight_block_size.push_back(e.get<int>());
    }
  }
  return cfg;
}

Expected<Glm5Config> load_glm5_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = path;
  if (fs::is_directory(path)) file = (fs::path(path) / "config.json").string();
  std::ifstream in(file);
  if (!in) return not_found(file + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_glm5_config(ss.str(), file);
}

}  // namespace tf
