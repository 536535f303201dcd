#include "engine/demo_checkpoint.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <system_error>
#include <vector>

#include "engine/demo_embedded_files.h"  // generated: cmake/embed_files.cmake
#include "engine/demo_weights.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "text/bpe_trainer.h"
#include "text/chat_template.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr int64_t kOfficialFirstSpecial = kOfficialFirstSpecialId;
constexpr size_t kDemoMerges = 1500;
// Embedding / lm_head rows are padded to a multiple of this, like the release (154880 rows for
// 154856 tokens).
constexpr int64_t kVocabPadding = 64;

// Geometry (see the header). KDA layers 0-2 and 4-6, MLA + DSA at 3 and 7 (the official i % 4 == 3).
constexpr int kLayers = 8;
constexpr int kFirstDense = 1;

struct TrainedTokenizer {
  text::BpeTrainingResult model;
  ojson json;
};

const TrainedTokenizer& trained_tokenizer() {
  // Trained once per process (about 0.1 s); a pure function of the embedded corpus.
  static const TrainedTokenizer trained = [] {
    TrainedTokenizer t;
    text::BpeTrainerOptions options;
    options.num_merges = kDemoMerges;
    options.min_frequency = 1;
    const std::vector<std::string_view> texts = {embedded::kDemoCorpus};
    Expected<text::BpeTrainingResult> r = text::train_byte_level_bpe(texts, options);
    // The pattern is a constant that the tokenizer tests cover; failure here is a programming error.
    if (!r.has_value()) throw StatusError(r.status().with_context("demo tokenizer"));
    t.model = std::move(r).value();
    std::vector<text::AddedTokenSpec> added;
    for (const SpecialToken& s : glm53_special_tokens()) added.push_back({s.text, true});
    t.json = text::byte_level_tokenizer_json(t.model, added);
    return t;
  }();
  return trained;
}

int64_t base_vocab() { return static_cast<int64_t>(trained_tokenizer().model.vocab.size()); }

ojson map_id(const ojson& v) { return remap_special_token_ids(v, base_vocab()); }

ojson int_list(const std::vector<int>& v) {
  ojson a = ojson::array();
  for (int x : v) a.push_back(x);
  return a;
}

std::string pretty(const ojson& j) { return j.dump(2) + "\n"; }

ojson build_config() {
  ojson c = ojson::parse(embedded::kOfficialConfig);
  // BF16 weights and a small vision tower (2 blocks of width 64, features of the text width).
  c.erase("quantization_config");
  ojson& v = c["vision_config"];
  v["depth"] = 2;
  v["hidden_size"] = 64;
  v["num_heads"] = 4;
  v["intermediate_size"] = 128;
  v["out_hidden_size"] = 256;
  v["projection_intermediate_size"] = 256;
  for (const char* key : {"image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
                          "video_start_token_id", "video_end_token_id"})
    c[key] = map_id(c[key]);

  ojson& t = c["text_config"];
  const DemoTokenizerInfo info = demo_tokenizer_info();
  t["vocab_size"] = info.vocab_size;
  t["hidden_size"] = 256;
  t["intermediate_size"] = 512;
  t["moe_intermediate_size"] = 64;
  t["num_hidden_layers"] = kLayers;
  t["num_attention_heads"] = 4;
  t["num_key_value_heads"] = 4;
  t["q_lora_rank"] = 128;
  t["kv_lora_rank"] = 64;
  t["qk_nope_head_dim"] = 64;
  t["qk_head_dim"] = 64;
  t["v_head_dim"] = 64;
  t["n_routed_experts"] = 16;
  t["num_experts_per_tok"] = 4;
  t["n_shared_experts"] = 1;
  t["first_k_dense_replace"] = kFirstDense;
  t["index_n_heads"] = 4;
  t["index_head_dim"] = 32;
  t["index_kpool"] = 4;
  t["index_topk"] = 16;
  t["eos_token_id"] = map_id(t["eos_token_id"]);
  t["pad_token_id"] = map_id(t["pad_token_id"]);

  std::vector<int> kda, full;
  ojson layer_types = ojson::array(), mlp_types = ojson::array(), indexer_types = ojson::array();
  for (int i = 0; i < kLayers; ++i) {
    const bool dsa = i % 4 == 3;
    (dsa ? full : kda).push_back(i);
    layer_types.push_back(dsa ? "deepseek_sparse_attention" : "linear_attention");
    mlp_types.push_back(i < kFirstDense ? "dense" : "sparse");
    indexer_types.push_back("full");
  }
  t["layer_types"] = layer_types;
  t["mlp_layer_types"] = mlp_types;
  t["indexer_types"] = indexer_types;
  ojson& lin = t["linear_attn_config"];
  lin["num_heads"] = 4;
  lin["head_dim"] = 64;
  lin["kda_layers"] = int_list(kda);
  lin["full_attn_layers"] = int_list(full);
  return c;
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : kDemoCheckpointFiles)
    if (!fs::is_regular_file(dir / name, ec) || fs::file_size(dir / name, ec) == 0 || ec) return false;
  return true;
}

// A name no other process or thread uses.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

}  // namespace

