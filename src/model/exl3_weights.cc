// EXL3 quantization_config, per-projection loading and checkpoint validation (see exl3_weights.h).
#include "model/exl3_weights.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "core/dtype.h"
#include "model/finite_values.h"
#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"

namespace tf {
namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensor names an EXL3 linear may carry after its prefix.
const std::set<std::string>& exl3_suffixes() {
  static const std::set<std::string> s = {"trellis", "suh", "svh", "su", "sv", "bias", "mcg", "mul1"};
  return s;
}

class LinearLoader {
 public:
  LinearLoader(const Checkpoint& ckpt, const std::string& prefix) : ckpt_(ckpt), prefix_(prefix) {}

  std::string where(const std::string& name) const { return ckpt_.file_of(name) + ": tensor '" + name + "'"; }

  // A 1-D fp16 scale vector of length n: P.<name>, else the legacy packed signs P.<legacy>.
  Expected<Tensor> scales(const std::string& name, const std::string& legacy, int64_t n) const {
    const std::string full = prefix_ + "." + name;
    if (const TensorEntry* e = ckpt_.find(full)) {
      if (e->dtype != DType::kF16 || e->shape != Shape{n}) {
        return invalid_argument(where(full) + " is " + dtype_name(e->dtype) + shape_to_string(e->shape) +
                                ", expected f16[" + std::to_string(n) + "] (from the trellis shape)");
      }
      TF_ASSIGN_OR_RETURN(Tensor t, ckpt_.tensor(full));
      TF_RETURN_IF_ERROR(check_finite_values(t, where(full)));
      return t;
    }
    const std::string old = prefix_ + "." + legacy;
    const TensorEntry* e = ckpt_.find(old);
    if (e == nullptr) {
      return not_found(ckpt_.file_of(prefix_ + ".trellis") + ": EXL3 linear '" + prefix_ + "' has no '" + full +
                       "' (nor legacy '" + old + "')");
    }
    if (e->dtype != DType::kI16 || e->shape != Shape{n / 16}) {
      return invalid_argument(where(old) + " is " + dtype_name(e->dtype) + shape_to_string(e->shape) +
                              ", expected legacy packed signs i16[" + std::to_string(n / 16) + "]");
    }
    TF_ASSIGN_OR_RETURN(Tensor packed, ckpt_.tensor(old));
    // Element 16w + j is bit j of word w; a set bit means -1.
    Tensor out = Tensor::empty({n}, DType::kF16);
    const uint16_t one = float_to_f16(1.0f), minus_one = float_to_f16(-1.0f);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t word = static_cast<uint16_t>(packed.data<int16_t>()[i / 16]);
      out.data<uint16_t>()[i] = (word >> (i % 16)) & 1u ? minus_one : one;
    }
    return out;
  }

  // The codebook from the marker tensors (none = 3INST).
  Expected<Exl3Codebook> codebook() const {
    const std::string mcg = prefix_ + ".mcg", mul1 = prefix_ + ".mul1";
    const bool has_mcg = ckpt_.has(mcg), has_mul1 = ckpt_.has(mul1);
    if (has_mcg && has_mul1) {
      return invalid_argument(ckpt_.file_of(mcg) + ": EXL3 linear '" + prefix_ +
                              "' has both codebook markers '.mcg' and '.mul1'");
    }
    if (!has_mcg && !has_mul1) return Exl3Codebook::k3Inst;
    const std::string& name = has_mcg ? mcg : mul1;
    const uint32_t locked = has_mcg ? kExl3McgMultiplier : kExl3Mul1Multiplier;
    const TensorEntry* e = ckpt_.find(name);
    if (e->dtype != DType::kI32 || shape_numel(e->shape) != 1 || e->shape.size() > 1) {
      return invalid_argument(where(name) + " is " + dtype_name(e->dtype) + shape_to_string(e->shape) +
                              ", expected an i32 scalar codebook marker");
    }
    TF_ASSIGN_OR_RETURN(Tensor t, ckpt_.tensor(name));
    uint32_t value = 0;
    std::memcpy(&value, t.raw(), 4);
    if (value != locked) {
      return unimplemented(where(name) + " holds multiplier " + hex32(value) + ", not the locked " + hex32(locked) +
                           " (a converter that took the multiplier from the file, exllamav3 v0.0.3-0.0.8)");
    }
    return has_mcg ? Exl3Codebook::kMcg : Exl3Codebook::kMul1;
  }

