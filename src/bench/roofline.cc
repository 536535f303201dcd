// See roofline.h. Every tensor counted here is one of glm5_weight_spec.h's list
// (tests/unit/bench_roofline_test.cc checks the sums against that list).
#include "bench/roofline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tf::bench {

using Json = nlohmann::json;

namespace {

struct LayerElements {
  WeightElements hc_and_norms;  // per decoder layer
  WeightElements kda, mla, indexer, dense, moe_shared_and_router;
};

void add(WeightElements& w, int64_t matrix, int64_t kept_f32, int64_t quantized = 0) {
  w.matrix += matrix;
  w.kept_f32 += kept_f32;
  w.quantized += quantized;
}

LayerElements layer_elements(const RooflineModel& m) {
  const int64_t h = m.hidden;
  LayerElements e;
  // Two mHC sites (attention, FFN): fn [mix, hc*H], base [mix], scale [3], all f32; two RMSNorms.
  const int64_t mix = (2 + m.hc_mult) * m.hc_mult;
  add(e.hc_and_norms, 0, (m.hc_mult > 0 ? 2 * (mix * m.hc_mult * h + mix + 3) : 0) + 2 * h);
  // KDA: q/k/v/o projections, the forget-gate and output-gate bottlenecks, b_proj; f32 convolutions,
  // dt_bias, A_log and the shared o_norm.
  const int64_t dk = m.kda_head_dim, qkv = m.kda_heads * dk;
  add(e.kda, 3 * qkv * h + dk * h + qkv * dk + m.kda_heads * h + dk * h + qkv * dk + h * qkv,
      3 * qkv * m.kda_conv_kernel + qkv + m.kda_heads + dk, 3 * qkv * h + h * qkv);  // DENSE: q, k, v, o
  // MLA: q_a + q_b (or q_proj), kv_a, kv_b (the engine splits it into W_UK / W_UV), o; f32 norms, biases.
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim, kva = m.kv_lora_rank + m.qk_rope_head_dim;
  // DENSE re-quantizes q_a, q_b, kv_a and o; kv_b stays in the weight dtype.
  if (m.q_lora_rank > 0) {
    const int64_t q = m.q_lora_rank * h + m.mla_heads * qk * m.q_lora_rank;
    add(e.mla, q, m.q_lora_rank + (m.attention_bias ? m.q_lora_rank : 0), q);
  } else {
    add(e.mla, m.mla_heads * qk * h, 0, m.mla_heads * qk * h);
  }
  add(e.mla, kva * h + m.mla_heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank + h * m.mla_heads * m.v_head_dim,
      m.kv_lora_rank + (m.attention_bias ? kva + h : 0), kva * h + h * m.mla_heads * m.v_head_dim);
  // Indexer: wq_b, wk, weights_proj, compress gate; f32 LayerNorm (weight + bias) and the pool ape.
  const int64_t ihd = m.index_head_dim;
  add(e.indexer, m.index_heads * ihd * m.q_lora_rank + ihd * h + m.index_heads * h + ihd * h,
      2 * ihd + m.index_kpool * ihd);
  add(e.dense, 3 * m.intermediate * h, 0, 3 * m.intermediate * h);
  // Router weight and correction bias stay f32; shared experts are one MLP of width I x n_shared.
  add(e.moe_shared_and_router, 3 * m.moe_intermediate * m.shared_experts * h,
      m.routed_experts * h + m.routed_experts, 3 * m.moe_intermediate * m.shared_experts * h);
  return e;
}

void add_times(WeightElements& into, const WeightElements& w, int64_t times) {
  into.matrix += w.matrix * times;
  into.kept_f32 += w.kept_f32 * times;
  into.quantized += w.quantized * times;
}

// Sum over p = 1..n of min(p, cap).
double sum_min(int64_t n, int64_t cap) {
  const double nn = static_cast<double>(n), c = static_cast<double>(cap);
  if (n <= cap) return nn * (nn + 1) / 2;
  return c * (c + 1) / 2 + (nn - c) * c;
}

// Sum over p = 1..n of ceil(p / k).
double sum_ceil_div(int64_t n, int64_t k) {
  const int64_t q = n / k, r = n % k;
  return static_cast<double>(k) * static_cast<double>(q) * static_cast<double>(q + 1) / 2 +
         static_cast<double>(r) * static_cast<double>(q + 1);
}

int64_t selected_latents(const RooflineModel& m, int64_t context) {
  return m.index_topk > 0 ? std::min(context, m.index_topk) : context;
}

int64_t pooled_keys(const RooflineModel& m, int64_t context) {
  return (context + m.index_kpool - 1) / m.index_kpool;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "weights bf16, dense q4, experts exl3 4-bit" (only the parts that differ).
std::string formats(const RooflineDtypes& d) {
  std::string s = "weights " + d.weight_name;
  if (d.dense_name != d.weight_name) s += ", dense " + d.dense_name;
  if (d.expert_name != d.weight_name) s += ", experts " + d.expert_name;
  if (d.head_name != d.weight_name) s += ", lm_head " + d.head_name;
  return s;
}

Json hardware_json(const RooflineHardware& hw) {
  return {{"hbm_gbps", hw.hbm_gbps}, {"tc_tflops", hw.tc_tflops}, {"source", hw.source}};
}

}  // namespace

Status RooflineModel::validate() const {
  auto bad = [](const std::string& what) { return invalid_argument("roofline: " + what); };
  if (hidden <= 0 || vocab <= 0) return bad("hidden size and vocabulary must be positive");
  if (kda_layers < 0 || mla_layers < 0 || indexer_layers < 0 || dense_layers < 0 || moe_layers < 0)
    return bad("layer counts must be >= 0");
  if (kda_layers + mla_layers == 0) return bad("the model has no attention layers");
  if (dense_layers + moe_layers != kda_layers + mla_layers)
    return bad("every layer needs one MLP: " + std::to_string(dense_layers) + " dense + " +
               std::to_string(moe_layers) + " MoE != " + std::to_string(kda_layers + mla_layers) + " layers");
  if (indexer_layers > mla_layers) return bad("more indexer layers than MLA layers");
  if (hc_mult < 0) return bad("hc_mult must be >= 0");
  if (index_kpool < 1) return bad("index_kpool must be >= 1");
  if (moe_layers > 0 && (experts_per_token < 1 || experts_per_token > routed_experts))
    return bad("experts per token (" + std::to_string(experts_per_token) + ") must be in 1..routed experts (" +
               std::to_string(routed_experts) + ")");
  return Status::ok();
}

Expected<RooflineDtypes> roofline_dtypes(const std::string& weight, const std::string& kv) {
  RooflineDtypes d;
  d.weight_name = weight;
  if (weight == "bf16") {
    d.matrix = 2.0;
  } else if (weight == "f32") {
    d.matrix = 4.0;
  } else if (weight == "fp8") {
    d.matrix = 1.0 + 4.0 / (128.0 * 128.0);  // e4m3 + one f32 scale per 128 x 128 block
  } else {
    return invalid_argument("roofline: weight dtype must be bf16, f32 or fp8, got '" + weight + "'");
  }
  d.dense_name = d.expert_name = d.head_name = weight;
  d.dense = d.expert = d.head = d.matrix;
  if (kv == "fp8") {
    d.latent = 1.0;
    d.latent_scale = 4.0;
  } else if (kv == "bf16" || kv == "f32") {
    d.latent = kv == "bf16" ? 2.0 : 4.0;
    d.latent_scale = 0.0;
  } else {
    return invalid_argument("roofline: KV dtype must be fp8, bf16 or f32, got '" + kv + "'");
  }
  return d;
}

Expected<double> dense_format_bytes(const std::string& dense, const RooflineDtypes& d) {
  if (dense == "q4") return (4.0 + 16.0 / 64.0) / 8.0;  // 4-bit codes + an f16 scale per group of 64
  if (dense == "fp8") return 1.0 + 4.0 / (128.0 * 128.0);
  if (dense.empty() || dense == "bf16" || dense == "f32") return d.matrix;
  return invalid_argument("roofline: DENSE must be q4, fp8, bf16 or f32, got '" + dense + "'");
}

Status set_dense_format(RooflineDtypes& d, const std::string& dense) {
  Expected<double> b = dense_format_bytes(dense, d);
  if (!b) return b.status();
  d.dense = *b;
  d.dense_name = dense.empty() || dense == "bf16" || dense == "f32" ? d.weight_name : dense;
  return Status::ok();
}

Status set_head_format(RooflineDtypes& d, const std::string& lm_head) {
  if (lm_head.empty() || lm_head == "dense") {
    d.head = d.matrix;
    d.head_name = d.weight_name;
    return Status::ok();
  }
  if (lm_head != "q4" && lm_head != "fp8")
    return invalid_argument("roofline: LM_HEAD must be dense, q4 or fp8, got '" + lm_head + "'");
  Expected<double> b = dense_format_bytes(lm_head, d);
  if (!b) return b.status();
  d.head = *b;
  d.head_name = lm_head;
  return Status::ok();
}

double exl3_bytes_per_weight(double bits, int64_t in, int64_t out) {
  if (in <= 0 || out <= 0) return bits / 8.0;
  return bits / 8.0 + 2.0 * static_cast<double>(in + out) / (static_cast<double>(in) * static_cast<double>(out));
}

Status set_exl3_experts(RooflineDtypes& d, const RooflineModel& m, double bits) {
  if (!(bits > 0 && bits <= 8)) return invalid_argument("roofline: EXL3 bits must be in (0, 8], got " + fmt("%g", bits));
  // gate, up [I, H] and down [H, I] have the same in + out and in x out.
  d.expert = exl3_bytes_per_weight(bits, m.hidden, m.moe_intermediate);
  d.expert_name = "exl3 " + fmt("%g", bits) + "-bit";
  return Status::ok();
}

void set_fp8_experts(RooflineDtypes& d) {
  d.expert = 1.0 + 4.0 / (128.0 * 128.0);
  d.expert_name = "fp8 e4m3 (128x128 blocks)";
}

ModelWeights model_weights(const RooflineModel& m) {
  const LayerElements e = layer_elements(m);
  ModelWeights w;
  add_times(w.non_routed, e.hc_and_norms, m.kda_layers + m.mla_layers);
  add_times(w.non_routed, e.kda, m.kda_layers);
  add_times(w.non_routed, e.mla, m.mla_layers);
  add_times(w.non_routed, e.indexer, m.indexer_layers);
  add_times(w.non_routed, e.dense, m.dense_layers);
  add_times(w.non_routed, e.moe_shared_and_router, m.moe_layers);
  add(w.non_routed, m.vocab * m.hidden, m.hidden);  // lm_head, final norm
  w.per_expert = 3 * m.moe_intermediate * m.hidden;
  w.routed_total = w.per_expert * m.routed_experts * m.moe_layers;
  w.active_experts = m.experts_per_token * m.moe_layers;
  w.embedding = m.vocab * m.hidden;
  w.tied = m.tied_embeddings;
  return w;
}

double expected_distinct_experts(int64_t experts, int64_t k, int64_t batch) {
  if (experts <= 0 || k <= 0 || batch <= 0) return 0.0;
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(k) / e, static_cast<double>(batch)));
}

