// CheckpointWeightSource: WeightSource over a safetensors checkpoint folder.
//
// A canonical name resolves to the first of its aliases (weight_names.h) that
// the checkpoint holds: the canonical spelling, transformers' module names, the
// flat "model." prefix, or a slice of a fused tensor (expert gate/up/down,
// q/k/v conv). FP8 tensors are dequantized with their block-scale companion
// (fp8_block_dequant.h); only the requested rows of a fused tensor are read,
// so one expert of the real 288-expert layer costs one expert's work. At open,
// every name of glm5_weight_spec() is resolved once to find the checkpoint
// tensors that nothing accounts for (unknown_tensors(), reported not fatal).
// After open, lookups keep no state: get_f32 / get_native / shape / has may run on
// several threads at once. get_f32 hands out owning, packed f32 host copies;
// get_native hands out packed read-only views of the mapping for f32/bf16/f16
// tensors (a slice of a fused tensor is a contiguous row range, still a view).
// EXL3 checkpoints (quantization_config.quant_method "exl3", exl3_weights.h): a
// canonical ".weight" with no tensor of its own but a "<prefix>.trellis" is stored
// EXL3; has() and shape() see it (shape = the spec's when the stored dims are the
// spec's padded to 128), get_exl3() loads it, and get_f32() / get_native() hand out
// the dense weight it stands for (the format's reference dequantization,
// kernels/api/exl3_decode.h: the loader keeps EXL3 only for the routed experts).
#include "model/weight_source.h"

#include <map>
#include <optional>
#include <set>

#include "core/logging.h"
#include "kernels/api/exl3_decode.h"
#include "model/exl3_weights.h"
#include "model/finite_values.h"
#include "model/fp8_block_dequant.h"
#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"

namespace tf {
namespace {

bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

// Unquantized tensors up to this many elements are checked for inf / NaN as they load (the router of
// 288 experts x 4096 is 1.2 M).
constexpr int64_t kFiniteCheckElements = int64_t{4} << 20;

class CheckpointWeightSource : public WeightSource {
 public:
  CheckpointWeightSource(std::unique_ptr<Checkpoint> ckpt, const Glm5Config& config,
                         std::optional<Exl3QuantConfig> exl3)
      : ckpt_(std::move(ckpt)), tie_(config.text.tie_word_embeddings), exl3_(std::move(exl3)) {
    if (config.quantization.weight_block_size.size() == 2) {
      block_ = {config.quantization.weight_block_size[0], config.quantization.weight_block_size[1]};
    }
    std::set<std::string> used, exl3_prefixes;
    std::vector<WeightSpecEntry> spec = glm5_weight_spec(config);
    if (tie_) spec.push_back({"lm_head.weight", {}});  // an untied copy on disk is used, not unknown
    std::vector<WeightAlias> aliases;
    for (const WeightSpecEntry& e : spec) {
      spec_names_.insert(e.name);
      const WeightAlias* a = resolve(e.name, &aliases);
      if (a == nullptr) {
        const std::string p = exl3_prefix(e.name);
        if (p.empty()) continue;
        exl3_spec_shapes_[e.name] = e.shape;
        exl3_prefixes.insert(p);
        for (const char* s : {"trellis", "suh", "svh", "su", "sv", "bias", "mcg", "mul1"}) used.insert(p + "." + s);
        continue;
      }
      used.insert(a->name);
      for (const std::string& s : fp8_scale_names(a->name)) used.insert(s);
    }
    for (const std::string& n : ckpt_->names()) {
      if (!used.count(n)) unknown_.push_back(n);
    }
    // Unlike other unknown tensors, an unknown companion of an EXL3 linear (e.g. a
    // codebook marker we do not know) could change how it decodes: refused at open.
    for (const std::string& n : unknown_) {
      if (!exl3_ || !exl3_error_.is_ok()) break;
      const size_t dot = n.rfind('.');
      const std::string stem = dot == std::string::npos ? std::string() : n.substr(0, dot);
      if (exl3_prefixes.count(stem)) {
        exl3_error_ = invalid_argument(ckpt_->file_of(n) + ": tensor '" + n + "': unknown companion of the EXL3 linear '" +
                                       stem + "' (an unknown codebook marker?)");
      } else if (n.size() > 8 && n.compare(n.size() - 8, 8, ".trellis") == 0) {
        exl3_error_ = invalid_argument(ckpt_->file_of(n) + ": tensor '" + n + "' " + kExl3UnusedTrellis);
      }
    }
  }