 private:
  const Checkpoint& ckpt_;
  const std::string& prefix_;
};

}  // namespace

Expected<Exl3QuantConfig> parse_exl3_quant_config(const QuantizationConfig& q, const std::string& source) {
  const std::string field = source + ": quantization_config.";
  if (q.method != "exl3") {
    return invalid_argument(field + "quant_method is '" + q.method + "', not 'exl3'");
  }
  const nlohmann::json& j = q.raw;
  Exl3QuantConfig c;
  if (auto it = j.find("version"); it != j.end() && it->is_string()) c.version = it->get<std::string>();
  auto bits = j.find("bits");
  if (bits == j.end() || !bits->is_number() || bits->get<double>() <= 0 || bits->get<double>() > kExl3MaxBits) {
    return invalid_argument(field + "bits: expected a number of bits per weight in (0, 8]" +
                            (bits == j.end() ? std::string(" (missing)") : ", got " + bits->dump()));
  }
  c.bits = bits->get<double>();
  if (auto it = j.find("codebook"); it != j.end() && !it->is_null()) {
    std::optional<Exl3Codebook> cb = it->is_string() ? exl3_codebook_from_name(it->get<std::string>()) : std::nullopt;
    if (!cb) return invalid_argument(field + "codebook " + it->dump() + " is not one of \"3inst\", \"mcg\", \"mul1\"");
    c.codebook = cb;
  }
  if (auto it = j.find("head_bits"); it != j.end()) {
    const int hb = it->is_number_integer() ? it->get<int>() : 0;
    if (!it->is_number_integer() || !((hb >= kExl3MinBits && hb <= kExl3MaxBits) || hb == 16))
      return invalid_argument(field + "head_bits: expected 1 to 8, or 16 (an unquantized head), got " + it->dump());
    c.head_bits = hb;
  } else {
    c.head_bits = 6;  // exllamav3's default: a quantized head
  }
  // The scope says which linears the converter quantized; the tensors say it too, and
  // they decide (routed experts stay EXL3, any other EXL3 linear is dequantized at load).
  auto scope = j.find("scope");
  if (scope != j.end() && !scope->is_string())
    return invalid_argument(field + "scope: expected a string, got " + scope->dump());
  if (scope == j.end()) return c;
  c.scope = scope->get<std::string>();
  return c;
}

Expected<Exl3Weight> load_exl3_linear(const Checkpoint& ckpt, const std::string& prefix, int64_t in_features,
                                      int64_t out_features, std::optional<Exl3Codebook> expected) {
  LinearLoader l(ckpt, prefix);
  const std::string tn = prefix + ".trellis";
  const TensorEntry* te = ckpt.find(tn);
  if (te == nullptr) return not_found(ckpt.dir() + ": EXL3 tensor '" + tn + "' not found");
  if (te->dtype != DType::kI16 || te->shape.size() != 3) {
    return invalid_argument(l.where(tn) + " is " + dtype_name(te->dtype) + shape_to_string(te->shape) +
                            ", expected i16 [in/16, out/16, 16*K]");
  }
  const int64_t last = te->shape[2];
  if (last % kExl3Tile != 0) {
    return invalid_argument(l.where(tn) + " has shape " + shape_to_string(te->shape) + ": last dimension " +
                            std::to_string(last) + " is not a multiple of 16 (truncated tile bitstreams)");
  }
  const int64_t bits = last / kExl3Tile;
  if (bits < kExl3MinBits || bits > kExl3MaxBits) {
    return out_of_range(l.where(tn) + " has shape " + shape_to_string(te->shape) + ": K = " + std::to_string(bits) +
                        " bits per weight, EXL3 has 1 to 8");
  }
  const int64_t k = round_up(in_features, kExl3Hadamard), n = round_up(out_features, kExl3Hadamard);
  const Shape want = {k / kExl3Tile, n / kExl3Tile, last};
  if (te->shape != want) {
    return invalid_argument(l.where(tn) + " has shape " + shape_to_string(te->shape) + " but a " +
                            std::to_string(in_features) + " -> " + std::to_string(out_features) +
                            " projection (padded to " + std::to_string(k) + " x " + std::to_string(n) + ") needs " +
                            shape_to_string(want));
  }
  if (ckpt.has(prefix + ".scale")) {
    return invalid_argument(l.where(prefix + ".scale") + ": EXL3 linears carry no '.scale' (unknown layout)");
  }
  Exl3Weight w;
  w.bits = static_cast<int>(bits);
  TF_ASSIGN_OR_RETURN(w.trellis, ckpt.tensor(tn));
  TF_ASSIGN_OR_RETURN(w.suh, l.scales("suh", "su", k));
  TF_ASSIGN_OR_RETURN(w.svh, l.scales("svh", "sv", n));
  if (const TensorEntry* b = ckpt.find(prefix + ".bias")) {
    if (b->dtype != DType::kF16 || b->shape != Shape{n}) {
      return invalid_argument(l.where(prefix + ".bias") + " is " + dtype_name(b->dtype) + shape_to_string(b->shape) +
                              ", expected f16[" + std::to_string(n) + "]");
    }
    TF_ASSIGN_OR_RETURN(w.bias, ckpt.tensor(prefix + ".bias"));
    TF_RETURN_IF_ERROR(check_finite_values(w.bias, l.where(prefix + ".bias")));
  }
  TF_ASSIGN_OR_RETURN(w.codebook, l.codebook());
  if (expected && *expected != w.codebook) {
    return invalid_argument(ckpt.file_of(tn) + ": EXL3 linear '" + prefix + "' uses codebook " +
                            exl3_codebook_name(w.codebook) + " (from its marker) but quantization_config.codebook is " +
                            exl3_codebook_name(*expected));
  }
  TF_RETURN_IF_ERROR(check_exl3_weight(w, prefix).with_context(ckpt.file_of(tn)));
  return w;
}

