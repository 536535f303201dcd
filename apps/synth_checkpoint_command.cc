// `tensorfold synth-checkpoint --out DIR [--preset full|tiny] [--experts N] [--layers L] ...`:
// writes a synthetic GLM-5.3-Flash checkpoint (the release's text geometry, random BF16 weights,
// src/engine/synthetic_checkpoint.h) with progress lines and a summary. --dry-run prints the plan
// (shards, size, parameters) without writing. --exl3 [--bits 4 --codebook mcg] stores the routed
// experts EXL3 (the reference deployment's layout), loadable by the normal loader; --fp8-experts
// stores them as the official FP8 release does (e4m3 + 128x128 block scales).
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/text_command_util.h"
#include "engine/synthetic_checkpoint.h"

namespace tf::apps {
namespace {

struct GeometryFlag {
  const char* flag;
  const char* help;
  std::function<void(SyntheticGeometry&, int64_t)> set;
};

template <typename Field>
std::function<void(SyntheticGeometry&, int64_t)> setter(Field SyntheticGeometry::*field) {
  return [field](SyntheticGeometry& g, int64_t v) { g.*field = static_cast<Field>(v); };
}

const std::vector<GeometryFlag>& geometry_flags() {
  static const std::vector<GeometryFlag> flags = {
      {"--experts", "routed experts per MoE layer (default 32 for full, 8 for tiny; at least --top-k)",
       setter(&SyntheticGeometry::experts)},
      {"--layers", "decoder layers (full: 45; KDA, MLA + DSA at i % 4 == 3)", setter(&SyntheticGeometry::num_layers)},
      {"--hidden", "hidden size (full: 4096)", setter(&SyntheticGeometry::hidden_size)},
      {"--vocab", "vocabulary rows (full: 154880; added tokens at vocab - 60)", setter(&SyntheticGeometry::vocab_size)},
      {"--intermediate", "dense MLP width (full: 12288)", setter(&SyntheticGeometry::intermediate_size)},
      {"--moe-intermediate", "expert MLP width (full: 2048)", setter(&SyntheticGeometry::moe_intermediate_size)},
      {"--top-k", "experts per token (full: 8)", setter(&SyntheticGeometry::experts_per_token)},
      {"--shared-experts", "shared experts (full: 1)", setter(&SyntheticGeometry::shared_experts)},
      {"--first-dense", "leading dense-MLP layers (full: 3)", setter(&SyntheticGeometry::first_dense)},
      {"--mtp-layers", "MTP layers after the decoder layers, 0 or 1 (full: 1)", setter(&SyntheticGeometry::mtp_layers)},
      {"--heads", "MLA heads (full: 64)", setter(&SyntheticGeometry::attention_heads)},
      {"--head-dim", "MLA qk / v head dim (full: 256)", setter(&SyntheticGeometry::head_dim)},
      {"--q-lora-rank", "MLA q_lora_rank (full: 1536)", setter(&SyntheticGeometry::q_lora_rank)},
      {"--kv-lora-rank", "MLA kv_lora_rank (full: 512)", setter(&SyntheticGeometry::kv_lora_rank)},
      {"--kda-heads", "KDA heads (full: 64)", setter(&SyntheticGeometry::kda_heads)},
      {"--kda-head-dim", "KDA head dim (full: 128)", setter(&SyntheticGeometry::kda_head_dim)},
      {"--index-heads", "DSA indexer heads (full: 32)", setter(&SyntheticGeometry::index_heads)},
      {"--index-head-dim", "DSA indexer head dim (full: 128)", setter(&SyntheticGeometry::index_head_dim)},
      {"--index-topk", "DSA top-k (full: 2048)", setter(&SyntheticGeometry::index_topk)},
      {"--index-kpool", "DSA key pool size (full: 4)", setter(&SyntheticGeometry::index_kpool)},
      {"--hc-mult", "mHC streams (full: 4)", setter(&SyntheticGeometry::hc_mult)},
  };
  return flags;
}

struct Args {
  std::string out;
  std::string preset = "full";
  std::vector<int64_t> values = std::vector<int64_t>(geometry_flags().size(), 0);
  uint64_t seed = kDefaultSyntheticSeed;
  double shard_gb = 5.0;
  unsigned threads = 0;
  bool overwrite = false;
  bool dry_run = false;
  bool exl3 = false;
  bool fp8_experts = false;
  int bits = 4;
  std::string codebook = "mcg";
};

std::string human(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, unit);
  return buf;
}

std::string billions(int64_t n) {
  return n >= 1000000000 ? human(static_cast<double>(n) / 1e9, "B") : human(static_cast<double>(n) / 1e6, "M");
}

std::string bytes_text(uint64_t n) {
  return n >= 1000000000 ? human(static_cast<double>(n) / 1e9, "GB") : human(static_cast<double>(n) / 1e6, "MB");
}

void print_params(const SyntheticGeometry& g, const SyntheticParams& p) {
  std::cout << "parameters: " << billions(p.total) << " total (" << billions(p.routed_experts) << " in routed experts, "
            << billions(p.mtp) << " in the MTP layer), " << billions(p.active) << " per token (top-"
            << g.experts_per_token << " of " << g.experts << " experts; embedding and MTP layer excluded)\n";
}

void run(const Args& a, CLI::App* cmd) {
  Expected<SyntheticGeometry> preset = synthetic_geometry_preset(a.preset);
  if (!preset) fail("--preset: " + preset.status().message());
  SyntheticCheckpointOptions o;
  o.geometry = *preset;
  for (size_t i = 0; i < geometry_flags().size(); ++i) {
    const GeometryFlag& f = geometry_flags()[i];
    if (cmd->count(f.flag) == 0) continue;
    const int64_t v = a.values[i];
    if (v < INT_MIN || v > INT_MAX) fail(std::string(f.flag) + " " + std::to_string(v) + " is out of range");
    f.set(o.geometry, v);
  }
  if (!(a.shard_gb > 0) || a.shard_gb > 1e6) fail("--shard-gb must be positive (got " + std::to_string(a.shard_gb) + ")");
  o.seed = a.seed;
  o.shard_bytes = static_cast<uint64_t>(a.shard_gb * 1e9);
  o.threads = a.threads;
  o.overwrite = a.overwrite;
  if (a.exl3) {
    Exl3SyntheticOptions x;
    if (a.bits < kExl3MinBits || a.bits > kExl3MaxBits)
      fail("--bits " + std::to_string(a.bits) + ": EXL3 has 1 to 8 bits per weight");
    const std::optional<Exl3Codebook> cb = exl3_codebook_from_name(a.codebook);
    if (!cb) fail("--codebook " + a.codebook + ": expected 3inst, mcg or mul1");
    x.bits = a.bits;
    x.codebook = *cb;
    x.seed = a.seed;
    o.exl3 = x;
  } else if (cmd->count("--bits") || cmd->count("--codebook")) {
    fail("--bits and --codebook describe EXL3 experts: add --exl3");
  }
  if (a.fp8_experts && a.exl3) fail("--fp8-experts and --exl3: the routed experts are stored one way or the other");
  o.fp8_experts = a.fp8_experts;
  const SyntheticGeometry& g = o.geometry;
  if (a.dry_run) {
    Expected<SyntheticSummary> plan = plan_synthetic_checkpoint(o);
    if (!plan) fail(plan.status().to_string());
    std::cout << "plan: " << plan->tensors << " tensors in " << plan->shards << " shards, "
              << bytes_text(plan->bytes) << " of safetensors\n";
    print_params(g, plan->params);
    return;
  }
  if (a.out.empty()) fail("--out is required (or pass --dry-run)");
  o.progress = [](const ShardWriteProgress& p) {
    const double done = static_cast<double>(p.bytes_done) / 1e9, total = static_cast<double>(p.bytes_total) / 1e9;
    const double rate = p.seconds > 0 ? done / p.seconds : 0;
    const double eta = rate > 0 ? (total - done) / rate : 0;
    char buf[200];
    std::snprintf(buf, sizeof(buf), "  %7.2f / %.2f GB (%5.1f%%)  shards %zu/%zu  %.2f GB/s  %.0f s elapsed, ~%.0f s left\n",
                  done, total, total > 0 ? 100.0 * done / total : 100.0, p.shards_done, p.shards_total, rate,
                  p.seconds, eta);
    std::cout << buf << std::flush;
  };
  std::cout << "synthetic GLM-5.3-Flash checkpoint -> " << a.out << ": hidden " << g.hidden_size << ", " << g.num_layers
            << " layers + " << g.mtp_layers << " MTP, " << g.experts << " experts (top-" << g.experts_per_token
            << "), vocab " << g.vocab_size << ", seed " << a.seed << "\n"
            << std::flush;
  Expected<SyntheticSummary> s = write_synthetic_checkpoint(a.out, o);
  if (!s) fail(s.status().to_string());
  const double gbytes = static_cast<double>(s->bytes) / 1e9;
  std::cout << "wrote " << s->tensors << " tensors in " << s->shards << " shards + " << (s->files.size() - s->shards)
            << " files: " << bytes_text(s->bytes) << " in " << human(s->seconds, "s") << " ("
            << human(s->seconds > 0 ? gbytes / s->seconds : 0, "GB/s") << "; " << s->params.total << " parameters)\n";
  print_params(g, s->params);
}

}  // namespace

