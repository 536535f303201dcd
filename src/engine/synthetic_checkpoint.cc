// Synthetic GLM-5.3-Flash checkpoints; see synthetic_checkpoint.h.
#include "engine/synthetic_checkpoint.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <system_error>
#include <unordered_set>

#include "engine/demo_checkpoint.h"
#include "engine/demo_embedded_files.h"  // generated: cmake/embed_files.cmake
#include "engine/demo_weights.h"
#include "model/config.h"
#include "model/glm5_weight_spec.h"
#include "model/weight_names.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// The release's layout at the top of the vocabulary: 36 added tokens, then 24 padding rows.
constexpr int64_t kAddedTokens = 36;
constexpr int64_t kPaddingRows = 24;
// Guards against geometries whose tensors would overflow the arithmetic or any sane disk.
constexpr int64_t kMaxDim = int64_t{1} << 22;

ojson int_list(const std::vector<int>& v) {
  ojson a = ojson::array();
  for (int x : v) a.push_back(x);
  return a;
}

Status check_range(const char* option, int64_t value, int64_t lo, int64_t hi = kMaxDim) {
  if (value >= lo && value <= hi) return Status::ok();
  return invalid_argument(std::string(option) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "] (got " + std::to_string(value) + ")");
}

// Spread of a kNormal tensor: unit-RMS embedding rows; 1/sqrt(fan_in) for matrices, whose
// input is the last dimension (for the [C, 1, K] depthwise convs: the K taps).
float synthetic_sigma(const std::string& name, const Shape& shape, float fallback) {
  if (name == text_prefix() + "embed_tokens.weight") return 1.0f;
  if (shape.size() < 2 || shape.back() <= 0) return fallback;
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.back())));
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Files a previous synthetic checkpoint (or an interrupted one) leaves; --overwrite removes them.
bool is_generated_file(const std::string& name) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors(\.tmp)?|exl3-experts-\d{3}\.safetensors)");
  static const std::unordered_set<std::string> fixed = {
      "config.json",          "generation_config.json",   "tokenizer.json", "tokenizer_config.json",
      "chat_template.jinja",  "model.safetensors.index.json", "model.safetensors"};
  std::string base = name;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".tmp") == 0 && fixed.count(base.substr(0, base.size() - 4)))
    return true;
  return fixed.count(base) != 0 || std::regex_match(name, shard);
}

bool is_routed_expert(const std::string& name) { return name.find(".mlp.experts.") != std::string::npos; }

// Bytes of the EXL3 experts write_synthetic_exl3_experts writes for `g` (data only; the
// headers are small), for the disk-space check and the index's total_size.
uint64_t exl3_expert_bytes(const SyntheticGeometry& g, const Exl3SyntheticOptions& o) {
  auto pad = [](int64_t v) { return static_cast<uint64_t>((v + 127) / 128 * 128); };
  const uint64_t h = pad(g.hidden_size), i = pad(g.moe_intermediate_size);
  const uint64_t marker = o.codebook == Exl3Codebook::k3Inst ? 0 : 4;
  const uint64_t linear = h * i * static_cast<uint64_t>(o.bits) / 8 + 2 * (h + i) + marker + (o.bias ? 2 * h : 0);
  const int moe_layers = std::max(0, g.num_layers - g.first_dense) + g.mtp_layers;
  return 3 * linear * static_cast<uint64_t>(g.experts) * static_cast<uint64_t>(moe_layers);
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

// Creates `dir` or checks that it may be written (see write_synthetic_checkpoint).
Status prepare_folder(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    return invalid_argument(dir.string() + " exists and is not a folder: --out needs a folder");
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) return not_found(dir.string() + ": cannot create the output folder (" + ec.message() + ")");
    return Status::ok();
  }
  std::vector<std::string> ours, others;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    (is_generated_file(name) && it->is_regular_file() ? ours : others).push_back(name);
  }
  if (ec) return not_found(dir.string() + ": cannot list the output folder (" + ec.message() + ")");
  if (ours.empty() && others.empty()) return Status::ok();
  if (!overwrite) {
    const std::string example = !others.empty() ? others.front() : ours.front();
    return invalid_argument(dir.string() + " is not empty (" + std::to_string(ours.size() + others.size()) +
                            " entries, e.g. '" + example +
                            "'): choose an empty or new folder, or pass --overwrite to replace the checkpoint files there");
  }
  for (const std::string& name : ours) {
    fs::remove(dir / name, ec);
    if (ec) return internal_error((dir / name).string() + ": cannot remove (" + ec.message() + ")");
  }
  return Status::ok();
}

}  // namespace