DecodeTraffic decode_traffic(const RooflineModel& m, const RooflineDtypes& d, int64_t batch, int64_t context) {
  const ModelWeights w = model_weights(m);
  const double b = static_cast<double>(batch);
  DecodeTraffic t;
  const int64_t head = m.vocab * m.hidden;  // lm_head, the part of non_routed.matrix at LM_HEAD's bytes
  t.weights = static_cast<double>(w.non_routed.matrix - w.non_routed.quantized - head) * d.matrix +
              static_cast<double>(w.non_routed.quantized) * d.dense + static_cast<double>(head) * d.head +
              static_cast<double>(w.non_routed.kept_f32) * d.kept_f32;
  t.experts_per_moe_layer = expected_distinct_experts(m.routed_experts, m.experts_per_token, batch);
  t.routed_experts = m.moe_layers * t.experts_per_moe_layer * static_cast<double>(w.per_expert) * d.expert;
  // Per sequence and KDA layer: the recurrent state (heads x dk x dv) and the short-conv history
  // (kernel - 1 past inputs of q, k and v), each read and written once.
  const int64_t qkv = m.kda_heads * m.kda_head_dim;
  const double state = static_cast<double>(m.kda_heads * m.kda_head_dim * m.kda_head_dim) +
                       static_cast<double>((m.kda_conv_kernel - 1) * 3 * qkv);
  t.kda_state = b * m.kda_layers * state * d.state * 2.0;
  t.latents = b * m.mla_layers * static_cast<double>(selected_latents(m, context)) *
              (static_cast<double>(m.kv_lora_rank) * d.latent + d.latent_scale);
  t.indexer_keys = b * m.indexer_layers * static_cast<double>(pooled_keys(m, context)) *
                   static_cast<double>(m.index_head_dim) * d.index_key;
  return t;
}

