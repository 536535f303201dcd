#include "engine/demo_weights.h"

#include <string_view>

#include "core/dtype.h"
#include "core/fnv1a.h"
#include "model/glm5_weight_spec.h"

namespace tf {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t stream_of(uint64_t seed, const std::string& name) { return splitmix64(seed ^ fnv1a(name)); }

// Uniform in [0, 1) from 24 bits of the hash (exact in float).
float uniform(uint64_t stream, uint64_t index) {
  return static_cast<float>(splitmix64(stream + index) >> 40) * (1.0f / 16777216.0f);
}

float normal(uint64_t stream, uint64_t index) {
  const uint64_t h = splitmix64(stream + index);
  // Four 16-bit uniforms: the sum has mean 4 * 65535 / 2 and variance 4 * (65536^2 - 1) / 12.
  int64_t sum = 0;
  for (int k = 0; k < 4; ++k) sum += static_cast<int64_t>((h >> (16 * k)) & 0xffffu);
  constexpr double kMean = 131070.0;
  constexpr double kStd = 37837.226;  // sqrt(4 * (65536^2 - 1) / 12)
  return static_cast<float>((static_cast<double>(sum) - kMean) / kStd);
}

// The bulk of every checkpoint (kNormal BF16 elements): normal() and float_to_bf16 written out
// without calls or branches so that the compiler vectorises the loop; on x86-64 an AVX2 clone is
// chosen at run time where the CPU has it (about 3x faster). Every operation is exactly rounded
// (integer sums, a double division, float conversions), so the bytes equal the scalar path's.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TF_DEMO_FILL_CLONES __attribute__((target_clones("avx2", "default"), optimize("O3")))
#else
#define TF_DEMO_FILL_CLONES
#endif
TF_DEMO_FILL_CLONES void fill_normal_bf16(uint64_t stream, float sigma, uint64_t first, int64_t count,
                                          uint16_t* out) {
  for (int64_t j = 0; j < count; ++j) {
    uint64_t x = stream + first + static_cast<uint64_t>(j);
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x = x ^ (x >> 31);
    const int32_t sum = static_cast<int32_t>(x & 0xffffu) + static_cast<int32_t>((x >> 16) & 0xffffu) +
                        static_cast<int32_t>((x >> 32) & 0xffffu) + static_cast<int32_t>(x >> 48);
    const float v = sigma * static_cast<float>((static_cast<double>(sum) - 131070.0) / 37837.226);
    const uint32_t u = float_bits(v);
    const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    out[j] = static_cast<uint16_t>(r);
  }
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

using Init = DemoInit;

Init init_of(const std::string& name) {
  if (ends_with(name, "norm.weight") || ends_with(name, "layernorm.weight") || ends_with(name, "norm1.weight") ||
      ends_with(name, "norm2.weight"))
    return Init::kOne;
  if (ends_with(name, "_scale") || ends_with(name, "index_kpool_compress_gate")) return Init::kOne;
  if (ends_with(name, "_base") || ends_with(name, "e_score_correction_bias") || ends_with(name, ".bias") ||
      ends_with(name, "index_kpool_compress_ape"))
    return Init::kZero;
  if (ends_with(name, "self_attn.A_log")) return Init::kALog;
  if (ends_with(name, "self_attn.dt_bias")) return Init::kDtBias;
  return Init::kNormal;
}

bool stored_f32(const std::string& name) {
  return ends_with(name, "hc_attn_base") || ends_with(name, "hc_ffn_base") || ends_with(name, "hc_attn_scale") ||
         ends_with(name, "hc_ffn_scale") || ends_with(name, "self_attn.A_log") ||
         ends_with(name, "self_attn.dt_bias") || ends_with(name, "e_score_correction_bias");
}

}  // namespace

float demo_normal(uint64_t seed, const std::string& name, uint64_t index) {
  return normal(stream_of(seed, name), index);
}

DemoTensorRecipe demo_tensor_recipe(const std::string& name, const DemoWeightOptions& options) {
  DemoTensorRecipe r;
  r.dtype = stored_f32(name) ? DType::kF32 : DType::kBF16;
  r.init = init_of(name);
  r.sigma = static_cast<float>(options.initializer_range * (name == "lm_head.weight" ? options.lm_head_scale : 1.0));
  r.stream = stream_of(options.seed, name);
  return r;
}

void fill_demo_elements(const DemoTensorRecipe& recipe, int64_t begin, int64_t count, void* out) {
  const bool f32 = recipe.dtype == DType::kF32, fp8 = recipe.dtype == DType::kF8E4M3;
  if (recipe.init == Init::kNormal && !f32 && !fp8) {
    fill_normal_bf16(recipe.stream, recipe.sigma, static_cast<uint64_t>(begin), count, static_cast<uint16_t*>(out));
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t idx = static_cast<uint64_t>(begin + j);
    float v = 0.0f;
    switch (recipe.init) {
      case Init::kNormal: v = recipe.sigma * normal(recipe.stream, idx); break;
      case Init::kOne: v = 1.0f; break;
      case Init::kZero: v = 0.0f; break;
      case Init::kALog: v = 2.7725887f * uniform(recipe.stream, idx); break;        // ln 16
      case Init::kDtBias: v = -6.9077554f + 4.6051702f * uniform(recipe.stream, idx); break;  // ln 1e-3 .. ln 1e-1
      case Init::kConst: v = recipe.sigma; break;
    }
    if (f32) {
      static_cast<float*>(out)[j] = v;
    } else if (fp8) {
      static_cast<uint8_t*>(out)[j] = float_to_fp8_e4m3(v);
    } else {
      static_cast<uint16_t*>(out)[j] = float_to_bf16(v);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> make_demo_weights(const Glm5Config& config,
                                                              const DemoWeightOptions& options) {
  WeightSpecOptions spec_options;
  spec_options.include_mtp = true;
  spec_options.include_vision = true;
  std::vector<std::pair<std::string, Tensor>> out;
  for (const WeightSpecEntry& e : glm5_weight_spec(config, spec_options)) {
    const DemoTensorRecipe recipe = demo_tensor_recipe(e.name, options);
    Tensor t = Tensor::empty(e.shape, recipe.dtype);
    fill_demo_elements(recipe, 0, t.numel(), t.raw());
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace tf