void add_synth_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "synth-checkpoint",
      "Write a synthetic GLM-5.3-Flash checkpoint (release geometry or scaled down, random BF16 weights)");
  auto a = std::make_shared<Args>();
  cmd->add_option("--out", a->out, "folder to write (created when missing; must be empty unless --overwrite)");
  cmd->add_option("--preset", a->preset, "full (the release's text geometry) or tiny (a few MB, for tests)")
      ->capture_default_str();
  for (size_t i = 0; i < geometry_flags().size(); ++i)
    cmd->add_option(geometry_flags()[i].flag, a->values[i], geometry_flags()[i].help);
  cmd->add_option("--seed", a->seed, "weights seed (same seed, same bytes)")->capture_default_str();
  cmd->add_option("--shard-gb", a->shard_gb, "target shard size in GB")->capture_default_str();
  cmd->add_option("--threads", a->threads, "generator threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--overwrite", a->overwrite, "replace the checkpoint files of a non-empty folder");
  cmd->add_flag("--dry-run", a->dry_run, "print the plan (shards, size, parameters) and write nothing");
  cmd->add_flag("--exl3", a->exl3,
                "routed experts as random EXL3 tensors (exl3-experts-LLL.safetensors) with the release's "
                "quantization_config, everything else BF16");
  cmd->add_flag("--fp8-experts", a->fp8_experts,
                "routed experts as the official FP8 release stores them (F8_E4M3 + 128x128 F32 weight_scale_inv, "
                "quant_method fp8), everything else BF16");
  cmd->add_option("--bits", a->bits, "EXL3 bits per weight, 1-8 (with --exl3)")->capture_default_str();
  cmd->add_option("--codebook", a->codebook, "EXL3 codebook: 3inst, mcg or mul1 (with --exl3)")->capture_default_str();
  cmd->callback([a, cmd] { run(*a, cmd); });
}

}  // namespace tf::apps
