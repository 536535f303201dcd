// Canonical names and their aliases; see weight_names.h for the mapping and its sources.
#include "model/weight_names.h"


namespace tf {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// On-disk suffix -> in-memory suffix (plain renames, conversion_mapping.py "glm5_next").
struct Rename {
  const char* disk;
  const char* module;
};
constexpr Rename kRenames[] = {
    {".self_attn.f_a_proj.weight", ".self_attn.forget_gate.f_a_proj.weight"},
    {".self_attn.f_b_proj.weight", ".self_attn.forget_gate.f_b_proj.weight"},
    {".self_attn.dt_bias", ".self_attn.forget_gate.dt_bias"},
    {".self_attn.A_log", ".self_attn.forget_gate.A_log"},
    {".hc_attn_fn", ".attn_hc.fn"},
    {".hc_attn_base", ".attn_hc.base"},
    {".hc_attn_scale", ".attn_hc.scale"},
    {".hc_ffn_fn", ".ffn_hc.fn"},
    {".hc_ffn_base", ".ffn_hc.base"},
    {".hc_ffn_scale", ".ffn_hc.scale"},
};

void add_spellings(const std::string& name, std::vector<WeightAlias>* out) {
  out->push_back({name});
  for (const Rename& r : kRenames) {
    if (ends_with(name, r.disk)) {
      out->push_back({name.substr(0, name.size() - std::string(r.disk).size()) + r.module});
    }
  }
  // mlp.experts.E.{gate,up,down}_proj.weight -> slices of the fused tensors
  const std::string experts = ".mlp.experts.";
  const size_t at = name.rfind(experts);
  if (at != std::string::npos) {
    const size_t digits = at + experts.size();
    size_t end = digits;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    const std::string base = name.substr(0, digits);
    const std::string rest = end < name.size() ? name.substr(end) : std::string();
    if (end > digits && end - digits <= 9) {
      const int64_t expert = std::stoll(name.substr(digits, end - digits));
      if (rest == ".gate_proj.weight") out->push_back({base + "gate_up_proj", expert, 0, 2});
      if (rest == ".up_proj.weight") out->push_back({base + "gate_up_proj", expert, 1, 2});
      if (rest == ".down_proj.weight") out->push_back({base + "down_proj", expert, 0, 1});
    }
    return;
  }
  // self_attn.{q,k,v}_conv1d.weight -> thirds of the concatenated conv
  const char* convs[] = {".self_attn.q_conv1d.weight", ".self_attn.k_conv1d.weight", ".self_attn.v_conv1d.weight"};
  for (int i = 0; i < 3; ++i) {
    if (ends_with(name, convs[i])) {
      const std::string base = name.substr(0, name.size() - std::string(convs[i]).size());
      out->push_back({base + ".self_attn.conv1d.weight", -1, i, 3});
    }
  }
}

}  // namespace

std::string WeightAlias::describe() const {
  std::string s = name;
  if (select >= 0) s += "[" + std::to_string(select) + "]";
  if (parts > 1) s += " part " + std::to_string(part + 1) + "/" + std::to_string(parts) + " of dim 0";
  return s;
}

std::vector<WeightAlias> weight_aliases(const std::string& canonical, bool tie_word_embeddings) {
  std::vector<WeightAlias> out;
  const std::string lm = text_prefix();
  add_spellings(canonical, &out);
  if (starts_with(canonical, lm)) add_spellings("model." + canonical.substr(lm.size()), &out);
  if (tie_word_embeddings && canonical == "lm_head.weight") {
    add_spellings(lm + "embed_tokens.weight", &out);
    add_spellings("model.embed_tokens.weight", &out);
  }
  return out;
}

std::string text_prefix() { return "model.language_model."; }

std::string layer_prefix(int layer) { return text_prefix() + "layers." + std::to_string(layer) + "."; }

std::string expert_weight_name(int layer, int expert, const std::string& proj) {
  return layer_prefix(layer) + "mlp.experts." + std::to_string(expert) + "." + proj + ".weight";
}

std::vector<std::string> fp8_scale_names(const std::string& weight_name) {
  if (ends_with(weight_name, ".weight")) return {weight_name + "_scale_inv"};
  return {weight_name + "_scale_inv", weight_name + "_scales_inv"};
}

}  // namespace tf
