// Synthetic EXL3 weights: random trellis words are valid EXL3 data by
// construction (every bit pattern decodes; /work/shared/spec/exl3.md §2.1), so
// tests and GPU benchmarks can make EXL3 experts of any shape, K and codebook
// without a quantizer.
//
// Scales follow the real layout (§3): suh = random sign x per-row scale x a
// global factor, svh = random sign x per-column scale, chosen so that the
// dequantized W has roughly `weight_rms` (the rotated W_hat has an RMS of about
// 1.24 for 3INST/MCG and 1.0 for MUL1). Everything comes from a SplitMix64
// stream seeded by (seed, salt), so the same arguments give the same bytes on
// every platform, and any subset of a checkpoint can be generated on its own.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tf {

struct Exl3SyntheticOptions {
  int bits = 4;
  Exl3Codebook codebook = Exl3Codebook::kMcg;
  uint64_t seed = 0;
  float weight_rms = 0.02f;  // approximate RMS of the dequantized weight
  bool bias = false;
};

// A random EXL3 linear of in_features -> out_features (both padded to 128),
// owning its tensors. `salt` tells tensors of one seed apart.
Exl3Weight make_synthetic_exl3_linear(int64_t in_features, int64_t out_features, const Exl3SyntheticOptions& options,
                                      uint64_t salt = 0);

// The tensors of an EXL3 linear under the names a checkpoint uses: P.trellis,
// P.suh, P.svh, P.bias (when present) and the marker P.mcg or P.mul1 (none for 3INST).
std::vector<std::pair<std::string, Tensor>> exl3_linear_tensors(const std::string& prefix, const Exl3Weight& w);

// gate/up/down of routed experts [first_expert, last_expert) of `layer`, under
// their canonical checkpoint names (salted by layer, expert and projection).
std::vector<std::pair<std::string, Tensor>> synthetic_exl3_layer_experts(const Glm5TextConfig& text, int layer,
                                                                         int first_expert, int last_expert,
                                                                         const Exl3SyntheticOptions& options);

// Writes the routed experts of every MoE layer of `text` (decoder layers and MTP
// layers) as DIR/exl3-experts-LLL.safetensors, one file per layer, generating one
// layer at a time (memory stays at one layer's experts). `weight_map` (tensor name ->
// file name) receives every tensor written, for the caller's
// model.safetensors.index.json beside its own shards of the other tensors.
Status write_synthetic_exl3_experts(const std::string& dir, const Glm5TextConfig& text,
                                    const Exl3SyntheticOptions& options,
                                    std::map<std::string, std::string>* weight_map);

// An exllamav3-style conversion of checkpoint `src` (tests): every 2-D ".weight" outside
// the routed experts but the embedding, the routers and the vision tower (whose linears
// carry biases; lm_head included) stored as a
// random EXL3 linear with the RMS of the weight it replaces, K cycling through `bits`
// linear by linear (options' codebook and seed); every other tensor as it is.
// `dequantized` (when given) receives those linears' dense values (exl3_dequantize, in
// Hugging Face's [out, in]) under their names.
Expected<std::vector<std::pair<std::string, Tensor>>> synthetic_exl3_conversion(
    const Checkpoint& src, const Exl3SyntheticOptions& options, const std::vector<int>& bits,
    std::vector<std::pair<std::string, Tensor>>* dequantized);

// config.json's quantization_config for such a checkpoint (the served layout:
// routed experts EXL3, head_bits 16, scope glm53_routed_experts_only).
nlohmann::json synthetic_exl3_quantization_config(const Exl3SyntheticOptions& options);

}  // namespace tf
