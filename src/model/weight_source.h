// WeightSource: the model's view of a checkpoint, by canonical tensor name.
//
// Canonical names are the official release's on-disk names
// (/work/shared/spec/glm53-checkpoint-facts.md §4), e.g.
//   model.language_model.layers.3.mlp.experts.7.gate_proj.weight   (one tensor per expert)
//   model.language_model.layers.0.self_attn.q_conv1d.weight        (separate q/k/v convs)
//   model.language_model.layers.0.self_attn.f_a_proj.weight, .dt_bias, .A_log
//   model.language_model.layers.0.hc_attn_fn / hc_attn_base / hc_attn_scale (and hc_ffn_*)
//   model.language_model.layers.45.*                                (the MTP layer)
//   lm_head.weight, model.language_model.embed_tokens.weight, model.language_model.norm.weight
// which is also what transformers 5.17's save_pretrained writes. The source
// also accepts the in-memory module names transformers uses (fused
// experts.gate_up_proj / experts.down_proj, forget_gate.*, attn_hc.* / ffn_hc.*,
// a flat "model.layers." prefix) and FP8 e4m3 weights with 128x128 block scales
// (`weight_scale_inv`), and hands every tensor out as f32 on the host; EXL3
// checkpoints' routed experts come out of get_exl3 instead.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/api/matrix.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tf {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor as f32 on the host (dequantized / converted / sliced as needed).
  // not_found names the canonical name and the checkpoint folder;
  // a shape other than `expected_shape` (when given) is an error naming both shapes.
  virtual Expected<Tensor> get_f32(const std::string& canonical_name, const Shape& expected_shape = {}) const = 0;
  // The tensor as stored when that is f32, bf16 or f16 (FP8 comes out dequantized
  // f32): the same values as get_f32 without the f32 copy. It may be a read-only
  // view of the checkpoint's mapped bytes (keeping the mapping alive), so callers
  // copy before writing. The weight loader uses it for the projection matrices,
  // whose bytes then go from the mapped file straight to the device. The default
  // returns get_f32.
  virtual Expected<Tensor> get_native(const std::string& canonical_name, const Shape& expected_shape = {}) const {
    return get_f32(canonical_name, expected_shape);
  }
  // A matrix stored FP8 e4m3 in 128x128 blocks (the official release's layout, and
  // the fp8 format of Matrix) as its own bytes: Matrix::fp8_block with codes [N, K]
  // and scales f32 [ceil(N/128), ceil(K/128)] (read-only views of the mapped
  // checkpoint, kept alive by them). nullopt when the tensor is stored otherwise, in
  // other blocks, or only as a cut of a fused tensor (get_native then dequantizes).
  // The default: nullopt.
  virtual Expected<std::optional<Matrix>> get_fp8(const std::string& /*canonical_name*/,
                                                  const Shape& /*expected_shape*/) const {
    return std::optional<Matrix>();
  }
  virtual bool has(const std::string& canonical_name) const = 0;
  // The shape get_f32 would return, without reading or converting the data
  // (validate_checkpoint uses it). The default loads the tensor.
  virtual Expected<Shape> shape(const std::string& canonical_name) const {
    Expected<Tensor> t = get_f32(canonical_name);
    if (!t.has_value()) return t.status();
    return t->shape();
  }
  // Checkpoint tensors that no canonical name accounts for (reported, not fatal).
  virtual std::vector<std::string> unknown_tensors() const = 0;
  // A projection stored EXL3-quantized (the routed experts of an EXL3 checkpoint,
  // model/exl3_weights.h) as owning host tensors, for a layer of in_features ->
  // out_features (unpadded); nullopt when `canonical_name` (a ".weight") is stored
  // unquantized. get_f32 / get_native give an EXL3-stored linear dequantized (f32
  // [out, in]); shape and has see them.
  virtual Expected<std::optional<Exl3Weight>> get_exl3(const std::string& /*canonical_name*/,
                                                       int64_t /*in_features*/, int64_t /*out_features*/) const {
    return std::optional<Exl3Weight>();
  }
};

// Opens the weights of a checkpoint folder for `config`.
Expected<std::unique_ptr<WeightSource>> open_weight_source(const std::string& dir, const Glm5Config& config);

}  // namespace tf
