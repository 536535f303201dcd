#include "glm5_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <thread>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_ops.h"
#include "model/weight_source.h"
#include "model/safetensors.h"

namespace tf::test {

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> out;
  // TF_TEST_DATA_DIR in the environment wins: binaries packed for the GPU machine
  // run from another checkout path (scripts/device/gpu_tests.sh sets it).
  const char* env = std::getenv("TF_TEST_DATA_DIR");
  const std::filesystem::path root = std::filesystem::path(env && *env ? env : TF_TEST_DATA_DIR) / "model";
  // Text fixtures only: their reference.json lists the greedy continuation (tiny-vision's
  // reference is of another kind, read by the vision tests).
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (!e.is_directory() || !std::filesystem::exists(e.path() / "reference.safetensors")) continue;
    std::ifstream meta(e.path() / "reference.json");
    const nlohmann::json j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("greedy_ids")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Fixture load_fixture(const std::string& dir) {
  Fixture f;
  f.dir = dir;
  f.name = std::filesystem::path(dir).filename();
  auto cfg = load_glm5_config(dir);
  EXPECT_TRUE(cfg.has_value()) << cfg.status().to_string();
  f.config = *cfg;
  auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  EXPECT_TRUE(ref.has_value()) << ref.status().to_string();
  auto get = [&](const char* name) {
    auto t = (*ref)->tensor(name);
    EXPECT_TRUE(t.has_value()) << name;
    return t.has_value() ? *t : Tensor();
  };
  auto ids = [&](const char* name) {
    Tensor t = get(name);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
      out.push_back(static_cast<int32_t>(v));
    }
    return out;
  };
  f.prompt_ids = ids("prompt_ids");
  f.greedy_ids = ids("greedy_ids");
  f.short_ids = ids("short_ids");
  f.prompt_logits = get("prompt_logits").to_f32();
  f.greedy_step_logits = get("greedy_step_logits").to_f32();
  f.short_logits = get("short_logits").to_f32();
  if ((*ref)->find("generate_ids")) {
    f.generate_ids = ids("generate_ids");
    f.generate_logits = get("generate_logits").to_f32();
  }
  return f;
}

Ops& cpu_ops() {
  static std::unique_ptr<Ops> ops = make_cpu_ops();
  return *ops;
}

std::unique_ptr<WeightSource> open_weights(const Fixture& f) {
  auto ws = open_weight_source(f.dir, f.config);
  EXPECT_TRUE(ws.has_value()) << ws.status().to_string();
  return ws.has_value() ? std::move(*ws) : nullptr;
}

std::unique_ptr<Glm5Model> load_model(const Fixture& f, Communicator& comm, Glm5Options cache) {
  auto ws = open_weights(f);
  if (!ws) return nullptr;
  auto m = Glm5Model::load(f.config, *ws, cpu_ops(), comm, cache);
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  return m.has_value() ? std::move(*m) : nullptr;
}

Glm5Options small_pool() {
  Glm5Options o;
  o.page_size = 16;
  o.num_pages = 256;
  o.latent_dtype = DType::kBF16;
  return o;
}

bool add_mtp_layer(const Fixture& f, EditedWeights& w, Glm5Config& config) {
  const Glm5TextConfig& t = f.config.text;
  int src = -1;
  for (int i = 0; i < t.num_hidden_layers; ++i)
    if (t.layer_types[i] == AttentionKind::kSparseMla && t.indexer_types[i] == IndexerKind::kFull &&
        t.mlp_layer_types[i] == MlpKind::kSparse)
      src = i;
  if (src < 0) return false;
  const std::string from = "model.language_model.layers." + std::to_string(src) + ".";
  const std::string to = "model.language_model.layers." + std::to_string(t.num_hidden_layers) + ".";
  for (const std::string suffix :
       {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_proj.weight",
        "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight", "self_attn.kv_a_proj_with_mqa.weight",
        "self_attn.kv_a_layernorm.weight", "self_attn.kv_b_proj.weight", "self_attn.o_proj.weight",
        "self_attn.indexer.wq_b.weight", "self_attn.indexer.wk.weight", "self_attn.indexer.k_norm.weight",
        "self_attn.indexer.k_norm.bias", "self_attn.indexer.weights_proj.weight",
        "self_attn.indexer.index_kpool_compress_ape", "self_attn.indexer.index_kpool_compress_gate",
        "mlp.gate.weight", "mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
        "mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight"})
    w.alias[to + suffix] = from + suffix;
  for (int e = 0; e < t.n_routed_experts; ++e)
    for (const std::string p : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string s = "mlp.experts." + std::to_string(e) + "." + p + ".weight";
      w.alias[to + s] = from + s;
    }
  const int64_t h = t.hidden_size;
  std::vector<float> ones(h, 1.0f), eh(h * 2 * h);
  for (size_t i = 0; i < eh.size(); ++i) eh[i] = 0.02f * static_cast<float>((i * 7919) % 101) / 101.0f - 0.01f;
  for (const std::string n : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight"})
    w.extra[to + n] = Tensor::from_floats({h}, ones);
  w.extra[to + "eh_proj.weight"] = Tensor::from_floats({h, 2 * h}, eh);
  config = f.config;
  config.text.num_nextn_predict_layers = 1;
  return true;
}

std::unique_ptr<Glm5Model> load_model_with_mtp(const Fixture& f, Communicator& comm, Ops& ops, Glm5Options cache) {
  auto ws = open_weights(f);
  if (!ws) return nullptr;
  EditedWeights w(*ws);
  Glm5Config config;
  if (!add_mtp_layer(f, w, config)) return nullptr;
  auto m = Glm5Model::load(config, w, ops, comm, cache);
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  return m.has_value() ? std::move(*m) : nullptr;
}

namespace {

// Threads of one process as ranks: each collective publishes the rank's tensor,
// waits for all, and reads the others (C++20 barrier between the phases).
struct FakeGroup {
  explicit FakeGroup(int n) : world(n), slots(n), sync(n) {}
  int world;
  std::vector<const Tensor*> slots;
  std::barrier<> sync;
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_->world; }
  const char* backend_name() const override { return "fake-threads"; }
  Status all_reduce_sum(Tensor& t) override {
    g_->slots[rank_] = &t;
    g_->sync.arrive_and_wait();
    std::vector<float> sum(t.numel(), 0.0f);
    for (int r = 0; r < g_->world; ++r)
      for (int64_t i = 0; i < t.numel(); ++i) sum[i] += g_->slots[r]->data<float>()[i];
    g_->sync.arrive_and_wait();
    std::copy(sum.begin(), sum.end(), t.data<float>());
    g_->sync.arrive_and_wait();
    return Status::ok();
  }
  Status all_gather(const Tensor& in, Tensor& out) override {
    g_->slots[rank_] = &in;
    g_->sync.arrive_and_wait();
    for (int r = 0; r < g_->world; ++r)
      std::copy_n(g_->slots[r]->data<float>(), in.numel(), out.data<float>() + r * in.numel());
    g_->sync.arrive_and_wait();
    return Status::ok();
  }
  Status broadcast(Tensor& t, int root) override {
    g_->slots[rank_] = &t;
    g_->sync.arrive_and_wait();
    if (rank_ != root) std::copy_n(g_->slots[root]->data<float>(), t.numel(), t.data<float>());
    g_->sync.arrive_and_wait();
    return Status::ok();
  }
  Status barrier() override {
    g_->sync.arrive_and_wait();
    return Status::ok();
  }

 private:
  std::shared_ptr<FakeGroup> g_;
  int rank_;
};

}  // namespace

