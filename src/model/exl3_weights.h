// EXL3 checkpoints: the quantization_config, and loading and validating the
// EXL3 linears of a GLM-5.3-Flash checkpoint.
//
// The reference deployment's checkpoint (/work/shared/spec/glm53-checkpoint-facts.md
// §5.1): quantization_config {quant_method "exl3", bits 4, codebook "mcg", head_bits
// 16, scope "glm53_routed_experts_only", version ...}; every routed expert projection
// P = model.language_model.layers.L.mlp.experts.E.{gate,up,down}_proj is stored
// as P.trellis (i16 [in/16, out/16, 16K]), P.suh (f16 [in]), P.svh (f16 [out]) and
// a codebook marker P.mcg or P.mul1 (i32 scalar); everything else keeps its
// official name and BF16 dtype. Format: /work/shared/spec/exl3.md §1.
// exllamav3's own conversions quantize every linear but the routers (the lm_head at
// head_bits, 6 by default) and write no scope: the routed experts are served as EXL3
// and any other EXL3 linear of the model is dequantized when loaded (the weight
// source's get_f32), then kept dense or re-quantized by DENSE / LM_HEAD.
//
// What we refuse (each message names the tensor or config field and why):
// a quantization_config that is not EXL3, lacks `bits`, names an unknown codebook,
// or has a head_bits other than 1-8 or 16; a projection whose trellis is missing
// (routed experts), not i16 3-D, truncated (last dim not a multiple of 16), outside
// K = 1..8, or mis-shaped for the layer's in/out features padded to multiples of
// 128; suh/svh/bias of the wrong dtype or length; a marker that is not an i32
// scalar, carries a multiplier other than the locked one, appears twice (mcg and
// mul1), disagrees with the config's codebook, or a companion tensor we do not know
// (an unknown codebook marker); an unexpected `.scale`; a trellis of no weight the
// model reads (kExl3UnusedTrellis).
// Legacy packed sign vectors (.su/.sv, i16 [in/16] / [out/16]) are expanded to
// +-1 fp16 scales.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/exl3_weight.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace tf {

inline constexpr const char* kExl3ServedScope = "glm53_routed_experts_only";  // the reference deployment's scope
// Why a ".trellis" that no weight of the model resolves to is refused: dropping it
// silently could leave a quantized linear unused.
inline constexpr const char* kExl3UnusedTrellis =
    "is EXL3 data no weight of the model uses (an unknown linear, or one also stored unquantized)";

struct Exl3QuantConfig {
  std::string version;                   // converter version, informational
  double bits = 0;                       // target average bits per weight
  std::optional<Exl3Codebook> codebook;  // absent in old converters: markers decide
  int head_bits = 16;  // 16: an unquantized head (informational; the tensors decide)
  std::string scope;   // informational; "" when absent
};

// Reads config.json's quantization_config; `source` names the file in errors.
Expected<Exl3QuantConfig> parse_exl3_quant_config(const QuantizationConfig& q, const std::string& source);

// One EXL3 linear stored under `prefix` (e.g. "...experts.7.gate_proj"), for a
// layer of in_features x out_features (unpadded; the stored dims must be these
// rounded up to 128). `expected` (when given) must match the marker's codebook.
// Tensors are views into the checkpoint's mapping (legacy su/sv: owned copies).
Expected<Exl3Weight> load_exl3_linear(const Checkpoint& ckpt, const std::string& prefix, int64_t in_features,
                                      int64_t out_features, std::optional<Exl3Codebook> expected = std::nullopt);

// The EXL3 linears of a checkpoint outside the routed experts (which the weight source
// dequantizes at load): their padded elements and the bytes their tensors take in the files.
struct Exl3DenseLinears {
  int64_t linears = 0;
  int64_t elements = 0;
  int64_t file_bytes = 0;
};
Exl3DenseLinears exl3_dense_linears(const Checkpoint& ckpt);

// The prefix of a routed expert projection in the checkpoint (canonical
// spelling, else the flat "model.layers." one); the canonical one when neither exists.
std::string exl3_expert_prefix(const Checkpoint& ckpt, int layer, int expert, const std::string& proj);

struct Exl3Expert {
  Exl3Weight gate, up, down;  // gate/up: hidden -> moe_intermediate; down: back
};

// gate, up and down of one routed expert (layer may be an MTP layer).
Expected<Exl3Expert> load_exl3_expert(const Checkpoint& ckpt, const Glm5TextConfig& text, int layer, int expert,
                                      std::optional<Exl3Codebook> expected = std::nullopt);

// Tensor-parallel slices (spec §5; the Hadamards mix 128 channels, so both ends must be
// multiples of 128, or `end` the padded size). Output (column) slice [begin, end):
// trellis[:, begin/16 : end/16], svh and bias cut, suh whole; exact. Input (row) slice:
// trellis[begin/16 : end/16], suh cut, svh whole, bias only in the slice starting at 0;
// the slices' outputs sum to the whole layer's. Owning copies; errors name `name`.
Expected<Exl3Weight> exl3_output_slice(const Exl3Weight& w, int64_t begin, int64_t end, const std::string& name);
Expected<Exl3Weight> exl3_input_slice(const Exl3Weight& w, int64_t begin, int64_t end, const std::string& name);

// Checks a whole EXL3 checkpoint for `config`: its quantization_config, every
// routed expert projection of every MoE layer (MTP included), and that no EXL3
// tensor lies outside them. Reads headers and markers only. Returns the first
// problem; `problems` (optional) receives every one.
Status validate_exl3_checkpoint(const Checkpoint& ckpt, const Glm5Config& config,
                                std::vector<Status>* problems = nullptr);

}  // namespace tf