double attention_flops(const RooflineModel& m, int64_t context) {
  const double mla = 4.0 * static_cast<double>(m.mla_heads * m.kv_lora_rank) *
                     static_cast<double>(selected_latents(m, context));
  const double indexer = 2.0 * static_cast<double>(m.index_heads * m.index_head_dim) *
                         static_cast<double>(pooled_keys(m, context));
  const double kda = 6.0 * static_cast<double>(m.kda_heads * m.kda_head_dim * m.kda_head_dim);
  return m.mla_layers * mla + m.indexer_layers * indexer + m.kda_layers * kda;
}

double decode_flops(const RooflineModel& m, int64_t batch, int64_t context) {
  const ModelWeights w = model_weights(m);
  return static_cast<double>(batch) * (2.0 * static_cast<double>(w.active_params()) + attention_flops(m, context));
}

double prefill_flops(const RooflineModel& m, int64_t prompt) {
  if (prompt <= 0) return 0.0;
  const ModelWeights w = model_weights(m);
  const double lm_head = static_cast<double>(m.vocab * m.hidden);
  const double p = static_cast<double>(prompt);
  const double matmul = 2.0 * (static_cast<double>(w.active_params()) - lm_head) * p + 2.0 * lm_head;
  const double topk = m.index_topk > 0 ? static_cast<double>(m.index_topk) : p;
  const double mla = 4.0 * static_cast<double>(m.mla_heads * m.kv_lora_rank) *
                     sum_min(prompt, static_cast<int64_t>(topk));
  const double indexer =
      2.0 * static_cast<double>(m.index_heads * m.index_head_dim) * sum_ceil_div(prompt, m.index_kpool);
  const double kda = 6.0 * static_cast<double>(m.kda_heads * m.kda_head_dim * m.kda_head_dim) * p;
  return matmul + m.mla_layers * mla + m.indexer_layers * indexer + m.kda_layers * kda;
}

