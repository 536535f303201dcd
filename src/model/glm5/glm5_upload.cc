// upload_glm5_weights: walks Glm5Weights and moves each tensor (see glm5_upload.h).
#include "model/glm5/glm5_upload.h"

#include <string>

namespace tf {

Device ops_device(Ops& ops) { return ops.empty({0}).device(); }

Tensor to_ops_device(Ops& ops, Device device, const Tensor& t) {
  if (t.is_null() || (t.device() == device && t.is_contiguous())) return t;
  // (A packed host tensor goes up as it is: a stacked expert tensor is GBs, no host copy.)
  if (t.device().is_cpu()) return ops.to_device(t.is_contiguous() ? t : t.contiguous());
  // On another device (or strided there): go through the host.
  return ops.to_device(ops.to_host(t));
}

namespace {

class Uploader {
 public:
  explicit Uploader(Ops& ops) : ops_(ops), device_(ops_device(ops)) {}

  void put(Tensor& t, const std::string& name) {
    try {
      t = to_ops_device(ops_, device_, t);
    } catch (const StatusError& e) {
      throw StatusError(e.status().with_context("uploading " + name));
    }
  }
  // A Matrix: its dense tensor, or its codes and scales (quantized).
  void put(Matrix& m, const std::string& name) {
    if (m.is_dense()) {
      Tensor t = m.dense();
      put(t, name);
      m = Matrix(std::move(t));
      return;
    }
    Tensor codes = m.codes(), scales = m.scales();
    put(codes, name + " codes");
    put(scales, name + " scales");
    m = m.with_storage(std::move(codes), std::move(scales));
  }
  void mlp(MlpWeights& w, const std::string& p) {
    put(w.gate_up, p + "gate_up");
    put(w.down, p + "down");
  }
  void hc(HyperConnectionWeights& w, const std::string& p) {
    put(w.fn, p + "_fn");
    put(w.base, p + "_base");
    put(w.scale, p + "_scale");
  }
  void kda(KdaWeights& w, const std::string& p) {
    for (auto [m, n] : {std::pair{&w.q_proj, "q_proj"}, {&w.k_proj, "k_proj"}, {&w.v_proj, "v_proj"},
                        {&w.o_proj, "o_proj"}})
      put(*m, p + n);
    for (auto [t, n] : {std::pair{&w.q_conv, "q_conv1d"}, {&w.k_conv, "k_conv1d"}, {&w.v_conv, "v_conv1d"},
                        {&w.f_a, "f_a_proj"}, {&w.f_b, "f_b_proj"}, {&w.dt_bias, "dt_bias"}, {&w.a_log, "A_log"},
                        {&w.b_proj, "b_proj"}, {&w.g_a, "g_a_proj"}, {&w.g_b, "g_b_proj"}, {&w.o_norm, "o_norm"}})
      put(*t, p + n);
  }
  void mla(MlaWeights& w, const std::string& p) {
    for (auto [m, n] : {std::pair{&w.q_a, "q_a_proj"}, {&w.q_b, "q_b_proj"}, {&w.kv_a, "kv_a_proj_with_mqa"},
                        {&w.o_proj, "o_proj"}})
      put(*m, p + n);
    for (auto [t, n] : {std::pair{&w.q_a_norm, "q_a_layernorm"}, {&w.kv_a_norm, "kv_a_layernorm"},
                        {&w.w_uk_t, "w_uk_t"}, {&w.w_uv, "w_uv"}})
      put(*t, p + n);
    if (!w.indexer) return;
    IndexerWeights& iw = *w.indexer;
    const std::string q = p + "indexer.";
    for (auto [t, n] : {std::pair{&iw.wq_b, "wq_b"}, {&iw.wk, "wk"}, {&iw.k_norm_w, "k_norm.weight"},
                        {&iw.k_norm_b, "k_norm.bias"}, {&iw.weights_proj, "weights_proj"},
                        {&iw.ape, "index_kpool_compress_ape"}, {&iw.compress_gate, "index_kpool_compress_gate"}})
      put(*t, q + n);
  }
  void layer(LayerWeights& w, const std::string& p) {
    put(w.input_norm, p + "input_layernorm");
    put(w.post_norm, p + "post_attention_layernorm");
    hc(w.attn_hc, p + "hc_attn");
    hc(w.ffn_hc, p + "hc_ffn");
    kda(w.kda, p + "self_attn.");
    mla(w.mla, p + "self_attn.");
    mlp(w.dense, p + "mlp.");
    put(w.moe.router, p + "mlp.gate");
    put(w.moe.bias, p + "mlp.gate.e_score_correction_bias");
    put(w.moe.experts_gate_up, p + "mlp.experts.gate_up_proj");
    put(w.moe.experts_down, p + "mlp.experts.down_proj");
    for (size_t e = 0; e < w.moe.experts.size(); ++e) mlp(w.moe.experts[e], p + "mlp.experts." + std::to_string(e) + ".");
    if (w.moe.fp8_experts.num_experts() > 0) {
      Fp8ExpertStack& f = w.moe.fp8_experts;
      const std::string q = p + "mlp.experts (FP8) ";
      for (auto [t, n] : {std::pair{&f.gate, "gate"}, {&f.gate_scales, "gate scales"}, {&f.up, "up"},
                          {&f.up_scales, "up scales"}, {&f.down, "down"}, {&f.down_scales, "down scales"}})
        put(*t, q + n);
    }
    if (w.moe.exl3_experts) {
      const Status st = ops_.upload_exl3_experts(*w.moe.exl3_experts);
      if (!st.is_ok()) throw StatusError(st.with_context(p + "mlp.experts (EXL3)"));
    }
    mlp(w.moe.shared, p + "mlp.shared_experts.");
  }

 private:
  Ops& ops_;
  Device device_;
};

}  // namespace

Status upload_glm5_weights(Glm5Weights& w, Ops& ops) {
  try {
    Uploader up(ops);
    up.put(w.embed, "embed_tokens");
    up.put(w.norm, "norm");
    up.put(w.lm_head, "lm_head");
    for (size_t i = 0; i < w.layers.size(); ++i) up.layer(w.layers[i], "layers." + std::to_string(i) + ".");
    if (w.mtp) {
      MtpWeights& m = *w.mtp;
      up.put(m.enorm, "mtp.enorm");
      up.put(m.hnorm, "mtp.hnorm");
      up.put(m.shared_head_norm, "mtp.shared_head.norm");
      up.put(m.eh_proj, "mtp.eh_proj");
      if (!m.draft_head.is_null()) up.put(m.draft_head, "mtp.draft_head");
      up.layer(m.block, "mtp.");
    }
    return Status::ok();
  } catch (const StatusError& e) {
    return e.status();
  }
}

}  // namespace tf