namespace {

Tensor packed(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  out.copy_from(t);
  return out;
}

Status check_slice(int64_t begin, int64_t end, int64_t size, const std::string& name, const char* side) {
  if (begin < 0 || begin >= end || end > size || begin % kExl3Hadamard != 0 ||
      (end % kExl3Hadamard != 0 && end != size)) {
    return unimplemented(name + ": " + side + " slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                         ") of " + std::to_string(size) + " is not on 128-channel boundaries (EXL3 splits at 128)");
  }
  return Status::ok();
}

}  // namespace

Expected<Exl3Weight> exl3_output_slice(const Exl3Weight& w, int64_t begin, int64_t end, const std::string& name) {
  TF_RETURN_IF_ERROR(check_exl3_weight(w, name));
  TF_RETURN_IF_ERROR(check_slice(begin, end, w.out_features(), name, "output"));
  Exl3Weight out = w;
  out.trellis = packed(w.trellis.slice(1, begin / kExl3Tile, end / kExl3Tile));
  out.suh = packed(w.suh);
  out.svh = packed(w.svh.slice(0, begin, end));
  if (!w.bias.is_null()) out.bias = packed(w.bias.slice(0, begin, end));
  return out;
}

Expected<Exl3Weight> exl3_input_slice(const Exl3Weight& w, int64_t begin, int64_t end, const std::string& name) {
  TF_RETURN_IF_ERROR(check_exl3_weight(w, name));
  TF_RETURN_IF_ERROR(check_slice(begin, end, w.in_features(), name, "input"));
  Exl3Weight out = w;
  out.trellis = packed(w.trellis.slice(0, begin / kExl3Tile, end / kExl3Tile));
  out.suh = packed(w.suh.slice(0, begin, end));
  out.svh = packed(w.svh);
  out.bias = begin == 0 && !w.bias.is_null() ? packed(w.bias) : Tensor();
  return out;
}

std::string exl3_expert_prefix(const Checkpoint& ckpt, int layer, int expert, const std::string& proj) {
  const std::string canonical = expert_weight_name(layer, expert, proj);
  std::vector<std::string> prefixes;
  for (const WeightAlias& a : weight_aliases(canonical)) {
    if (!a.is_slice() && ends_with(a.name, ".weight")) prefixes.push_back(a.name.substr(0, a.name.size() - 7));
  }
  for (const std::string& p : prefixes) {
    if (ckpt.has(p + ".trellis")) return p;
  }
  return prefixes.front();
}

Expected<Exl3Expert> load_exl3_expert(const Checkpoint& ckpt, const Glm5TextConfig& text, int layer, int expert,
                                      std::optional<Exl3Codebook> expected) {
  const int64_t h = text.hidden_size, i = text.moe_intermediate_size;
  Exl3Expert e;
  TF_ASSIGN_OR_RETURN(e.gate, load_exl3_linear(ckpt, exl3_expert_prefix(ckpt, layer, expert, "gate_proj"), h, i, expected));
  TF_ASSIGN_OR_RETURN(e.up, load_exl3_linear(ckpt, exl3_expert_prefix(ckpt, layer, expert, "up_proj"), h, i, expected));
  TF_ASSIGN_OR_RETURN(e.down, load_exl3_linear(ckpt, exl3_expert_prefix(ckpt, layer, expert, "down_proj"), i, h, expected));
  return e;
}

