// The GLM-5.3-Flash vision tower (see glm5_vision.h for the data flow). Reference:
// transformers 5.17 modeling_glm5_next.py (Glm5NextVision*), vision_utils.py
// (get_vision_position_ids, get_vision_cu_seqlens).
#include "model/glm5/glm5_vision.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "model/glm5/glm5_upload.h"

namespace tf {
namespace {

const char kPrefix[] = "model.visual.";

// Row-wise stages run over at most this many rows at a time, so that the widest
// intermediate (the MLP's gate_up, 2I columns) stays bounded whatever N is.
constexpr int64_t kRowChunk = 4096;

void for_row_chunks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  for (int64_t r0 = 0; r0 < n; r0 += kRowChunk) fn(r0, std::min(n, r0 + kRowChunk));
}

// Reads the tower's tensors as host tensors (f32; matrices in the weight dtype).
class VisionLoader {
 public:
  VisionLoader(const WeightSource& src, DType matrix_dtype) : src_(src), matrix_dtype_(matrix_dtype) {}

  Expected<Tensor> vec(const std::string& name, int64_t n) const { return src_.get_f32(kPrefix + name, {n}); }
  Expected<Tensor> f32(const std::string& name, const Shape& shape) const {
    return src_.get_f32(kPrefix + name, shape);
  }
  Expected<Tensor> mat(const std::string& name, const Shape& shape) const {
    TF_ASSIGN_OR_RETURN(Tensor t, src_.get_f32(kPrefix + name, shape));
    return in_matrix_dtype(t);
  }
  // Tensors of shape `each` stacked along dim 0 (gate rows, then up rows); a matrix
  // comes in the weight dtype, anything else in f32.
  Expected<Tensor> stacked(const std::vector<std::string>& names, const Shape& each, bool matrix) const {
    Shape shape = each;
    shape[0] *= static_cast<int64_t>(names.size());
    Tensor out = Tensor::empty(shape, DType::kF32);
    const int64_t part = shape_numel(each);
    for (size_t i = 0; i < names.size(); ++i) {
      TF_ASSIGN_OR_RETURN(Tensor t, src_.get_f32(kPrefix + names[i], each));
      std::memcpy(out.data<float>() + static_cast<int64_t>(i) * part, t.data<float>(),
                  static_cast<size_t>(part) * sizeof(float));
    }
    return matrix ? in_matrix_dtype(out) : out;
  }

  Tensor in_matrix_dtype(const Tensor& t) const {
    return t.dtype() == matrix_dtype_ ? t : t.to_dtype(matrix_dtype_);
  }

