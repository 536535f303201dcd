// Deterministic random weights for the built-in demo checkpoint (demo_checkpoint.h).
//
// Every tensor of glm5_weight_spec(config) (text model + MTP layer, no vision tower) is filled
// from a counter-based hash: element i of tensor `name` depends only on (seed, name, i), never
// on a std:: distribution or the order tensors are made in, so every build on every platform
// writes the same bytes. Values use integer arithmetic and exactly rounded float operations only.
//
// Scales follow transformers' _init_weights for glm5_next (what the tiny reference fixtures
// show): matrices and embeddings ~ N(0, initializer_range) (an Irwin-Hall sum of four uniforms:
// near-normal and exact), norm weights 1, hc_*_scale 1, hc_*_base 0, the router correction bias 0,
// the indexer's pool APE 0 and its compress gate 1, k_norm bias 0. KDA's A_log is drawn uniform in
// [0, ln 16] (decay rates 1..16) and dt_bias uniform in [-6.9, -2.3] (softplus^-1 of a time step
// log-uniform in [1e-3, 1e-1]), as Mamba-style layers are initialised.
//
// Dtypes are the release's: BF16, except F32 for hc_*_base / hc_*_scale, A_log, dt_bias and the
// router's e_score_correction_bias (glm53-checkpoint-facts.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace tf {

struct DemoWeightOptions {
  uint64_t seed = 0x7f4a7c15u;
  double initializer_range = 0.02;
  // Multiplies the std of the output head (lm_head), which sets how peaked the logits are.
  double lm_head_scale = 1.0;
};

// How the elements of one tensor are drawn; demo_tensor_recipe gives the demo's, which the
// synthetic checkpoint generator (synthetic_checkpoint.h) reuses with its own sigma.
// kConst: every element `sigma` (an FP8 block-scale grid). A kNormal tensor of dtype
// f8_e4m3 stores e4m3(sigma * normal) (saturating): FP8 codes whose block scales come apart.
enum class DemoInit { kNormal, kOne, kZero, kALog, kDtBias, kConst };
struct DemoTensorRecipe {
  DType dtype = DType::kBF16;   // the release's dtype for this name
  DemoInit init = DemoInit::kNormal;
  float sigma = 0.0f;           // std of kNormal
  uint64_t stream = 0;          // hash of (seed, name)
};
DemoTensorRecipe demo_tensor_recipe(const std::string& name, const DemoWeightOptions& options = {});
// Writes elements [begin, begin + count) of the tensor `recipe` describes to `out` (count
// elements of recipe.dtype). Any split of a tensor into ranges gives the same bytes.
void fill_demo_elements(const DemoTensorRecipe& recipe, int64_t begin, int64_t count, void* out);

// Named tensors in glm5_weight_spec order, ready for write_safetensors.
std::vector<std::pair<std::string, Tensor>> make_demo_weights(const Glm5Config& config,
                                                              const DemoWeightOptions& options = {});

// The value element `index` of tensor `name` draws: near-N(0, 1), from the hash only (exposed for tests).
float demo_normal(uint64_t seed, const std::string& name, uint64_t index);

}  // namespace tf