void run_ranks(int world, const std::function<void(int, Communicator&)>& fn) {
  auto group = std::make_shared<FakeGroup>(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      FakeCommunicator comm(group, r);
      fn(r, comm);
    });
  for (auto& t : threads) t.join();
}

Expected<TpRun> run_greedy(const Fixture& f, Communicator& comm, int decode_steps) {
  Glm5Options c;
  c.latent_dtype = DType::kF32;
  c.page_size = 16;
  c.num_pages = 64;
  auto model = load_model(f, comm, c);
  if (!model) return internal_error(f.name + ": the model did not load (rank " + std::to_string(comm.rank()) + ")");
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), f.prompt_ids, true};
  auto r = model->step({&e, 1});
  if (!r) return r.status().with_context(f.name + " prefill");
  TpRun out;
  out.prefill = (*r)[0].logits;
  Tensor last = rows_of(out.prefill, out.prefill.size(0) - 1, out.prefill.size(0));
  for (int i = 0; i < decode_steps; ++i) {
    const float* p = last.data<float>();
    const int32_t tok = static_cast<int32_t>(std::max_element(p, p + last.numel()) - p);
    out.tokens.push_back(tok);
    StepEntry d{seq.get(), std::span<const int32_t>(&tok, 1), false};
    auto rd = model->step({&d, 1});
    if (!rd) return rd.status().with_context(f.name + " decode step " + std::to_string(i));
    last = (*rd)[0].logits;
    out.decode.push_back(last);
  }
  return out;
}

Status write_tp_run(const std::string& path, const TpRun& run) {
  std::vector<std::pair<std::string, Tensor>> tensors = {{"prefill", run.prefill}};
  for (size_t i = 0; i < run.decode.size(); ++i) tensors.emplace_back("decode." + std::to_string(i), run.decode[i]);
  Tensor tokens = Tensor::empty({static_cast<int64_t>(run.tokens.size())}, DType::kI32);
  std::copy(run.tokens.begin(), run.tokens.end(), tokens.data<int32_t>());
  tensors.emplace_back("tokens", tokens);
  return write_safetensors(path, tensors);
}

Expected<TpRun> read_tp_run(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  if (!file) return file.status();
  // The file's tensors are views of its mapping: copy them out.
  auto get = [&](const std::string& name) -> Expected<Tensor> {
    auto t = (*file)->tensor(name);
    if (!t) return t.status();
    return t->contiguous();
  };
  TpRun run;
  auto prefill = get("prefill");
  if (!prefill) return prefill.status();
  run.prefill = *prefill;
  auto tokens = get("tokens");
  if (!tokens) return tokens.status();
  if (tokens->dtype() != DType::kI32) return invalid_argument(path + ": tokens is not i32");
  run.tokens.assign(tokens->data<int32_t>(), tokens->data<int32_t>() + tokens->numel());
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    auto d = get("decode." + std::to_string(i));
    if (!d) return d.status();
    run.decode.push_back(*d);
  }
  return run;
}

double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double md = 0, mb = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    md = std::max(md, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    mb = std::max(mb, std::fabs(static_cast<double>(b.data<float>()[i])));
  }
  return mb > 0 ? md / mb : md;
}

Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) { return t.slice(0, r0, r1).contiguous(); }

}  // namespace tf::test