Expected<SyntheticGeometry> synthetic_geometry_preset(std::string_view name) {
  SyntheticGeometry g;  // the defaults are the full geometry
  if (name == "full") return g;
  if (name == "tiny") {
    g.vocab_size = 2048;
    g.hidden_size = 128;
    g.num_layers = 8;  // KDA 0-2, DSA 3, KDA 4-6, DSA 7; dense 0-2
    g.intermediate_size = 256;
    g.moe_intermediate_size = 64;
    g.experts = 8;
    g.experts_per_token = 2;
    g.attention_heads = 4;
    g.head_dim = 32;
    g.q_lora_rank = 64;
    g.kv_lora_rank = 32;
    g.kda_heads = 4;
    g.kda_head_dim = 32;
    g.index_heads = 4;
    g.index_head_dim = 32;
    g.index_topk = 16;
    return g;
  }
  return invalid_argument("unknown preset '" + std::string(name) + "' (known: full, tiny)");
}

int64_t synthetic_min_vocab() {
  return static_cast<int64_t>(demo_bpe_model().vocab.size()) + kAddedTokens + kPaddingRows;
}

int64_t synthetic_first_special_id(const SyntheticGeometry& g) { return g.vocab_size - kAddedTokens - kPaddingRows; }

Status validate_synthetic_geometry(const SyntheticGeometry& g) {
  const int64_t min_vocab = synthetic_min_vocab();
  if (g.vocab_size < min_vocab)
    return invalid_argument("--vocab " + std::to_string(g.vocab_size) + " is too small: at least " +
                            std::to_string(min_vocab) + " (the demo BPE's " +
                            std::to_string(demo_bpe_model().vocab.size()) +
                            " tokens, the 36 added tokens and 24 padding rows)");
  TF_RETURN_IF_ERROR(check_range("--vocab", g.vocab_size, min_vocab, int64_t{1} << 24));
  TF_RETURN_IF_ERROR(check_range("--hidden", g.hidden_size, 1));
  TF_RETURN_IF_ERROR(check_range("--layers", g.num_layers, 1, 1024));
  TF_RETURN_IF_ERROR(check_range("--mtp-layers", g.mtp_layers, 0, 1));  // the model runs at most one
  TF_RETURN_IF_ERROR(check_range("--first-dense", g.first_dense, 0, g.num_layers));
  TF_RETURN_IF_ERROR(check_range("--intermediate", g.intermediate_size, 1));
  TF_RETURN_IF_ERROR(check_range("--moe-intermediate", g.moe_intermediate_size, 1));
  TF_RETURN_IF_ERROR(check_range("--top-k", g.experts_per_token, 1, 4096));
  if (g.experts < g.experts_per_token)
    return invalid_argument("--experts " + std::to_string(g.experts) + " is below --top-k " +
                            std::to_string(g.experts_per_token) +
                            ": every token is routed to top-k distinct experts, so a MoE layer needs at least " +
                            std::to_string(g.experts_per_token));
  TF_RETURN_IF_ERROR(check_range("--experts", g.experts, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--shared-experts", g.shared_experts, 1, 64));
  TF_RETURN_IF_ERROR(check_range("--heads", g.attention_heads, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--head-dim", g.head_dim, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--q-lora-rank", g.q_lora_rank, 1));
  TF_RETURN_IF_ERROR(check_range("--kv-lora-rank", g.kv_lora_rank, 1));
  TF_RETURN_IF_ERROR(check_range("--kda-heads", g.kda_heads, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--kda-head-dim", g.kda_head_dim, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--index-heads", g.index_heads, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--index-head-dim", g.index_head_dim, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--index-topk", g.index_topk, 1));
  TF_RETURN_IF_ERROR(check_range("--index-kpool", g.index_kpool, 1, 4096));
  TF_RETURN_IF_ERROR(check_range("--hc-mult", g.hc_mult, 1, 64));
  return Status::ok();
}

std::string synthetic_config_json(const SyntheticGeometry& g, const Exl3SyntheticOptions* exl3) {
  std::string text = synthetic_config_json(g);
  if (!exl3) return text;
  ojson c = ojson::parse(text);
  c["quantization_config"] = ojson::parse(synthetic_exl3_quantization_config(*exl3).dump());
  return c.dump(2) + "\n";
}

std::string synthetic_fp8_config_json(const SyntheticGeometry& g) {
  ojson c = ojson::parse(synthetic_config_json(g));
  c["quantization_config"] = ojson::parse(
      R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})");
  return c.dump(2) + "\n";
}

std::vector<GeneratedTensor> with_fp8_experts(const std::vector<GeneratedTensor>& tensors) {
  // Codes e4m3(16 * draw), scale sigma / 16: the dequantized weights are the BF16 draw
  // rounded to e4m3 (|16 * draw| stays far below e4m3's 448 for a near-normal draw).
  constexpr float kCodeScale = 16.0f;
  std::vector<GeneratedTensor> out;
  out.reserve(tensors.size() * 2);
  for (const GeneratedTensor& t : tensors) {
    const bool matrix = t.shape.size() == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    if (!is_routed_expert(t.name) || !matrix || t.recipe.init != DemoInit::kNormal) {
      out.push_back(t);
      continue;
    }
    GeneratedTensor codes = t;
    codes.recipe.dtype = DType::kF8E4M3;
    codes.recipe.sigma = kCodeScale;
    GeneratedTensor scale;
    scale.name = t.name + "_scale_inv";
    scale.shape = {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128};
    scale.recipe.dtype = DType::kF32;
    scale.recipe.init = DemoInit::kConst;
    scale.recipe.sigma = t.recipe.sigma / kCodeScale;
    out.push_back(std::move(codes));
    out.push_back(std::move(scale));
  }
  return out;
}

std::string synthetic_config_json(const SyntheticGeometry& g) {
  const int64_t first = synthetic_first_special_id(g);
  ojson c = ojson::parse(embedded::kOfficialConfig);
  // BF16 weights and no vision tower.
  c.erase("quantization_config");
  c.erase("vision_config");
  for (const char* key : {"image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
                          "video_start_token_id", "video_end_token_id"})
    c[key] = remap_special_token_ids(c[key], first);
  ojson& t = c["text_config"];
  t["vocab_size"] = g.vocab_size;
  t["hidden_size"] = g.hidden_size;
  t["intermediate_size"] = g.intermediate_size;
  t["moe_intermediate_size"] = g.moe_intermediate_size;
  t["num_hidden_layers"] = g.num_layers;
  t["num_nextn_predict_layers"] = g.mtp_layers;
  t["num_attention_heads"] = g.attention_heads;
  t["num_key_value_heads"] = g.attention_heads;
  t["q_lora_rank"] = g.q_lora_rank;
  t["kv_lora_rank"] = g.kv_lora_rank;
  t["qk_nope_head_dim"] = g.head_dim;
  t["qk_head_dim"] = g.head_dim;
  t["v_head_dim"] = g.head_dim;
  t["n_routed_experts"] = g.experts;
  t["num_experts_per_tok"] = g.experts_per_token;
  t["n_shared_experts"] = g.shared_experts;
  t["first_k_dense_replace"] = g.first_dense;
  t["index_n_heads"] = g.index_heads;
  t["index_head_dim"] = g.index_head_dim;
  t["index_topk"] = g.index_topk;
  t["index_kpool"] = g.index_kpool;
  t["hc_mult"] = g.hc_mult;
  t["eos_token_id"] = remap_special_token_ids(t["eos_token_id"], first);
  t["pad_token_id"] = remap_special_token_ids(t["pad_token_id"], first);
  // The release's pattern: MLA + DSA at i % 4 == 3, KDA elsewhere; every indexer "full".
  std::vector<int> kda, full;
  ojson layer_types = ojson::array(), mlp_types = ojson::array(), indexer_types = ojson::array();
  for (int i = 0; i < g.num_layers; ++i) {
    const bool dsa = i % 4 == 3;
    (dsa ? full : kda).push_back(i);
    layer_types.push_back(dsa ? "deepseek_sparse_attention" : "linear_attention");
    mlp_types.push_back(i < g.first_dense ? "dense" : "sparse");
    indexer_types.push_back("full");
  }
  t["layer_types"] = layer_types;
  t["mlp_layer_types"] = mlp_types;
  t["indexer_types"] = indexer_types;
  ojson& lin = t["linear_attn_config"];
  lin["num_heads"] = g.kda_heads;
  lin["head_dim"] = g.kda_head_dim;
  lin["kda_layers"] = int_list(kda);
  lin["full_attn_layers"] = int_list(full);
  return c.dump(2) + "\n";
}

std::string synthetic_generation_config_json(const SyntheticGeometry& g) {
  ojson j = ojson::parse(embedded::kOfficialGenerationConfig);
  const int64_t first = synthetic_first_special_id(g);
  j["eos_token_id"] = remap_special_token_ids(j["eos_token_id"], first);
  j["pad_token_id"] = remap_special_token_ids(j["pad_token_id"], first);
  return j.dump(2) + "\n";
}

std::string synthetic_filler_word(uint64_t index) {
  // 18 consonants x 5 vowels = 90 syllables; the index in base 90, at least 3 digits.
  static constexpr char kConsonants[] = "bcdfghjklmnprstvwz";
  static constexpr char kVowels[] = "aeiou";
  std::string w = " ";
  int digits = 0;
  do {
    const uint64_t s = index % 90;
    w += kConsonants[s / 5];
    w += kVowels[s % 5];
    index /= 90;
    ++digits;
  } while (index > 0 || digits < 3);
  return w;
}

std::string synthetic_tokenizer_json(const SyntheticGeometry& g) {
  const text::BpeTrainingResult& bpe = demo_bpe_model();
  std::vector<text::AddedTokenSpec> added;
  for (const SpecialToken& s : glm53_special_tokens()) added.push_back({s.text, true});
  // The demo's document, re-read as a sorted-key json: an ordered_json object looks keys up
  // linearly, far too slow for 154k vocabulary entries.
  nlohmann::json doc = nlohmann::json::parse(text::byte_level_tokenizer_json(bpe, added).dump());
  const int64_t first = synthetic_first_special_id(g);
  for (size_t i = 0; i < doc["added_tokens"].size(); ++i) doc["added_tokens"][i]["id"] = first + static_cast<int64_t>(i);
  nlohmann::json& vocab = doc["model"]["vocab"];
  const std::unordered_set<std::string> taken(bpe.vocab.begin(), bpe.vocab.end());
  uint64_t k = 0;
  for (int64_t id = static_cast<int64_t>(bpe.vocab.size()); id < first;) {
    // Byte-level form: the leading space is U+0120.
    const std::string word = synthetic_filler_word(k++);
    const std::string token = "\xC4\xA0" + word.substr(1);
    if (taken.count(token) != 0) continue;
    vocab[token] = id++;
  }
  return doc.dump(1) + "\n";
}

Expected<std::vector<GeneratedTensor>> synthetic_tensors(const SyntheticGeometry& g, uint64_t seed) {
  TF_RETURN_IF_ERROR(validate_synthetic_geometry(g));
  TF_ASSIGN_OR_RETURN(Glm5Config config, parse_glm5_config(synthetic_config_json(g), "synthetic config.json"));
  WeightSpecOptions spec_options;
  spec_options.include_mtp = true;
  spec_options.include_vision = false;
  DemoWeightOptions weight_options;
  weight_options.seed = seed;
  std::vector<GeneratedTensor> out;
  for (WeightSpecEntry& e : glm5_weight_spec(config, spec_options)) {
    GeneratedTensor t;
    t.recipe = demo_tensor_recipe(e.name, weight_options);
    if (t.recipe.init == DemoInit::kNormal) t.recipe.sigma = synthetic_sigma(e.name, e.shape, t.recipe.sigma);
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    out.push_back(std::move(t));
  }
  return out;
}

SyntheticParams count_synthetic_params(const SyntheticGeometry& g, const std::vector<GeneratedTensor>& tensors) {
  SyntheticParams p;
  const std::string embed = text_prefix() + "embed_tokens.weight";
  std::vector<std::string> mtp_prefixes;
  for (int j = 0; j < g.mtp_layers; ++j) mtp_prefixes.push_back(layer_prefix(g.num_layers + j));
  for (const GeneratedTensor& t : tensors) {
    if (t.name.ends_with("_scale_inv")) continue;  // an FP8 block-scale grid, not a parameter
    const int64_t n = shape_numel(t.shape);
    p.total += n;
    bool mtp = false;
    for (const std::string& prefix : mtp_prefixes) mtp = mtp || starts_with(t.name, prefix);
    const bool routed = t.name.find(".mlp.experts.") != std::string::npos;
    if (mtp) p.mtp += n;
    if (routed) p.routed_experts += n;
    if (mtp || t.name == embed) continue;
    // Each MoE layer runs top-k of its experts for a token: count that fraction (exact, as
    // every expert of a layer has the same size).
    p.active += routed ? n * g.experts_per_token / g.experts : n;
  }
  return p;
}

Expected<SyntheticSummary> plan_synthetic_checkpoint(const SyntheticCheckpointOptions& options) {
  if (options.shard_bytes == 0) return invalid_argument("--shard-gb must be positive");
  TF_ASSIGN_OR_RETURN(std::vector<GeneratedTensor> tensors, synthetic_tensors(options.geometry, options.seed));
  if (options.fp8_experts) tensors = with_fp8_experts(tensors);
  const ShardPlan plan = plan_shards(tensors, options.shard_bytes, {});
  SyntheticSummary s;
  s.shards = plan.shards.size();
  s.tensors = tensors.size();
  s.bytes = plan.file_bytes;
  for (const ShardPlan::Shard& shard : plan.shards) s.files.push_back(shard.file);
  s.params = count_synthetic_params(options.geometry, tensors);
  return s;
}

Expected<SyntheticSummary> write_synthetic_checkpoint(const fs::path& dir, const SyntheticCheckpointOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  try {
    if (options.shard_bytes == 0) return invalid_argument("--shard-gb must be positive");
    if (dir.empty()) return invalid_argument("--out: no folder given");
    const SyntheticGeometry& g = options.geometry;
    TF_ASSIGN_OR_RETURN(std::vector<GeneratedTensor> all_tensors, synthetic_tensors(g, options.seed));
    const Exl3SyntheticOptions* exl3 = options.exl3 ? &*options.exl3 : nullptr;
    if (exl3 && (exl3->bits < kExl3MinBits || exl3->bits > kExl3MaxBits))
      return out_of_range("--bits " + std::to_string(exl3->bits) + ": EXL3 has 1 to 8 bits per weight");
    if (exl3 && options.fp8_experts)
      return invalid_argument("--exl3 and --fp8-experts: the routed experts are stored one way or the other");
    if (options.fp8_experts) all_tensors = with_fp8_experts(all_tensors);
    // With EXL3 experts the BF16 shards hold everything but the routed experts.
    std::vector<GeneratedTensor> tensors;
    for (const GeneratedTensor& t : all_tensors)
      if (!exl3 || !is_routed_expert(t.name)) tensors.push_back(t);
    const uint64_t exl3_bytes = exl3 ? exl3_expert_bytes(g, *exl3) : 0;
    const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                         {"tensorfold_synthetic_checkpoint", "1"},
                                                         {"seed", std::to_string(options.seed)}};
    const ShardPlan plan = plan_shards(tensors, options.shard_bytes, metadata);
    const std::string index = shard_index_json(tensors, plan);

    TF_RETURN_IF_ERROR(prepare_folder(dir, options.overwrite));
    // The small files (tokenizer.json is the largest, a few MB) fit in the margin.
    constexpr uint64_t kSmallFilesMargin = uint64_t{64} << 20;
    std::error_code ec;
    const fs::space_info space = fs::space(dir, ec);
    if (!ec && space.available < plan.file_bytes + exl3_bytes + index.size() + kSmallFilesMargin)
      return resource_exhausted(dir.string() + ": the checkpoint needs " +
                                gb(plan.file_bytes + exl3_bytes + index.size()) +
                                " but only " + gb(space.available) + " are free there");
    const std::vector<std::pair<std::string, std::string>> small = {
        {"config.json", options.fp8_experts ? synthetic_fp8_config_json(g) : synthetic_config_json(g, exl3)},
        {"generation_config.json", synthetic_generation_config_json(g)},
        {"tokenizer.json", synthetic_tokenizer_json(g)},
        {"tokenizer_config.json", demo_tokenizer_config_json()},
        {"chat_template.jinja", demo_chat_template()}};
    uint64_t total = plan.file_bytes + index.size();
    for (const auto& [name, text] : small) total += text.size();

    SyntheticSummary s;
    for (const auto& [name, text] : small) {
      TF_RETURN_IF_ERROR(write_file_atomically(dir / name, text));
      s.files.push_back(name);
    }
    ShardWriteOptions wo;
    wo.threads = options.threads;
    wo.progress = options.progress;
    wo.progress_interval_s = options.progress_interval_s;
    TF_RETURN_IF_ERROR(write_shards(dir, tensors, plan, wo));
    for (const ShardPlan::Shard& shard : plan.shards) s.files.push_back(shard.file);
    std::string index_text = index;
    if (exl3) {
      TF_ASSIGN_OR_RETURN(Glm5Config config, parse_glm5_config(synthetic_config_json(g, exl3), "synthetic config.json"));
      std::map<std::string, std::string> map;
      TF_RETURN_IF_ERROR(write_synthetic_exl3_experts(dir.string(), config.text, *exl3, &map));
      nlohmann::json merged = nlohmann::json::parse(index);
      std::set<std::string> files;
      for (const auto& [name, file] : map) {
        merged["weight_map"][name] = file;
        files.insert(file);
      }
      uint64_t data = 0;
      for (const std::string& f : files) {
        s.files.push_back(f);
        data += fs::file_size(dir / f);
      }
      total += data;
      merged["metadata"]["total_size"] = merged["metadata"]["total_size"].get<uint64_t>() + exl3_bytes;
      index_text = merged.dump(2) + "\n";
      total += index_text.size() - index.size();
      s.tensors += map.size();
    }
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "model.safetensors.index.json", index_text));
    s.files.push_back("model.safetensors.index.json");
    s.shards = plan.shards.size();
    s.tensors += tensors.size();
    s.bytes = total;
    s.params = count_synthetic_params(g, all_tensors);
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  } catch (const StatusError& e) {
    return e.status().with_context("synthetic checkpoint");
  } catch (const std::exception& e) {
    return internal_error(dir.string() + ": writing the synthetic checkpoint failed: " + e.what());
  }
}

}  // namespace tf