Status RooflineHardware::validate() const {
  if (!(hbm_gbps > 0.0)) return invalid_argument("roofline: the HBM bandwidth must be > 0 GB/s (--hbm-gbps)");
  if (!(tc_tflops > 0.0)) return invalid_argument("roofline: the tensor-core rate must be > 0 TFLOP/s (--tc-tflops)");
  return Status::ok();
}

Json decode_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw, int64_t batch,
                     int64_t context) {
  const DecodeTraffic t = decode_traffic(m, d, batch, context);
  const double flops = decode_flops(m, batch, context);
  const double t_mem = t.total() / (hw.hbm_gbps * 1e9);
  const double t_flop = flops / (hw.tc_tflops * 1e12);
  const double step = std::max(t_mem, t_flop);
  const bool memory = t_mem >= t_flop;
  const std::string summary =
      "decode, " + std::to_string(batch) + " stream(s) at " + std::to_string(context) + " tokens: " +
      fmt("%.2f", t.total() / 1e9) + " GB/step (weights " + fmt("%.2f", t.weights / 1e9) + ", routed experts " +
      fmt("%.2f", t.routed_experts / 1e9) + " [" + fmt("%.1f", t.experts_per_moe_layer) + "/layer], KDA state " +
      fmt("%.2f", t.kda_state / 1e9) + ", latents " + fmt("%.3f", t.latents / 1e9) + ", indexer keys " +
      fmt("%.3f", t.indexer_keys / 1e9) + "), " + fmt("%.3f", flops / 1e12) + " TFLOP/step; " +
      (memory ? "memory" : "compute") + "-bound, " + fmt("%.3f", step * 1e3) + " ms/step; " + formats(d);
  return {{"decode_tok_s", 1.0 / step},
          {"aggregate_tok_s", static_cast<double>(batch) / step},
          {"summary", summary},
          {"detail",
           {{"kind", "decode"},
            {"batch", batch},
            {"context", context},
            {"bound", memory ? "memory" : "compute"},
            {"step_s", step},
            {"bytes_per_step", t.total()},
            {"bytes",
             {{"weights", t.weights},
              {"routed_experts", t.routed_experts},
              {"kda_state", t.kda_state},
              {"latents", t.latents},
              {"indexer_keys", t.indexer_keys}}},
            {"experts_per_moe_layer", t.experts_per_moe_layer},
            {"flops_per_step", flops},
            {"weight_dtype", d.weight_name},
            {"dense_format", d.dense_name},
            {"expert_format", d.expert_name},
            {"lm_head_format", d.head_name},
            {"hardware", hardware_json(hw)}}}};
}

