// Synthetic EXL3 tensors (see exl3_synthetic.h).
#include "model/exl3_synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/dtype.h"
#include "kernels/api/exl3_decode.h"
#include "model/exl3_weights.h"
#include "model/safetensors.h"
#include "model/weight_names.h"

namespace tf {
namespace {

// SplitMix64: tiny, fully specified, good enough for test data.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi) from 24 random bits.
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  float sign() { return next() >> 63 ? -1.0f : 1.0f; }

 private:
  uint64_t s_;
};

uint64_t mix(uint64_t a, uint64_t b) { return SplitMix64(a ^ (b * 0xD1B54A32D192ED03ull)).next(); }

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

Tensor marker(uint32_t value) {
  Tensor t = Tensor::empty({}, DType::kI32);
  std::memcpy(t.raw(), &value, 4);
  return t;
}

}  // namespace

Exl3Weight make_synthetic_exl3_linear(int64_t in_features, int64_t out_features, const Exl3SyntheticOptions& options,
                                      uint64_t salt) {
  const int64_t k = round_up(in_features, kExl3Hadamard), n = round_up(out_features, kExl3Hadamard);
  SplitMix64 rng(mix(options.seed, salt));
  Exl3Weight w;
  w.bits = options.bits;
  w.codebook = options.codebook;
  w.trellis = Tensor::empty({k / kExl3Tile, n / kExl3Tile, kExl3Tile * options.bits}, DType::kI16);
  auto* words = w.trellis.data<uint16_t>();
  for (int64_t i = 0; i < w.trellis.numel(); i += 4) {
    const uint64_t r = rng.next();
    for (int64_t j = 0; j < 4 && i + j < w.trellis.numel(); ++j) words[i + j] = static_cast<uint16_t>(r >> (16 * j));
  }
  const float codebook_rms = options.codebook == Exl3Codebook::kMul1 ? 1.0f : 1.24371088f;
  const float row_scale = options.weight_rms / codebook_rms;
  w.suh = Tensor::empty({k}, DType::kF16);
  for (int64_t i = 0; i < k; ++i) w.suh.data<uint16_t>()[i] = float_to_f16(rng.sign() * rng.uniform(0.75f, 1.25f) * row_scale);
  w.svh = Tensor::empty({n}, DType::kF16);
  for (int64_t i = 0; i < n; ++i) w.svh.data<uint16_t>()[i] = float_to_f16(rng.sign() * rng.uniform(0.75f, 1.25f));
  if (options.bias) {
    w.bias = Tensor::empty({n}, DType::kF16);
    for (int64_t i = 0; i < n; ++i) w.bias.data<uint16_t>()[i] = float_to_f16(rng.uniform(-0.1f, 0.1f));
  }
  return w;
}

std::vector<std::pair<std::string, Tensor>> exl3_linear_tensors(const std::string& prefix, const Exl3Weight& w) {
  std::vector<std::pair<std::string, Tensor>> out = {
      {prefix + ".trellis", w.trellis}, {prefix + ".suh", w.suh}, {prefix + ".svh", w.svh}};
  if (!w.bias.is_null()) out.emplace_back(prefix + ".bias", w.bias);
  if (w.codebook == Exl3Codebook::kMcg) out.emplace_back(prefix + ".mcg", marker(kExl3McgMultiplier));
  if (w.codebook == Exl3Codebook::kMul1) out.emplace_back(prefix + ".mul1", marker(kExl3Mul1Multiplier));
  return out;
}

