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
// After open, lookups keep no state: get_f32 / shape / has may run on several
// threads at once. Every tensor handed out is an owning, packed f32 host copy.
#include "model/weight_source.h"

#include <set>

#include "core/logging.h"
#include "model/fp8_block_dequant.h"
#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"

namespace tf {
namespace {

bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

class CheckpointWeightSource : public WeightSource {
 public:
  CheckpointWeightSource(std::unique_ptr<Checkpoint> ckpt, const Glm5Config& config)
      : ckpt_(std::move(ckpt)), tie_(config.text.tie_word_embeddings) {
    if (config.quantization.weight_block_size.size() == 2) {
      block_ = {config.quantization.weight_block_size[0], config.quantization.weight_block_size[1]};
    }
    std::set<std::string> used;
    std::vector<WeightSpecEntry> spec = glm5_weight_spec(config);
    if (tie_) spec.push_back({"lm_head.weight", {}});  // an untied copy on disk is used, not unknown
    std::vector<WeightAlias> aliases;
    for (const WeightSpecEntry& e : spec) {
      const WeightAlias* a = resolve(e.name, &aliases);
      if (a == nullptr) continue;
      used.insert(a->name);
      for (const std::string& s : fp8_scale_names(a->name)) used.insert(s);
    }
    for (const std::string& n : ckpt_->names()) {
      if (!used.count(n)) unknown_.push_back(n);
    }
  }

  Expected<Tensor> get_f32(const std::string& canonical_name, const Shape& expected_shape) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr) return missing(canonical_name, aliases);
    TF_ASSIGN_OR_RETURN(Tensor t, load(canonical_name, *a));
    if (!expected_shape.empty() && t.shape() != expected_shape) return mis_shaped(canonical_name, *a, t.shape(), expected_shape);
    return t;
  }

  Expected<Shape> shape(const std::string& canonical_name) const override {
    std::vector<WeightAlias> aliases;
    const WeightAlias* a = resolve(canonical_name, &aliases);
    if (a == nullptr) return missing(canonical_name, aliases);
    const TensorEntry* e = ckpt_->find(a->name);
    Shape s;
    TF_RETURN_IF_ERROR(slice_shape(canonical_name, *a, e->shape, &s));
    return s;
  }

  bool has(const std::string& canonical_name) const override {
    std::vector<WeightAlias> aliases;
    return resolve(canonical_name, &aliases) != nullptr;
  }

  std::vector<std::string> unknown_tensors() const override { return unknown_; }

 private:
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

  Expected<Tensor> load(const std::string& canonical, const WeightAlias& a) const {
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
      return t.to_f32();
    }
    // FP8: find the block scales of the stored tensor.
    const std::vector<std::string> scale_names = fp8_scale_names(a.name);
    const std::string* scale_name = nullptr;
    for (const std::string& n : scale_names) {
      if (ckpt_->has(n)) {
        scale_name = &n;
        break;
      }
    }
    if (scale_name == nullptr) {
      return not_found(ckpt_->file_of(a.name) + ": FP8 tensor '" + a.name + "' has no block-scale tensor '" +
                       scale_names[0] + "'");
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
};

}  // namespace

Expected<std::unique_ptr<WeightSource>> open_weight_source(const std::string& dir, const Glm5Config& config) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::open(dir));
  auto source = std::make_unique<CheckpointWeightSource>(std::move(ckpt), config);
  if (!source->unknown_tensors().empty()) {
    TF_LOG_WARN("{}: {} tensor(s) not used by the glm5_next model, e.g. '{}'", dir,
                source->unknown_tensors().size(), source->unknown_tensors().front());
  }
  return std::unique_ptr<WeightSource>(std::move(source));
}

}  // namespace tf