Exl3DenseLinears exl3_dense_linears(const Checkpoint& ckpt) {
  Exl3DenseLinears d;
  for (const std::string& name : ckpt.names()) {
    if (!ends_with(name, ".trellis") || name.find(".mlp.experts.") != std::string::npos) continue;
    const TensorEntry* t = ckpt.find(name);
    if (t == nullptr || t->shape.size() != 3) continue;  // validate_exl3_checkpoint names it
    const std::string stem = name.substr(0, name.size() - 8);
    ++d.linears;
    d.elements += t->shape[0] * kExl3Tile * t->shape[1] * kExl3Tile;
    for (const std::string& suffix : exl3_suffixes())
      if (const TensorEntry* c = ckpt.find(stem + "." + suffix))
        d.file_bytes += static_cast<int64_t>(c->data_end - c->data_begin);
  }
  return d;
}

Status validate_exl3_checkpoint(const Checkpoint& ckpt, const Glm5Config& config, std::vector<Status>* problems) {
  Status first;
  auto report = [&](Status s) {
    if (s.is_ok()) return;
    if (first.is_ok()) first = s;
    if (problems) problems->push_back(std::move(s));
  };
  Expected<Exl3QuantConfig> qc = parse_exl3_quant_config(config.quantization, ckpt.dir() + "/config.json");
  if (!qc.has_value()) {
    report(qc.status());
    return first;
  }
  // Every routed expert projection the config implies, by the prefix the checkpoint uses.
  std::set<std::string> projections;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, {.include_mtp = true, .include_vision = false})) {
    const size_t at = e.name.find(".mlp.experts.");
    if (at == std::string::npos || !ends_with(e.name, "_proj.weight") || e.shape.size() != 2) continue;
    std::string prefix = e.name.substr(0, e.name.size() - 7);
    for (const WeightAlias& a : weight_aliases(e.name)) {
      if (!a.is_slice() && ends_with(a.name, ".weight") && ckpt.has(a.name.substr(0, a.name.size() - 7) + ".trellis")) {
        prefix = a.name.substr(0, a.name.size() - 7);
        break;
      }
    }
    projections.insert(prefix);
    // Spec shapes are Hugging Face's [out, in].
    report(load_exl3_linear(ckpt, prefix, e.shape[1], e.shape[0], qc->codebook).status());
  }
  // Any other linear of the model stored EXL3 (exllamav3 quantizes every linear but the
  // routers unless told otherwise, the lm_head at head_bits bits): the weight source
  // dequantizes it at load, so it must load as one.
  for (const WeightSpecEntry& e : glm5_weight_spec(config, {.include_mtp = true, .include_vision = true})) {
    if (e.name.find(".mlp.experts.") != std::string::npos || !ends_with(e.name, ".weight") || e.shape.size() != 2)
      continue;
    for (const WeightAlias& a : weight_aliases(e.name, config.text.tie_word_embeddings)) {
      if (a.is_slice() || !ends_with(a.name, ".weight") || ckpt.has(a.name)) continue;
      const std::string prefix = a.name.substr(0, a.name.size() - 7);
      if (!ckpt.has(prefix + ".trellis")) continue;
      projections.insert(prefix);
      report(load_exl3_linear(ckpt, prefix, e.shape[1], e.shape[0], qc->codebook).status());
      break;
    }
  }
  for (const std::string& name : ckpt.names()) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos) continue;
    const std::string stem = name.substr(0, dot), suffix = name.substr(dot + 1);
    if (projections.count(stem)) {
      if (!exl3_suffixes().count(suffix) && suffix != "scale") {  // .scale: refused by load_exl3_linear
        report(invalid_argument(ckpt.file_of(name) + ": tensor '" + name + "': unknown companion of the EXL3 linear '" +
                                stem + "' (an unknown codebook marker, or a dense weight beside the trellis)"));
      }
    } else if (suffix == "trellis") {
      report(invalid_argument(ckpt.file_of(name) + ": tensor '" + name + "' " + kExl3UnusedTrellis));
    }
  }
  return first;
}

}  // namespace tf