const text::BpeTrainingResult& demo_bpe_model() { return trained_tokenizer().model; }

ojson remap_special_token_ids(const ojson& v, int64_t first_special) {
  if (v.is_number_integer()) {
    const int64_t id = v.get<int64_t>();
    const int64_t n = static_cast<int64_t>(glm53_special_tokens().size());
    if (id < kOfficialFirstSpecial || id >= kOfficialFirstSpecial + n) return v;
    return ojson(id - kOfficialFirstSpecial + first_special);
  }
  if (v.is_array()) {
    ojson out = ojson::array();
    for (const ojson& e : v) out.push_back(remap_special_token_ids(e, first_special));
    return out;
  }
  return v;
}

Status write_file_atomically(const fs::path& path, std::string_view bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return not_found(tmp.string() + ": cannot create");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) return internal_error(tmp.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error(path.string() + ": rename failed (" + ec.message() + ")");
  return Status::ok();
}

int64_t demo_token_id(int64_t official_id) {
  const int64_t n = static_cast<int64_t>(glm53_special_tokens().size());
  if (official_id < kOfficialFirstSpecial || official_id >= kOfficialFirstSpecial + n) return -1;
  return official_id - kOfficialFirstSpecial + base_vocab();
}

DemoTokenizerInfo demo_tokenizer_info() {
  DemoTokenizerInfo info;
  info.base_vocab_size = base_vocab();
  info.num_merges = static_cast<int64_t>(trained_tokenizer().model.merges.size());
  const int64_t tokens = info.base_vocab_size + static_cast<int64_t>(glm53_special_tokens().size());
  info.vocab_size = (tokens + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  return info;
}

std::string demo_config_json() { return pretty(build_config()); }

std::string demo_generation_config_json() {
  ojson g = ojson::parse(embedded::kOfficialGenerationConfig);
  g["eos_token_id"] = map_id(g["eos_token_id"]);
  g["pad_token_id"] = map_id(g["pad_token_id"]);
  return pretty(g);
}

std::string demo_tokenizer_json() { return trained_tokenizer().json.dump(2) + "\n"; }
std::string demo_tokenizer_config_json() { return std::string(embedded::kOfficialTokenizerConfig); }
std::string demo_chat_template() { return std::string(embedded::kOfficialChatTemplate); }

Status write_demo_checkpoint(const fs::path& dir) {
  try {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return not_found(dir.string() + ": cannot create the demo checkpoint folder (" + ec.message() + ")");
    const std::string config_text = demo_config_json();
    Expected<Glm5Config> config = parse_glm5_config(config_text, (dir / "config.json").string());
    if (!config.has_value()) return config.status().with_context("demo checkpoint");
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "config.json", config_text));
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "generation_config.json", demo_generation_config_json()));
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "tokenizer.json", demo_tokenizer_json()));
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "tokenizer_config.json", demo_tokenizer_config_json()));
    TF_RETURN_IF_ERROR(write_file_atomically(dir / "chat_template.jinja", demo_chat_template()));
    const std::map<std::string, std::string> metadata = {
        {"format", "pt"}, {"tensorfold_demo_checkpoint", std::to_string(kDemoCheckpointVersion)}};
    return write_safetensors((dir / "model.safetensors").string(), make_demo_weights(*config), metadata);
  } catch (const StatusError& e) {
    return e.status();
  } catch (const std::exception& e) {
    return internal_error(dir.string() + ": writing the demo checkpoint failed: " + e.what());
  }
}

fs::path default_cache_root() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  if (std::string d = env("TF_CACHE_DIR"); !d.empty()) return d;
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return fs::path(d) / "tensorfold";
  if (std::string d = env("HOME"); !d.empty()) return fs::path(d) / ".cache" / "tensorfold";
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);
  return (ec ? fs::path("/tmp") : tmp) / "tensorfold-cache";
}

Expected<fs::path> ensure_demo_checkpoint(const fs::path& cache_root) {
  const fs::path target = cache_root / ("demo-glm5-v" + std::to_string(kDemoCheckpointVersion));
  if (is_complete(target)) return target;
  std::error_code ec;
  fs::create_directories(cache_root, ec);
  if (ec) return not_found(cache_root.string() + ": cannot create the cache folder (" + ec.message() + ")");

  const fs::path tmp = cache_root / (target.filename().string() + ".tmp-" + unique_suffix());
  Status written = write_demo_checkpoint(tmp);
  if (!written.is_ok()) {
    fs::remove_all(tmp, ec);
    return written;
  }
  // An incomplete folder left by someone else (e.g. a user deleted a file): move it aside first.
  // Renames are atomic, so of several processes doing this at once exactly one succeeds.
  if (fs::exists(target, ec) && !is_complete(target)) {
    const fs::path stale = cache_root / (target.filename().string() + ".stale-" + unique_suffix());
    fs::rename(target, stale, ec);
    if (!ec) fs::remove_all(stale, ec);
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    // Another process won the race (its folder is complete by construction): use it.
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (is_complete(target)) return target;
    return internal_error(target.string() + ": cannot move the demo checkpoint into place (" + ec.message() + ")");
  }
  return target;
}

}  // namespace tf
