// Glm5VisionTower: GLM-5.3-Flash's ViT (transformers 5.17 Glm5NextVisionModel, spec
// glm5-flash.md §6.1) over the Ops interface: pixel patches in, one feature row per
// 2x2 merge block out (what fills the placeholder tokens of the text).
//
// Data flow of encode(patches [N, C_in·t_p·p·p], grids):
//   patch embed   linear (the Conv3d with kernel = stride flattened c, t, y, x) + bias -> x [N, C]
//   positions     per grid row (t, h, w): t temporal groups of h·w patches, each its own
//                 attention segment with the same (row, col) coordinates in merge-block
//                 order; cos/sin tables [N, hd] of the axial 2-D RoPE (host, f32)
//   depth blocks  x += proj(attn(rms1(x))), x += mlp(rms2(x)); attn: qkv + bias ->
//                 per-head RMSNorm of q and k -> rotary -> segment_attention (scale
//                 hd^-1/2); mlp: clamped SwiGLU with biases
//   post norm     RMSNorm
//   downsample    every m·m consecutive rows (one merge block, row j = kh·m + kw) as one
//                 row [m·m·C]: the Conv2d k = s = m is a linear over it + bias -> [N/m², D_o]
//   merger        proj -> LayerNorm -> GELU (erf) -> clamped SwiGLU (no biases) -> [N/m², D_o]
// Row-wise stages run in chunks of rows, and attention per segment without a score
// matrix (Ops::segment_attention), so memory grows linearly with N.
//
// Checkpoints: the tower's tensors are under `model.visual.` (glm5_weight_spec.cc
// lists them). A flat text-only checkpoint (no vision_config: Glm5VisionConfig::present
// false) has no tower: load() returns kNotFound ("no vision tower").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace tf {

// One image (t = 1) or video (t temporal groups) in patches; h and w are multiples of
// the spatial merge size.
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
};

struct VisionBlockWeights {
  Tensor norm1, norm2;           // [C]
  Tensor qkv, qkv_bias;          // [3C, C], [3C] (bias null without attention_bias)
  Tensor q_norm, k_norm;         // [hd]
  Tensor proj, proj_bias;        // [C, C], [C]
  Tensor gate_up, gate_up_bias;  // [2I, C] (gate rows, then up rows), [2I]
  Tensor down, down_bias;        // [C, I], [C]
};

// The tower's weights on the ops device: matrices (every matmul operand) in the
// weight dtype, norms and biases f32.
struct Glm5VisionWeights {
  Tensor patch_embed, patch_bias;  // [C, C_in·t_p·p·p], [C]
  std::vector<VisionBlockWeights> blocks;
  Tensor post_norm;  // [C]
  Tensor downsample,
      downsample_bias;  // [D_o, m·m·C] (column j·C + c = conv tap (kh, kw) = (j / m, j % m)), [D_o]
  Tensor merger_proj;   // [D_o, D_o]
  Tensor merger_norm_w, merger_norm_b;  // [D_o]
  Tensor merger_gate_up;                // [2·I_p, D_o]
  Tensor merger_down;                   // [D_o, I_p]
};

class Glm5VisionTower {
 public:
  // Reads `model.visual.*` through `weights` and uploads it to the ops device. Matrices
  // come in `weight_dtype` (f32; bf16 on a GPU backend, as the text model). Errors name
  // the tensor; kNotFound when the config has no vision tower.
  static Expected<std::unique_ptr<Glm5VisionTower>> load(const Glm5Config& cfg, const WeightSource& weights,
                                                         Ops& ops, DType weight_dtype = DType::kF32);

  // patches: f32 [sum(t·h·w), C_in·t_p·p·p] (host or the ops device) in merge-block
  // order, grid after grid; returns f32 [sum(t·h·w) / m², out_hidden()] on the ops
  // device, in the same order (one row per merge block).
  Expected<Tensor> encode(const Tensor& patches, std::span<const VisionGrid> grids);

  int64_t out_hidden() const { return cfg_.out_hidden_size; }
  int64_t patch_width() const;  // C_in·t_p·p·p (1176)
  const Glm5VisionConfig& config() const { return cfg_; }

 private:
  Glm5VisionTower(const Glm5VisionConfig& cfg, Ops& ops) : cfg_(cfg), ops_(ops) {}
  void block_forward(const VisionBlockWeights& w, Tensor& x, const Tensor& cos, const Tensor& sin,
                     const Tensor& offsets);
  Tensor merge_and_project(const Tensor& x);

  Glm5VisionConfig cfg_;
  Ops& ops_;
  Glm5VisionWeights w_;
};

// The axial 2-D RoPE tables of `grids` (host f32 [N, head_dim] each): patch coordinates
// in merge-block order per temporal group, angles [h·f ; w·f ; h·f ; w·f] with
// f_i = theta^(-2i / (head_dim/2)), i < head_dim/4 (exposed for tests).
void vision_rope_tables(std::span<const VisionGrid> grids, int64_t merge, int64_t head_dim, double theta,
                        Tensor* cos, Tensor* sin);

}  // namespace tf