Json prefill_roofline(const RooflineModel& m, const RooflineDtypes& d, const RooflineHardware& hw, int64_t prompt) {
  const double flops = prefill_flops(m, prompt);
  // Weights read once for the whole prompt (every expert a prompt this long touches), one state.
  const DecodeTraffic all = decode_traffic(m, d, prompt, 0);
  const double bytes = all.weights + all.routed_experts + decode_traffic(m, d, 1, 0).kda_state;
  const double t_flop = flops / (hw.tc_tflops * 1e12);
  const double t_mem = bytes / (hw.hbm_gbps * 1e9);
  const double total = std::max(t_flop, t_mem);
  const double lm_head = static_cast<double>(m.vocab * m.hidden);
  const double matmul = prompt > 0 ? 2.0 * (static_cast<double>(model_weights(m).active_params()) - lm_head) * prompt +
                                         2.0 * lm_head
                                   : 0.0;
  const double attention_share = flops > 0 ? std::max(0.0, 1.0 - matmul / flops) : 0.0;
  const std::string summary = "prefill of " + std::to_string(prompt) + " tokens: " +
                              fmt("%.2f", flops / std::max<int64_t>(prompt, 1) / 1e9) + " GFLOP/token (attention " +
                              fmt("%.1f", 100.0 * attention_share) + "%), " + (t_flop >= t_mem ? "compute" : "memory") +
                              "-bound, " + fmt("%.3f", total) + " s; " + formats(d);
  return {{"prefill_tok_s", total > 0 ? static_cast<double>(prompt) / total : 0.0},
          {"summary", summary},
          {"detail",
           {{"kind", "prefill"},
            {"prompt_tokens", prompt},
            {"bound", t_flop >= t_mem ? "compute" : "memory"},
            {"time_s", total},
            {"flops", flops},
            {"flops_per_token", flops / static_cast<double>(std::max<int64_t>(prompt, 1))},
            {"attention_share", attention_share},
            {"weight_bytes", bytes},
            {"weight_dtype", d.weight_name},
            {"dense_format", d.dense_name},
            {"expert_format", d.expert_name},
            {"lm_head_format", d.head_name},
            {"hardware", hardware_json(hw)}}}};
}

}  // namespace tf::bench