 private:
  const WeightSource& src_;
  DType matrix_dtype_;
};

Expected<Glm5VisionWeights> read_weights(const Glm5VisionConfig& v, const VisionLoader& ld) {
  const int64_t c = v.hidden_size, hd = v.hidden_size / v.num_heads, i = v.intermediate_size;
  const int64_t o = v.out_hidden_size, ip = v.projection_intermediate_size, m = v.spatial_merge_size;
  const int64_t in =
      static_cast<int64_t>(v.in_channels) * v.temporal_patch_size * v.patch_size * v.patch_size;
  Glm5VisionWeights w;
  {
    TF_ASSIGN_OR_RETURN(Tensor pe, ld.mat("patch_embed.proj.weight", {c, v.in_channels, v.temporal_patch_size,
                                                                      v.patch_size, v.patch_size}));
    w.patch_embed = pe.reshape({c, in});  // the Conv3d's (c, t, y, x) taps = the patch's flattening
  }
  TF_ASSIGN_OR_RETURN(w.patch_bias, ld.vec("patch_embed.proj.bias", c));
  for (int b = 0; b < v.depth; ++b) {
    const std::string p = "blocks." + std::to_string(b) + ".";
    VisionBlockWeights bw;
    TF_ASSIGN_OR_RETURN(bw.norm1, ld.vec(p + "norm1.weight", c));
    TF_ASSIGN_OR_RETURN(bw.norm2, ld.vec(p + "norm2.weight", c));
    TF_ASSIGN_OR_RETURN(bw.qkv, ld.mat(p + "attn.qkv.weight", {3 * c, c}));
    TF_ASSIGN_OR_RETURN(bw.proj, ld.mat(p + "attn.proj.weight", {c, c}));
    TF_ASSIGN_OR_RETURN(bw.q_norm, ld.vec(p + "attn.q_norm.weight", hd));
    TF_ASSIGN_OR_RETURN(bw.k_norm, ld.vec(p + "attn.k_norm.weight", hd));
    TF_ASSIGN_OR_RETURN(bw.gate_up,
                        ld.stacked({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {i, c}, true));
    TF_ASSIGN_OR_RETURN(bw.down, ld.mat(p + "mlp.down_proj.weight", {c, i}));
    // attention_bias covers qkv, proj and the block MLP (Glm5NextVisionMLP(config, bias=attention_bias)).
    if (v.attention_bias) {
      TF_ASSIGN_OR_RETURN(bw.qkv_bias, ld.vec(p + "attn.qkv.bias", 3 * c));
      TF_ASSIGN_OR_RETURN(bw.proj_bias, ld.vec(p + "attn.proj.bias", c));
      TF_ASSIGN_OR_RETURN(bw.gate_up_bias,
                          ld.stacked({p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"}, {i}, false));
      TF_ASSIGN_OR_RETURN(bw.down_bias, ld.vec(p + "mlp.down_proj.bias", c));
    }
    w.blocks.push_back(std::move(bw));
  }
  TF_ASSIGN_OR_RETURN(w.post_norm, ld.vec("post_layernorm.weight", c));
  TF_ASSIGN_OR_RETURN(w.downsample_bias, ld.vec("downsample.bias", o));
  {
    // Conv2d [o, c, kh, kw] -> a linear over the m·m rows of a merge block laid side by
    // side: column (kh·m + kw)·C + c.
    TF_ASSIGN_OR_RETURN(Tensor conv, ld.f32("downsample.weight", {o, c, m, m}));
    Tensor lin = Tensor::empty({o, m * m * c}, DType::kF32);
    const float* s = conv.data<float>();
    float* d = lin.data<float>();
    for (int64_t r = 0; r < o; ++r)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < m * m; ++j) d[(r * m * m + j) * c + ch] = s[(r * c + ch) * m * m + j];
    w.downsample = ld.in_matrix_dtype(lin);
  }
  TF_ASSIGN_OR_RETURN(w.merger_proj, ld.mat("merger.proj.weight", {o, o}));
  TF_ASSIGN_OR_RETURN(w.merger_norm_w, ld.vec("merger.post_projection_norm.weight", o));
  TF_ASSIGN_OR_RETURN(w.merger_norm_b, ld.vec("merger.post_projection_norm.bias", o));
  TF_ASSIGN_OR_RETURN(w.merger_gate_up,
                      ld.stacked({"merger.gate_proj.weight", "merger.up_proj.weight"}, {ip, o}, true));
  TF_ASSIGN_OR_RETURN(w.merger_down, ld.mat("merger.down_proj.weight", {o, ip}));
  return w;
}

}  // namespace

void vision_rope_tables(std::span<const VisionGrid> grids, int64_t merge, int64_t head_dim, double theta,
                        Tensor* cos, Tensor* sin) {
  // As Glm5NextVisionRotaryEmbedding, in f32: inv_freq = 1 / theta^(arange(0, hd/2, 2) / (hd/2)),
  // freqs = position · inv_freq, then [h ; w ; h ; w].
  const int64_t spatial = head_dim / 2, nf = head_dim / 4;
  std::vector<float> inv_freq(static_cast<size_t>(nf));
  for (int64_t i = 0; i < nf; ++i)
    inv_freq[i] =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(spatial));
  int64_t n = 0;
  for (const VisionGrid& g : grids) n += g.t * g.h * g.w;
  *cos = Tensor::empty({n, head_dim}, DType::kF32);
  *sin = Tensor::empty({n, head_dim}, DType::kF32);
  float* cp = cos->data<float>();
  float* sp = sin->data<float>();
  int64_t row = 0;
  for (const VisionGrid& g : grids) {
    for (int64_t f = 0; f < g.t; ++f) {
      // Merge-block order: blocks in raster order, then the m x m patches of a block in raster order.
      for (int64_t bh = 0; bh < g.h / merge; ++bh)
        for (int64_t bw = 0; bw < g.w / merge; ++bw)
          for (int64_t ih = 0; ih < merge; ++ih)
            for (int64_t iw = 0; iw < merge; ++iw, ++row) {
              const float pos[2] = {static_cast<float>(bh * merge + ih), static_cast<float>(bw * merge + iw)};
              float* c = cp + row * head_dim;
              float* s = sp + row * head_dim;
              for (int axis = 0; axis < 2; ++axis)
                for (int64_t i = 0; i < nf; ++i) {
                  const float a = pos[axis] * inv_freq[i];
                  const float ca = std::cos(a), sa = std::sin(a);
                  const int64_t col = axis * nf + i;
                  c[col] = c[col + spatial] = ca;
                  s[col] = s[col + spatial] = sa;
                }
            }
    }
  }
}

int64_t Glm5VisionTower::patch_width() const {
  return static_cast<int64_t>(cfg_.in_channels) * cfg_.temporal_patch_size * cfg_.patch_size *
         cfg_.patch_size;
}

Expected<std::unique_ptr<Glm5VisionTower>> Glm5VisionTower::load(const Glm5Config& cfg,
                                                                 const WeightSource& weights, Ops& ops,
                                                                 DType weight_dtype) {
  const Glm5VisionConfig& v = cfg.vision;
  if (!v.present)
    return not_found("no vision tower: the config has no vision_config (a flat text-only checkpoint)");
  if (v.hidden_act != "silu")
    return unimplemented("vision tower: hidden_act '" + v.hidden_act + "' (only silu is supported)");
  if (v.depth < 0 || v.hidden_size <= 0 || v.num_heads <= 0 || v.hidden_size % v.num_heads != 0 ||
      (v.hidden_size / v.num_heads) % 4 != 0)
    return invalid_argument("vision tower: hidden_size " + std::to_string(v.hidden_size) + " over " +
                            std::to_string(v.num_heads) +
                            " heads (the axial RoPE needs a head_dim divisible by 4)");
  if (v.spatial_merge_size <= 0 || v.out_hidden_size <= 0 || v.intermediate_size <= 0 ||
      v.projection_intermediate_size <= 0 || v.in_channels <= 0 || v.patch_size <= 0 ||
      v.temporal_patch_size <= 0)
    return invalid_argument("vision tower: non-positive sizes in vision_config");
  if (weight_dtype != DType::kF32 && weight_dtype != DType::kBF16)
    return invalid_argument(std::string("vision tower: weight matrices in ") + dtype_name(weight_dtype) +
                            " (expected f32 or bf16)");
  const Device device = ops_device(ops);
  if (weight_dtype != DType::kF32 && device.is_cpu())
    return invalid_argument(std::string("vision tower: weight matrices in ") + dtype_name(weight_dtype) +
                            ": the CPU backend computes with f32 weights");
  std::unique_ptr<Glm5VisionTower> tower(new Glm5VisionTower(v, ops));
  TF_ASSIGN_OR_RETURN(tower->w_, read_weights(v, VisionLoader(weights, weight_dtype)));
  // Everything to the backend's device once (a no-op on the CPU backend).
  Glm5VisionWeights& w = tower->w_;
  std::vector<Tensor*> all = {&w.patch_embed,     &w.patch_bias,  &w.post_norm,     &w.downsample,
                              &w.downsample_bias, &w.merger_proj, &w.merger_norm_w, &w.merger_norm_b,
                              &w.merger_gate_up,  &w.merger_down};
  for (VisionBlockWeights& b : w.blocks)
    for (Tensor* t : {&b.norm1, &b.norm2, &b.qkv, &b.qkv_bias, &b.q_norm, &b.k_norm, &b.proj, &b.proj_bias,
                      &b.gate_up, &b.gate_up_bias, &b.down, &b.down_bias})
      all.push_back(t);
  try {
    for (Tensor* t : all) *t = to_ops_device(ops, device, *t);
  } catch (const StatusError& e) {
    return e.status().with_context("uploading the vision tower");
  }
  return tower;
}

void Glm5VisionTower::block_forward(const VisionBlockWeights& w, Tensor& x, const Tensor& cos,
                                    const Tensor& sin, const Tensor& offsets) {
  const int64_t n = x.size(0), c = cfg_.hidden_size, heads = cfg_.num_heads, hd = c / heads;
  const float eps = static_cast<float>(cfg_.rms_norm_eps), limit = static_cast<float>(cfg_.swiglu_limit);
  // Attention: q, k, v [N, H, hd] for the whole input (segments span chunks).
  Tensor q = ops_.empty({n, heads, hd}), k = ops_.empty({n, heads, hd}), v = ops_.empty({n, heads, hd});
  for_row_chunks(n, [&](int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    Tensor hn = ops_.empty({rows, c});
    ops_.rms_norm(hn, x.slice(0, r0, r1), w.norm1, eps);
    Tensor qkv = ops_.empty({rows, 3 * c});
    ops_.matmul(qkv, hn, w.qkv);
    if (!w.qkv_bias.is_null()) ops_.add_bias(qkv, qkv, w.qkv_bias);
    Tensor* parts[3] = {&q, &k, &v};
    for (int p = 0; p < 3; ++p) {
      Tensor dst = parts[p]->slice(0, r0, r1).reshape({rows, c});
      ops_.copy(dst, qkv.slice(1, p * c, (p + 1) * c));
    }
  });
  // Per-head RMSNorm of q and k (over hd), then the rotary embedding, in place.
  {
    Tensor qn = ops_.empty({n, heads, hd});
    ops_.rms_norm(qn, q, w.q_norm, eps);
    q = qn;
    Tensor kn = ops_.empty({n, heads, hd});
    ops_.rms_norm(kn, k, w.k_norm, eps);
    k = kn;
  }
  ops_.rotary(q, q, cos, sin);
  ops_.rotary(k, k, cos, sin);
  Tensor att = ops_.empty({n, heads, hd});
  ops_.segment_attention(att, q, k, v, offsets, 1.0f / std::sqrt(static_cast<float>(hd)));
  q = k = v = Tensor();
  // proj + residual, then the MLP + residual, chunk by chunk.
  const Tensor att2 = att.reshape({n, c});
  const int64_t inter = w.down.size(1);
  for_row_chunks(n, [&](int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    Tensor xs = x.slice(0, r0, r1);
    Tensor y = ops_.empty({rows, c});
    ops_.matmul(y, att2.slice(0, r0, r1), w.proj);
    if (!w.proj_bias.is_null()) ops_.add_bias(y, y, w.proj_bias);
    ops_.add(xs, xs, y);
    Tensor hn = ops_.empty({rows, c});
    ops_.rms_norm(hn, xs, w.norm2, eps);
    Tensor gu = ops_.empty({rows, 2 * inter});
    ops_.matmul(gu, hn, w.gate_up);
    if (!w.gate_up_bias.is_null()) ops_.add_bias(gu, gu, w.gate_up_bias);
    Tensor a = ops_.empty({rows, inter});
    ops_.swiglu(a, gu, limit);
    ops_.matmul(y, a, w.down);
    if (!w.down_bias.is_null()) ops_.add_bias(y, y, w.down_bias);
    ops_.add(xs, xs, y);
  });
}

Tensor Glm5VisionTower::merge_and_project(const Tensor& x) {
  const int64_t c = cfg_.hidden_size, mm = int64_t{cfg_.spatial_merge_size} * cfg_.spatial_merge_size;
  const int64_t nm = x.size(0) / mm, o = cfg_.out_hidden_size, ip = cfg_.projection_intermediate_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps), limit = static_cast<float>(cfg_.swiglu_limit);
  Tensor out = ops_.empty({nm, o});
  for_row_chunks(nm, [&](int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    Tensor pn = ops_.empty({rows * mm, c});
    ops_.rms_norm(pn, x.slice(0, r0 * mm, r1 * mm), w_.post_norm, eps);
    Tensor ds = ops_.empty({rows, o});
    ops_.matmul(ds, pn.reshape({rows, mm * c}), w_.downsample);
    ops_.add_bias(ds, ds, w_.downsample_bias);
    Tensor p = ops_.empty({rows, o});
    ops_.matmul(p, ds, w_.merger_proj);
    ops_.layer_norm(ds, p, w_.merger_norm_w, w_.merger_norm_b, 1e-5f);  // nn.LayerNorm's default eps
    ops_.gelu(ds, ds);
    Tensor gu = ops_.empty({rows, 2 * ip});
    ops_.matmul(gu, ds, w_.merger_gate_up);
    Tensor a = ops_.empty({rows, ip});
    ops_.swiglu(a, gu, limit);
    Tensor dst = out.slice(0, r0, r1);
    ops_.matmul(dst, a, w_.merger_down);
  });
  return out;
}

Expected<Tensor> Glm5VisionTower::encode(const Tensor& patches, std::span<const VisionGrid> grids) {
  const int64_t m = cfg_.spatial_merge_size, pw = patch_width();
  std::vector<int32_t> offsets = {0};
  int64_t n = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % m != 0 || g.w % m != 0)
      return invalid_argument("vision encode: grid " + std::to_string(i) + " (t " + std::to_string(g.t) +
                              ", h " + std::to_string(g.h) + ", w " + std::to_string(g.w) +
                              "): sizes must be positive, h and w multiples of the merge size " +
                              std::to_string(m));
    for (int64_t f = 0; f < g.t; ++f) {
      n += g.h * g.w;
      if (n > std::numeric_limits<int32_t>::max())
        return invalid_argument("vision encode: more than 2^31 - 1 patches in one call");
      offsets.push_back(static_cast<int32_t>(n));
    }
  }
  if (patches.dtype() != DType::kF32 || patches.dim() != 2 || patches.size(0) != n || patches.size(1) != pw)
    return invalid_argument("vision encode: patches " + patches.describe() + ", expected f32 [" +
                            std::to_string(n) + ", " + std::to_string(pw) + "] for the grids given");
  const int64_t hd = cfg_.hidden_size / cfg_.num_heads;
  try {
    if (n == 0) return ops_.empty({0, out_hidden()});
    const Device device = ops_device(ops_);
    Tensor x = ops_.empty({n, cfg_.hidden_size});
    {
      // The patches' device copy (1176 floats a patch, more than a row of x) is freed before the
      // blocks run: the encode's working memory must fit in MEMORY_RESERVE_GIB.
      const Tensor in = to_ops_device(ops_, device, patches);
      for_row_chunks(n, [&](int64_t r0, int64_t r1) {
        Tensor xs = x.slice(0, r0, r1);
        ops_.matmul(xs, in.slice(0, r0, r1), w_.patch_embed);
        ops_.add_bias(xs, xs, w_.patch_bias);
      });
    }
    Tensor cos_h, sin_h;
    vision_rope_tables(grids, m, hd, cfg_.rope_theta, &cos_h, &sin_h);
    const Tensor cos = ops_.to_device(cos_h), sin = ops_.to_device(sin_h);
    Tensor off_h = Tensor::empty({static_cast<int64_t>(offsets.size())}, DType::kI32);
    std::memcpy(off_h.data<int32_t>(), offsets.data(), offsets.size() * sizeof(int32_t));
    const Tensor off = ops_.to_device(off_h);
    for (const VisionBlockWeights& b : w_.blocks) block_forward(b, x, cos, sin, off);
    return merge_and_project(x);
  } catch (const StatusError& e) {
    return e.status().with_context("vision encode");
  }
}

}  // namespace tf
