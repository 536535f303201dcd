// Exl3Weight: one EXL3 (ExLlamaV3) quantized linear as every backend sees it.
//
// Format (/work/shared/spec/exl3.md): the matrix is stored input-major, W is
// (in, out) and y = x · W, the transpose of a Hugging Face `weight`. Both dims
// are padded to multiples of 128 (k = padded in, n = padded out).
//   trellis i16 [k/16, n/16, 16*bits]: one tail-biting bitstream of 256*bits
//           bits per 16x16 tile of W_hat, bits = K in 1..8 bits per weight;
//   suh     f16 [k]: input-side scales (signs x row scales x a global scale);
//   svh     f16 [n]: output-side scales (0 for dead output columns);
//   bias    f16 [n], optional;
//   codebook: which procedural codebook maps a 16-bit trellis state to a value
//           (none = 3INST; a `.mcg` or `.mul1` marker tensor selects the others).
// The full layer is y = FWHT128(FWHT128(x * suh) · W_hat) * svh + bias, with
// blockwise 128-point Hadamard transforms normalised by 1/sqrt(128).
// The struct only describes memory; the tensors may be views into a mapped
// checkpoint (whoever made the Exl3Weight keeps that mapping alive).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

enum class Exl3Codebook : uint8_t { k3Inst, kMcg, kMul1 };

// "3inst", "mcg", "mul1" (quantization_config's spelling) and back.
const char* exl3_codebook_name(Exl3Codebook cb);
std::optional<Exl3Codebook> exl3_codebook_from_name(std::string_view name);

// The codebook multipliers, locked since exllamav3 v0.0.9; the marker tensors
// hold them as int32. A marker with any other value came from a converter that
// took the multiplier from the file (v0.0.3-0.0.8, experimental) and is refused.
inline constexpr uint32_t kExl3McgMultiplier = 0xCBAC1FEDu;
inline constexpr uint32_t kExl3Mul1Multiplier = 0x83DCD12Du;
inline constexpr int kExl3MinBits = 1;
inline constexpr int kExl3MaxBits = 8;
inline constexpr int64_t kExl3Tile = 16;       // tile edge (16x16 weights per bitstream)
inline constexpr int64_t kExl3Hadamard = 128;  // Hadamard block and padding unit

struct Exl3Weight {
  Tensor trellis;  // i16 [k/16, n/16, 16*bits]
  Tensor suh;      // f16 [k]
  Tensor svh;      // f16 [n]
  Tensor bias;     // f16 [n], or null
  Exl3Codebook codebook = Exl3Codebook::kMcg;
  int bits = 0;

  int64_t in_features() const { return trellis.dim() == 3 ? trellis.size(0) * kExl3Tile : 0; }   // padded k
  int64_t out_features() const { return trellis.dim() == 3 ? trellis.size(1) * kExl3Tile : 0; }  // padded n
  // Bytes of the packed trellis (what a GEMV must read).
  int64_t trellis_bytes() const { return trellis.numel() * 2; }
};

// The routed experts of one MoE layer, every one stored EXL3, for Ops::moe_experts_exl3.
// gate/up map hidden -> intermediate (their first `intermediate` outputs are used),
// down maps intermediate -> hidden (its inputs beyond `intermediate` are zero).
// Per-expert tensors, as a checkpoint holds them (host views until a backend that
// computes elsewhere uploads them: Ops::upload_exl3_experts); `backend_state` is what
// that backend built from them (the CUDA one: the device pointer table), opaque here.
struct Exl3ExpertTable {
  std::vector<Exl3Weight> gate, up, down;  // one per expert
  int64_t hidden = 0;                      // unpadded hidden size (x and out width)
  int64_t intermediate = 0;                // unpadded intermediate width used
  std::shared_ptr<void> backend_state;

  int64_t num_experts() const { return static_cast<int64_t>(gate.size()); }
};

// Checks that every expert of `t` passes check_exl3_weight, and that all experts share
// one shape, bit width and codebook per projection and fit hidden / intermediate.
// Errors name `name` (e.g. "model.layers.3.mlp.experts") and the expert at fault.
Status check_exl3_expert_table(const Exl3ExpertTable& t, const std::string& name);

// Structural check of a weight before any kernel touches it: dtypes, ranks and
// sizes agree, packed, on the host or one device, bits in 1..8 and equal to
// trellis.shape[-1] / 16, k and n multiples of 128. Errors name `name` (e.g. the
// checkpoint prefix "...experts.7.gate_proj") and the tensor at fault.
Status check_exl3_weight(const Exl3Weight& w, const std::string& name);

}  // namespace tf