  // Set when the checkpoint holds EXL3 tensors we cannot serve (open fails with it).
  const Status& exl3_error() const { return exl3_error_; }

  Expected<Tensor> get_f32(const std::string& canonical_name, const Shape& expected_shape) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr) {
      if (const std::string p = exl3_prefix(canonical_name); !p.empty()) {
        TF_ASSIGN_OR_RETURN(Tensor t, exl3_dense(canonical_name, p));
        if (!expected_shape.empty() && t.shape() != expected_shape) {
          return invalid_argument(ckpt_->file_of(p + ".trellis") + ": EXL3 linear '" + p + "' is " +
                                  shape_to_string(t.shape()) + " (out x in), expected " + shape_to_string(expected_shape));
        }
        return t;
      }
      return missing(canonical_name, aliases);
    }
    TF_ASSIGN_OR_RETURN(Tensor t, load(canonical_name, *a));
    if (!expected_shape.empty() && t.shape() != expected_shape) return mis_shaped(canonical_name, *a, t.shape(), expected_shape);
    return t;
  }

  Expected<Tensor> get_native(const std::string& canonical_name, const Shape& expected_shape) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr) return get_f32(canonical_name, expected_shape);  // its error
    TF_ASSIGN_OR_RETURN(Tensor t, load(canonical_name, *a, /*native=*/true));
    if (!expected_shape.empty() && t.shape() != expected_shape) return mis_shaped(canonical_name, *a, t.shape(), expected_shape);
    return t;
  }

  Expected<std::optional<Matrix>> get_fp8(const std::string& canonical_name,
                                          const Shape& expected_shape) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr || a->parts > 1 || block_ != std::array<int64_t, 2>{kFp8BlockSize, kFp8BlockSize})
      return std::optional<Matrix>();
    const TensorEntry* e = ckpt_->find(a->name);
    if (e == nullptr || e->dtype != DType::kF8E4M3) return std::optional<Matrix>();
    const std::optional<std::string> scale_name = stored_scale_name(a->name);
    if (!scale_name) return std::optional<Matrix>();  // get_native names the missing scales
    TF_ASSIGN_OR_RETURN(Tensor codes, ckpt_->tensor(a->name));
    TF_ASSIGN_OR_RETURN(Tensor scales, ckpt_->tensor(*scale_name));
    if (a->select >= 0) {
      if (codes.dim() != 3 || scales.dim() != 3 || a->select >= codes.size(0) || scales.size(0) != codes.size(0))
        return std::optional<Matrix>();
      codes = codes.select(0, a->select);
      scales = scales.select(0, a->select);
    }
    if (codes.dim() != 2 || (!expected_shape.empty() && codes.shape() != expected_shape))
      return std::optional<Matrix>();  // get_native reports the shape
    if (!dtype_is_float(scales.dtype()))
      return invalid_argument(ckpt_->file_of(*scale_name) + ": scale grid '" + *scale_name + "' has dtype " +
                              dtype_name(scales.dtype()) + ", expected f32/bf16/f16");
    if (scales.dtype() != DType::kF32) scales = scales.to_f32();
    TF_RETURN_IF_ERROR(
        check_finite_values(scales, ckpt_->file_of(*scale_name) + ": scale grid '" + *scale_name + "'"));
    Matrix m = Matrix::fp8_block(codes.is_contiguous() ? codes : codes.contiguous(),
                                 scales.is_contiguous() ? scales : scales.contiguous());
    const Status st = check_matrix(m, ckpt_->file_of(a->name) + ": tensor '" + a->name + "'");
    if (!st.is_ok()) return st;
    return std::optional<Matrix>(std::move(m));
  }

  Expected<Shape> shape(const std::string& canonical_name) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr) {
      if (const std::string p = exl3_prefix(canonical_name); !p.empty()) return exl3_shape(canonical_name, p);
      return missing(canonical_name, aliases);
    }
    const TensorEntry* e = ckpt_->find(a->name);
    Shape s;
    TF_RETURN_IF_ERROR(slice_shape(canonical_name, *a, e->shape, &s));
    return s;
  }

  bool has(const std::string& canonical_name) const override {
    std::vector<WeightAlias> aliases;
    return resolve(canonical_name, &aliases) != nullptr || !exl3_prefix(canonical_name).empty();
  }

  std::vector<std::string> unknown_tensors() const override { return unknown_; }

  Expected<std::optional<Exl3Weight>> get_exl3(const std::string& canonical_name, int64_t in_features,
                                               int64_t out_features) const override {
    std::vector<WeightAlias> aliases;
    const std::string p = exl3_prefix(canonical_name);
    if (p.empty() || resolve(canonical_name, &aliases) != nullptr) return std::optional<Exl3Weight>();
    TF_ASSIGN_OR_RETURN(Exl3Weight w, load_exl3_linear(*ckpt_, p, in_features, out_features, exl3_->codebook));
    // Owning copies: the weights outlive this source and its memory mapping.
    for (Tensor* t : {&w.trellis, &w.suh, &w.svh, &w.bias}) {
      if (t->is_null()) continue;
      Tensor copy = Tensor::empty(t->shape(), t->dtype());
      copy.copy_from(*t);
      *t = std::move(copy);
    }
    return std::optional<Exl3Weight>(std::move(w));
  }

 private:
  // The checkpoint prefix of an EXL3-stored ".weight" (an alias spelling with a
  // ".trellis"), or "" when the checkpoint is not EXL3 or holds no such tensor.
  std::string exl3_prefix(const std::string& canonical) const {
    constexpr size_t kWeight = 7;  // ".weight"
    if (!exl3_ || canonical.size() < kWeight || canonical.compare(canonical.size() - kWeight, kWeight, ".weight") != 0)
      return "";
    for (const WeightAlias& a : weight_aliases(canonical, tie_)) {
      if (a.is_slice() || a.name.size() < kWeight) continue;
      const std::string p = a.name.substr(0, a.name.size() - kWeight);
      if (a.name.compare(p.size(), kWeight, ".weight") == 0 && ckpt_->has(p + ".trellis")) return p;
    }
    return "";
  }

  // An EXL3-stored linear as the dense f32 [out, in] it stands for (exl3_dequantize_linear:
  // the format's reference W, padding dropped, in Hugging Face's orientation). The bias is
  // not part of it (see below).
  Expected<Tensor> exl3_dense(const std::string& canonical, const std::string& p) const {
    // The model's shape when it names one (a trellis that does not fit it is refused as
    // mis-shaped), else the stored one.
    auto spec = exl3_spec_shapes_.find(canonical);
    Shape s;
    if (spec != exl3_spec_shapes_.end() && spec->second.size() == 2) {
      s = spec->second;
    } else {
      TF_ASSIGN_OR_RETURN(s, exl3_shape(canonical, p));
    }
    const int64_t out = s[0], in = s[1];
    TF_ASSIGN_OR_RETURN(Exl3Weight w, load_exl3_linear(*ckpt_, p, in, out, exl3_->codebook));
    // Its bias, stored as P.bias, is the model's own bias tensor when the model's linear
    // takes one (read under that name); else it would be dropped: refused.
    const std::string bias_name = canonical.substr(0, canonical.size() - 7) + ".bias";
    if (!w.bias.is_null() && !spec_names_.count(bias_name)) {
      return unimplemented(ckpt_->file_of(p + ".bias") + ": tensor '" + p + ".bias': the EXL3 linear '" + p +
                           "' has a bias, which the model's '" + canonical + "' does not take");
    }
    try {
      return exl3_dequantize_linear(w, in, out, p);
    } catch (const StatusError& e) {
      return e.status();
    }
  }

  // Hugging Face orientation [out, in] of an EXL3 tensor: the spec's shape when the
  // stored (padded) dims fit it, else the stored dims.
  Expected<Shape> exl3_shape(const std::string& canonical, const std::string& p) const {
    const TensorEntry* t = ckpt_->find(p + ".trellis");
    if (t->shape.size() != 3) {
      return invalid_argument(ckpt_->file_of(p + ".trellis") + ": tensor '" + p + ".trellis' has shape " +
                              shape_to_string(t->shape) + ", expected [in/16, out/16, 16*K]");
    }
    const Shape stored = {t->shape[1] * 16, t->shape[0] * 16};
    auto it = exl3_spec_shapes_.find(canonical);
    if (it != exl3_spec_shapes_.end() && it->second.size() == 2) {
      const auto pad = [](int64_t v) { return (v + 127) / 128 * 128; };
      if (pad(it->second[0]) == stored[0] && pad(it->second[1]) == stored[1]) return it->second;
    }
    return stored;
  }

  // The block-scale tensor of FP8 weight `name` the checkpoint holds (fp8_scale_names'
  // spellings, first found), or nullopt.
  std::optional<std::string> stored_scale_name(const std::string& name) const {
    for (const std::string& n : fp8_scale_names(name))
      if (ckpt_->has(n)) return n;
    return std::nullopt;
  }

  // The first alias the checkpoint holds (pointer into *aliases), or null.
  const WeightAlias* resolve(const std::string& canonical, std::vector<WeightAlias>* aliases) const {
    *aliases = weight_aliases(canonical, tie_);
    for (const WeightAlias& a : *aliases) {
      if (ckpt_->has(a.name)) return &a;
    }
    return nullptr;
  }

  Status missing(const std::string& canonical, const std::vector<WeightAlias>& aliases) const {
    std::string tried;
    for (size_t i = 1; i < aliases.size(); ++i) tried += (tried.empty() ? "" : ", ") + aliases[i].describe();
    return not_found(ckpt_->dir() + ": tensor '" + canonical + "' not found" +
                     (tried.empty() ? std::string() : " (also tried " + tried + ")"));
  }

  Status mis_shaped(const std::string& canonical, const WeightAlias& a, const Shape& got, const Shape& want) const {
    std::string from = a.name == canonical && !a.is_slice() ? std::string() : " (from " + a.describe() + ")";
    return invalid_argument(ckpt_->file_of(a.name) + ": tensor '" + canonical + "'" + from + " has shape " +
                            shape_to_string(got) + " but " + shape_to_string(want) + " was expected");
  }

  // Shape after the alias' select/split; an error when the stored tensor cannot be cut that way.
  Status slice_shape(const std::string& canonical, const WeightAlias& a, const Shape& stored, Shape* out) const {
    Shape s = stored;
    auto bad = [&](const std::string& why) {
      return invalid_argument(ckpt_->file_of(a.name) + ": tensor '" + canonical + "' comes from " + a.describe() +
                              ", but that tensor has shape " + shape_to_string(stored) + " (" + why + ")");
    };
    if (a.select >= 0) {
      if (s.empty() || a.select >= s[0]) return bad("no index " + std::to_string(a.select) + " in dim 0");
      s.erase(s.begin());
    }
    if (a.parts > 1) {
      if (s.empty() || s[0] % a.parts != 0) return bad("dim 0 does not split into " + std::to_string(a.parts));
      s[0] /= a.parts;
    }
    *out = std::move(s);
    return Status::ok();
  }

  // `native`: f32/bf16/f16 tensors as stored (a view when packed), else converted to f32.
  Expected<Tensor> load(const std::string& canonical, const WeightAlias& a, bool native = false) const {
    TF_ASSIGN_OR_RETURN(Tensor raw, ckpt_->tensor(a.name));
    Shape cut;
    TF_RETURN_IF_ERROR(slice_shape(canonical, a, raw.shape(), &cut));
    Tensor t = a.select >= 0 ? raw.select(0, a.select) : raw;
    const int64_t rows = a.parts > 1 ? cut[0] : (t.dim() > 0 ? t.size(0) : 0);
    const int64_t r0 = a.parts > 1 ? a.part * rows : 0;
    if (!is_fp8(t.dtype())) {
      if (a.parts > 1) t = t.slice(0, r0, r0 + rows);
      if (!dtype_is_float(t.dtype())) {
        return invalid_argument(ckpt_->file_of(a.name) + ": tensor '" + a.name + "' has dtype " +
                                dtype_name(t.dtype()) + ", expected a floating-point weight");
      }
      // The small tensors (norms, biases, gates, KDA decay parameters, conv taps, routers) feed every
      // token, so one inf / NaN in them fails every reply: checked here, at a negligible cost. The large
      // matrices are checked where they are re-quantized (DENSE=q4 / fp8), not here (a full scan of
      // ~30 GB would add to the start).
      if (t.numel() <= kFiniteCheckElements) {
        TF_RETURN_IF_ERROR(check_finite_values(t, ckpt_->file_of(a.name) + ": tensor '" + a.name + "'"));
      }
      const bool keep = t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
      if (native && keep) return t.is_contiguous() ? t : t.contiguous();
      return t.to_f32();
    }
    // FP8: find the block scales of the stored tensor.
    const std::optional<std::string> scale_name = stored_scale_name(a.name);
    if (!scale_name) {
      return not_found(ckpt_->file_of(a.name) + ": FP8 tensor '" + a.name + "' has no block-scale tensor '" +
                       fp8_scale_names(a.name)[0] + "'");
    }
    TF_ASSIGN_OR_RETURN(Tensor scale, ckpt_->tensor(*scale_name));
    const std::string what = ckpt_->file_of(a.name) + ": tensor '" + a.name + "'";
    if (a.select >= 0) {
      if (scale.dim() != raw.dim() || scale.size(0) != raw.size(0)) {
        return invalid_argument(what + ": scale grid '" + *scale_name + "' " + shape_to_string(scale.shape()) +
                                " does not match the weight " + shape_to_string(raw.shape()));
      }
      scale = scale.select(0, a.select);
    }
    if (t.dim() == 2) {
      TF_ASSIGN_OR_RETURN(Tensor out, dequantize_fp8_block_rows(t, scale, block_, r0, r0 + rows, what));
      return out;
    }
    if (a.parts > 1) {
      return unimplemented(what + ": slicing a " + std::to_string(t.dim()) + "-D FP8 tensor");
    }
    return dequantize_fp8_block(t, scale, block_, what);
  }

  std::unique_ptr<Checkpoint> ckpt_;
  bool tie_ = false;
  std::array<int64_t, 2> block_ = {128, 128};
  std::vector<std::string> unknown_;
  std::optional<Exl3QuantConfig> exl3_;             // set for EXL3 checkpoints
  std::map<std::string, Shape> exl3_spec_shapes_;   // canonical -> spec shape, EXL3-stored tensors
  std::set<std::string> spec_names_;                // every canonical name of the model
  Status exl3_error_;
};

}  // namespace

Expected<std::unique_ptr<WeightSource>> open_weight_source(const std::string& dir, const Glm5Config& config) {
  std::optional<Exl3QuantConfig> exl3;
  if (config.quantization.method == "exl3") {
    // An EXL3 checkpoint we cannot serve is refused here, naming the config field.
    TF_ASSIGN_OR_RETURN(Exl3QuantConfig q, parse_exl3_quant_config(config.quantization, dir + "/config.json"));
    exl3 = std::move(q);
  }
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::open(dir));
  auto source = std::make_unique<CheckpointWeightSource>(std::move(ckpt), config, std::move(exl3));
  TF_RETURN_IF_ERROR(source->exl3_error());
  if (!source->unknown_tensors().empty()) {
    TF_LOG_WARN("{}: {} tensor(s) not used by the glm5_next model, e.g. '{}'", dir,
                source->unknown_tensors().size(), source->unknown_tensors().front());
  }
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace tf