std::vector<std::pair<std::string, Tensor>> synthetic_exl3_layer_experts(const Glm5TextConfig& text, int layer,
                                                                         int first_expert, int last_expert,
                                                                         const Exl3SyntheticOptions& options) {
  std::vector<std::pair<std::string, Tensor>> out;
  const int64_t h = text.hidden_size, i = text.moe_intermediate_size;
  const char* projs[] = {"gate_proj", "up_proj", "down_proj"};
  for (int e = first_expert; e < last_expert; ++e) {
    for (int p = 0; p < 3; ++p) {
      const uint64_t salt = (static_cast<uint64_t>(layer) << 40) | (static_cast<uint64_t>(e) << 8) | static_cast<uint64_t>(p);
      const Exl3Weight w = p < 2 ? make_synthetic_exl3_linear(h, i, options, salt)
                                 : make_synthetic_exl3_linear(i, h, options, salt);
      std::string prefix = expert_weight_name(layer, e, projs[p]);
      prefix.resize(prefix.size() - 7);  // drop ".weight"
      for (auto& t : exl3_linear_tensors(prefix, w)) out.push_back(std::move(t));
    }
  }
  return out;
}

Status write_synthetic_exl3_experts(const std::string& dir, const Glm5TextConfig& text,
                                    const Exl3SyntheticOptions& options,
                                    std::map<std::string, std::string>* weight_map) {
  const int layers = text.num_hidden_layers + text.num_nextn_predict_layers;
  for (int layer = 0; layer < layers; ++layer) {
    const bool moe = layer >= text.num_hidden_layers ||
                     (layer < static_cast<int>(text.mlp_layer_types.size()) &&
                      text.mlp_layer_types[layer] == MlpKind::kSparse);
    if (!moe) continue;
    char file[64];
    std::snprintf(file, sizeof file, "exl3-experts-%03d.safetensors", layer);
    const auto tensors = synthetic_exl3_layer_experts(text, layer, 0, text.n_routed_experts, options);
    TF_RETURN_IF_ERROR(write_safetensors(dir + "/" + file, tensors, {{"format", "pt"}}));
    if (weight_map) {
      for (const auto& [name, t] : tensors) (*weight_map)[name] = file;
    }
  }
  return Status::ok();
}

Expected<std::vector<std::pair<std::string, Tensor>>> synthetic_exl3_conversion(
    const Checkpoint& src, const Exl3SyntheticOptions& options, const std::vector<int>& bits,
    std::vector<std::pair<std::string, Tensor>>* dequantized) {
  if (bits.empty()) return invalid_argument("synthetic_exl3_conversion: no bits");
  std::vector<std::pair<std::string, Tensor>> out;
  uint64_t salt = 100;
  for (const std::string& n : src.names()) {
    TF_ASSIGN_OR_RETURN(Tensor t, src.tensor(n));
    const bool linear = t.dim() == 2 && n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 &&
                        n.find("embed_tokens") == std::string::npos && n.find(".mlp.gate.") == std::string::npos &&
                        n.find(".experts.") == std::string::npos &&
                        n.find("model.visual.") == std::string::npos;  // the vision tower stays BF16
    if (!linear) {
      out.emplace_back(n, t);
      continue;
    }
    const Tensor v = t.to_f32();
    double ss = 0;
    for (int64_t i = 0; i < v.numel(); ++i) ss += static_cast<double>(v.data<float>()[i]) * v.data<float>()[i];
    Exl3SyntheticOptions o = options;
    o.bits = bits[(salt - 100) % bits.size()];
    o.weight_rms = static_cast<float>(std::sqrt(ss / static_cast<double>(std::max<int64_t>(1, v.numel()))));
    const int64_t rows = t.size(0), cols = t.size(1);
    const Exl3Weight w = make_synthetic_exl3_linear(cols, rows, o, salt++);
    for (auto& x : exl3_linear_tensors(n.substr(0, n.size() - 7), w)) out.push_back(std::move(x));
    if (dequantized) dequantized->emplace_back(n, exl3_dequantize_linear(w, cols, rows, n));
  }
  return out;
}

nlohmann::json synthetic_exl3_quantization_config(const Exl3SyntheticOptions& options) {
  return {{"quant_method", "exl3"},
          {"version", "synthetic"},
          {"bits", options.bits},
          {"codebook", exl3_codebook_name(options.codebook)},
          {"head_bits", 16},
          {"scope", kExl3ServedScope}};
}

}  // namespace tf
