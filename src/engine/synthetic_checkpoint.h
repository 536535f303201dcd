// Synthetic GLM-5.3-Flash checkpoints (`tensorfold synth-checkpoint`): the release's text model at
// full size (or scaled down) with random BF16 weights, for benchmarking and testing the serving
// path at real geometry without downloading 300+ GB.
//
// Geometry: the "full" preset is the release's text config (shared/data/glm53, facts §1.2):
// hidden 4096, 45 layers (KDA, except MLA + DSA at i % 4 == 3) plus one MTP layer, 64 heads,
// KDA 64 x 128, q_lora 1536, kv_lora 512, the indexer (32 x 128, pools of 4, top-2048), mHC 4,
// 3 dense layers (12288), MoE 2048 per expert, top-8, 1 shared expert, vocab 154880, but with
// `experts` routed experts (32 by default, not 288). "tiny" is a few-MB model for tests. Any
// field can be overridden. config.json is the official one with these numbers; no vision tower
// and no quantization_config (the weights are BF16, F32 where the release uses F32).
//
// Weights: the demo checkpoint's deterministic hash (demo_weights.h: element i of tensor `name`
// depends only on (seed, name, i)), with the spread chosen so that activations keep their scale
// through every layer: matrices ~ N(0, 1/fan_in) (fan_in = the input width; the KDA depthwise
// convs: the kernel width), the embedding ~ N(0, 1) (rows of unit RMS, like the normalised
// hidden states), and everything else as the demo draws it (norms 1, mHC base 0 / scale 1, the
// router bias 0, KDA's A_log and dt_bias, the indexer's pool APE 0 and compress gate 1).
// They are streamed into ~5 GB safetensors shards by many threads (synthetic_shard_writer.h).
//
// Tokenizer: the demo's byte-level BPE, then plain filler tokens up to the first added-token id,
// then GLM-5.3's 36 added tokens, then (vocab - first added - 36) padding rows without a token,
// as in the release (tokens 0..154819, added 154820..154855, padding up to 154879). The added
// tokens sit at vocab - 60, so at full vocab they have their official ids and every id in
// config.json and generation_config.json is the official one. Filler i is a space and a
// pronounceable 6-letter word (" bakomi"): every id decodes to distinct text, and with
// ignore_merges the word encodes back to that id. tokenizer_config.json and chat_template.jinja
// are the official files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/synthetic_shard_writer.h"
#include "model/exl3_synthetic.h"

