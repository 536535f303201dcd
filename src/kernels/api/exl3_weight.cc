// Exl3Weight names and the structural check shared by the loader and every backend.
#include "kernels/api/exl3_weight.h"

namespace tf {

const char* exl3_codebook_name(Exl3Codebook cb) {
  switch (cb) {
    case Exl3Codebook::k3Inst: return "3inst";
    case Exl3Codebook::kMcg: return "mcg";
    case Exl3Codebook::kMul1: return "mul1";
  }
  return "?";
}

std::optional<Exl3Codebook> exl3_codebook_from_name(std::string_view name) {
  if (name == "3inst") return Exl3Codebook::k3Inst;
  if (name == "mcg") return Exl3Codebook::kMcg;
  if (name == "mul1") return Exl3Codebook::kMul1;
  return std::nullopt;
}

namespace {

Status check_vector(const Tensor& t, const std::string& what, int64_t n) {
  if (t.dtype() != DType::kF16 || t.dim() != 1 || t.size(0) != n || !t.is_contiguous()) {
    return invalid_argument(what + ": expected packed f16[" + std::to_string(n) + "] (from the trellis shape), got " +
                            t.describe());
  }
  return Status::ok();
}

}  // namespace

Status check_exl3_weight(const Exl3Weight& w, const std::string& name) {
  const Tensor& t = w.trellis;
  const std::string tn = name + ".trellis";
  if (t.is_null()) return invalid_argument(tn + ": missing");
  if (t.dtype() != DType::kI16 || t.dim() != 3 || !t.is_contiguous()) {
    return invalid_argument(tn + ": expected packed i16 [in/16, out/16, 16*K], got " + t.describe());
  }
  if (t.size(2) % kExl3Tile != 0) {
    return invalid_argument(tn + ": last dimension " + std::to_string(t.size(2)) +
                            " is not a multiple of 16 (truncated tile bitstreams?)");
  }
  const int64_t k_bits = t.size(2) / kExl3Tile;
  if (k_bits < kExl3MinBits || k_bits > kExl3MaxBits) {
    return out_of_range(tn + ": " + std::to_string(k_bits) + " bits per weight (shape " +
                        shape_to_string(t.shape()) + "), EXL3 has 1 to 8");
  }
  if (w.bits != k_bits) {
    return invalid_argument(tn + ": shape " + shape_to_string(t.shape()) + " means K=" + std::to_string(k_bits) +
                            " but the weight says K=" + std::to_string(w.bits));
  }
  const int64_t k = w.in_features(), n = w.out_features();
  if (k == 0 || n == 0) return invalid_argument(tn + ": empty shape " + shape_to_string(t.shape()));
  if (k % kExl3Hadamard != 0 || n % kExl3Hadamard != 0) {
    return invalid_argument(tn + ": shape " + shape_to_string(t.shape()) + " gives " + std::to_string(k) + "x" +
                            std::to_string(n) + " weights; both must be multiples of 128 (the Hadamard block)");
  }
  TF_RETURN_IF_ERROR(check_vector(w.suh, name + ".suh", k));
  TF_RETURN_IF_ERROR(check_vector(w.svh, name + ".svh", n));
  if (!w.bias.is_null()) TF_RETURN_IF_ERROR(check_vector(w.bias, name + ".bias", n));
  for (const Tensor* x : {&w.suh, &w.svh, &w.bias}) {
    if (!x->is_null() && x->device() != t.device()) {
      return invalid_argument(name + ": trellis on " + t.device().to_string() + " but scales on " +
                              x->device().to_string());
    }
  }
  return Status::ok();
}

Status check_exl3_expert_table(const Exl3ExpertTable& t, const std::string& name) {
  const int64_t e = t.num_experts();
  if (e == 0) return invalid_argument(name + ": no experts");
  if (static_cast<int64_t>(t.up.size()) != e || static_cast<int64_t>(t.down.size()) != e)
    return invalid_argument(name + ": " + std::to_string(e) + " gate, " + std::to_string(t.up.size()) + " up and " +
                            std::to_string(t.down.size()) + " down projections");
  if (t.hidden <= 0 || t.intermediate <= 0) return invalid_argument(name + ": hidden and intermediate must be set");
  const char* proj[3] = {"gate_proj", "up_proj", "down_proj"};
  const std::vector<Exl3Weight>* sets[3] = {&t.gate, &t.up, &t.down};
  for (int p = 0; p < 3; ++p) {
    const Exl3Weight& first = (*sets[p])[0];
    for (int64_t i = 0; i < e; ++i) {
      const Exl3Weight& w = (*sets[p])[i];
      const std::string wn = name + "." + std::to_string(i) + "." + proj[p];
      TF_RETURN_IF_ERROR(check_exl3_weight(w, wn));
      if (w.trellis.shape() != first.trellis.shape() || w.codebook != first.codebook ||
          !w.bias.is_null() != !first.bias.is_null() || w.trellis.device() != first.trellis.device())
        return invalid_argument(wn + ": " + w.trellis.describe() + " " + exl3_codebook_name(w.codebook) +
                                " differs from expert 0's " + first.trellis.describe() + " " +
                                exl3_codebook_name(first.codebook) + " (one shape, codebook and device per layer)");
    }
    const int64_t in = p < 2 ? t.hidden : t.intermediate, out = p < 2 ? t.intermediate : t.hidden;
    if (first.in_features() < in || first.out_features() < out)
      return invalid_argument(name + ".0." + proj[p] + ": " + std::to_string(first.in_features()) + "x" +
                              std::to_string(first.out_features()) + " (padded) does not cover " +
                              std::to_string(in) + "x" + std::to_string(out));
  }
  return Status::ok();
}

}  // namespace tf