namespace tf {

struct SyntheticGeometry {
  int64_t vocab_size = 154880;
  int64_t hidden_size = 4096;
  int num_layers = 45;          // decoder layers; the MTP layers come after them
  int mtp_layers = 1;
  int first_dense = 3;          // leading dense-MLP layers
  int64_t intermediate_size = 12288;
  int64_t moe_intermediate_size = 2048;
  int experts = 32;             // routed experts per MoE layer (the release has 288)
  int experts_per_token = 8;
  int shared_experts = 1;
  int attention_heads = 64;     // MLA heads
  int head_dim = 256;           // MLA qk (no rope) and v head dim
  int q_lora_rank = 1536;
  int kv_lora_rank = 512;
  int kda_heads = 64;
  int kda_head_dim = 128;
  int index_heads = 32;
  int index_head_dim = 128;
  int index_topk = 2048;
  int index_kpool = 4;
  int hc_mult = 4;
};

// "full" or "tiny"; anything else is an error naming the known presets.
Expected<SyntheticGeometry> synthetic_geometry_preset(std::string_view name);
// Checks a geometry; each message names the option at fault (--experts, --vocab, ...).
Status validate_synthetic_geometry(const SyntheticGeometry& g);

// The id of the first added token (<|endoftext|>): vocab - 60, 154820 at full vocab.
int64_t synthetic_first_special_id(const SyntheticGeometry& g);
// The smallest vocab a geometry may have: the demo BPE, the 36 added tokens and 24 padding rows.
int64_t synthetic_min_vocab();

// The generated small files.
std::string synthetic_config_json(const SyntheticGeometry& g);
// With EXL3 routed experts: the same plus the EXL3 quantization_config (exl3_synthetic.h).
std::string synthetic_config_json(const SyntheticGeometry& g, const Exl3SyntheticOptions* exl3);
// The config.json of a checkpoint with FP8 routed experts (SyntheticCheckpointOptions::fp8_experts).
std::string synthetic_fp8_config_json(const SyntheticGeometry& g);
// `tensors` with the routed experts' matrices as FP8 codes plus their block-scale grids
// (SyntheticCheckpointOptions::fp8_experts).
std::vector<GeneratedTensor> with_fp8_experts(const std::vector<GeneratedTensor>& tensors);
std::string synthetic_generation_config_json(const SyntheticGeometry& g);
std::string synthetic_tokenizer_json(const SyntheticGeometry& g);
// The `index`-th filler token's text (ids after the demo BPE's), for tests.
std::string synthetic_filler_word(uint64_t index);

// Every tensor with its recipe, in glm5_weight_spec order (text model + MTP layers), computed
// without writing anything. Fails when the geometry is invalid.
Expected<std::vector<GeneratedTensor>> synthetic_tensors(const SyntheticGeometry& g, uint64_t seed);

struct SyntheticParams {
  int64_t total = 0;          // every tensor, MTP layers included
  int64_t mtp = 0;            // of which the MTP layers
  int64_t routed_experts = 0; // of which routed experts (all layers)
  // Per token in the main model: every weight except the embedding table and the MTP layers,
  // with only experts_per_token of the routed experts of each MoE layer.
  int64_t active = 0;
};
SyntheticParams count_synthetic_params(const SyntheticGeometry& g, const std::vector<GeneratedTensor>& tensors);

inline constexpr uint64_t kDefaultSyntheticSeed = 0x5eed5eedu;

struct SyntheticCheckpointOptions {
  SyntheticGeometry geometry;
  uint64_t seed = kDefaultSyntheticSeed;
  uint64_t shard_bytes = 5000000000;  // target size of one shard (5 GB; the release's are ~5.4)
  unsigned threads = 0;                      // 0: all hardware threads
  bool overwrite = false;  // allow a non-empty folder (a previous synthetic checkpoint's files are replaced)
  // EXL3 routed experts (`--exl3`): the reference deployment's layout (facts §5.1): every routed
  // expert projection as random EXL3 tensors (trellis/suh/svh/marker, exl3_synthetic.h) in
  // exl3-experts-LLL.safetensors (one file per MoE layer), everything else BF16 as above, and
  // config.json's quantization_config {quant_method exl3, bits, codebook, head_bits 16,
  // scope glm53_routed_experts_only}. Unset: BF16 experts.
  std::optional<Exl3SyntheticOptions> exl3;
  // FP8 routed experts (`--fp8-experts`): as the official FP8 release stores them, each
  // projection F8_E4M3 codes (e4m3 of 16 x the BF16 draw) with an F32 `weight_scale_inv`
  // [ceil(out/128), ceil(in/128)] of sigma / 16, and config.json's quantization_config
  // {quant_method fp8, fmt e4m3, weight_block_size [128, 128]}; everything else BF16.
  // Not with exl3.
  bool fp8_experts = false;
  std::function<void(const ShardWriteProgress&)> progress;
  double progress_interval_s = 2.0;
};

struct SyntheticSummary {
  std::vector<std::string> files;  // every file written, the small files first
  size_t shards = 0;
  size_t tensors = 0;
  uint64_t bytes = 0;  // all files
  double seconds = 0;
  SyntheticParams params;
};

// What write_synthetic_checkpoint would write (shards, sizes, parameters), nothing written.
Expected<SyntheticSummary> plan_synthetic_checkpoint(const SyntheticCheckpointOptions& options);

// Writes the checkpoint into `dir` (created when missing). Refuses an invalid geometry, a path that
// is a file, a non-empty folder (unless overwrite) and a disk without room for it. The shards come
// last-but-one and model.safetensors.index.json last, so a folder with an index is complete.
Expected<SyntheticSummary> write_synthetic_checkpoint(const std::filesystem::path& dir,
                                                      const SyntheticCheckpointOptions& options);

}  // namespace tf
