// The built-in demo checkpoint (src/engine/demo_checkpoint.h): deterministic bytes, a config the
// parser accepts with the intended geometry, every tensor the model needs (official names and
// dtypes, within the size budget), a model that loads on the CPU ops and decodes greedily to
// finite logits and varied tokens, the tokenizer (special ids, parity with transformers.js), the
// official chat template byte for byte and rendered by our Jinja engine, and the cache folder
// logic (reuse, concurrent creation, repair).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <ctime>

#include "comm/communicator.h"
#include "engine/demo_checkpoint.h"
#include "engine/demo_weights.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/glm5_weight_spec.h"
#include "model/safetensors.h"
#include "model/weight_source.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path scratch(const std::string& what) {
  static int counter = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("tf_demo_test_" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(counter++));
  fs::remove_all(p);
  return p;
}

// One checkpoint written once for the read-only tests.
class DemoCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(scratch("shared"));
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = write_demo_checkpoint(*dir_);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    std::printf("demo checkpoint written in %.2f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static const fs::path& dir() { return *dir_; }
  static Glm5Config config() {
    Expected<Glm5Config> c = load_glm5_config(dir().string());
    EXPECT_TRUE(c.has_value()) << c.status().to_string();
    return c.has_value() ? *c : Glm5Config{};
  }
  static std::unique_ptr<text::Tokenizer> tokenizer() {
    auto t = text::Tokenizer::from_directory(dir());
    EXPECT_TRUE(t.has_value()) << t.status().to_string();
    return t.has_value() ? std::move(t).value() : nullptr;
  }
  static fs::path* dir_;
};
fs::path* DemoCheckpoint::dir_ = nullptr;

TEST_F(DemoCheckpoint, TwoWritesAreByteIdentical) {
  const fs::path other = scratch("second");
  ASSERT_TRUE(write_demo_checkpoint(other).is_ok());
  for (const char* name : kDemoCheckpointFiles) {
    ASSERT_TRUE(fs::exists(dir() / name)) << name;
    EXPECT_TRUE(read_file(dir() / name) == read_file(other / name)) << name << " differs between two writes";
  }
  // Nothing else (no temporary files) is left in the folder.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(other)) ++entries;
  EXPECT_EQ(entries, std::size(kDemoCheckpointFiles));
  fs::remove_all(other);
}

TEST_F(DemoCheckpoint, ConfigHasTheScaledDownGeometry) {
  const Glm5Config c = config();
  const Glm5TextConfig& t = c.text;
  EXPECT_EQ(c.model_type, "glm5_next");
  EXPECT_TRUE(c.nested);
  // A small vision tower whose features have the text width.
  EXPECT_TRUE(c.vision.present);
  EXPECT_EQ(c.vision.depth, 2);
  EXPECT_EQ(c.vision.hidden_size, 64);
  EXPECT_EQ(c.vision.out_hidden_size, t.hidden_size);
  EXPECT_TRUE(c.quantization.method.empty());
  EXPECT_EQ(t.hidden_size, 256);
  EXPECT_EQ(t.num_hidden_layers, 8);
  ASSERT_EQ(t.layer_types.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(t.layer_types[i], i % 4 == 3 ? AttentionKind::kSparseMla : AttentionKind::kLinear) << i;
    EXPECT_EQ(t.mlp_layer_types[i], i == 0 ? MlpKind::kDense : MlpKind::kSparse) << i;
    EXPECT_EQ(t.indexer_types[i], IndexerKind::kFull) << i;
  }
  EXPECT_EQ(t.n_routed_experts, 16);
  EXPECT_EQ(t.num_experts_per_tok, 4);
  EXPECT_EQ(t.n_shared_experts, 1);
  EXPECT_EQ(t.index_kpool, 4);
  EXPECT_LT(t.index_topk, 64);  // smaller than a chat prompt plus its answer: the selection is sparse
  EXPECT_EQ(t.index_topk % t.index_kpool, 0);
  EXPECT_EQ(t.hc_mult, 4);
  EXPECT_EQ(t.num_nextn_predict_layers, 1);
  const DemoTokenizerInfo info = demo_tokenizer_info();
  EXPECT_EQ(t.vocab_size, info.vocab_size);
  EXPECT_EQ(t.vocab_size % 64, 0);
  EXPECT_GE(t.vocab_size, info.base_vocab_size + 36);
  EXPECT_EQ(info.num_merges, 1500);
  // Token ids are the demo's: the official ids shifted to follow the base vocabulary.
  const int64_t base = info.base_vocab_size;
  EXPECT_EQ(t.eos_token_ids, (std::vector<int64_t>{base + 0, base + 7, base + 9}));
  EXPECT_EQ(t.pad_token_id.value_or(-1), base);
  EXPECT_EQ(c.image_token_id, base + 34);
  EXPECT_EQ(c.video_end_token_id, base + 13);
  EXPECT_EQ(demo_token_id(154820), base);
  EXPECT_EQ(demo_token_id(154855), base + 35);
  EXPECT_EQ(demo_token_id(154856), -1);
  EXPECT_EQ(demo_token_id(5), -1);
  // generation_config.json: the official fields, ids mapped.
  const json g = json::parse(read_file(dir() / "generation_config.json"));
  EXPECT_EQ(g.at("eos_token_id"), json::array({base + 0, base + 7, base + 9}));
  EXPECT_EQ(g.at("pad_token_id"), base);
  EXPECT_EQ(g.at("top_p"), 0.95);
  EXPECT_EQ(g.at("temperature"), 1.0);
}

TEST_F(DemoCheckpoint, OfficialFilesAreByteIdentical) {
  const fs::path official = fs::path(TF_TEST_DATA_DIR) / "glm53";
  EXPECT_TRUE(read_file(dir() / "chat_template.jinja") == read_file(official / "chat_template.jinja"));
  EXPECT_TRUE(read_file(dir() / "tokenizer_config.json") == read_file(official / "tokenizer_config.json"));
  EXPECT_EQ(read_file(dir() / "chat_template.jinja").size(), 10644u);
}

TEST_F(DemoCheckpoint, WeightsAreCompleteWithOfficialNamesAndDtypes) {
  const Glm5Config c = config();
  auto ckpt = Checkpoint::open(dir().string());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  const uintmax_t bytes = fs::file_size(dir() / "model.safetensors");
  std::printf("model.safetensors: %.2f MB, %zu tensors\n", bytes / 1e6, (*ckpt)->names().size());
  EXPECT_LE(bytes, 25u * 1000 * 1000);
  const auto spec = glm5_weight_spec(c, WeightSpecOptions{});
  EXPECT_EQ((*ckpt)->names().size(), spec.size());
  bool saw_mtp = false;
  for (const WeightSpecEntry& e : spec) {
    const TensorEntry* t = (*ckpt)->find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    const bool f32 = e.name.find("hc_attn_base") != std::string::npos || e.name.find("hc_ffn_base") != std::string::npos ||
                     e.name.find("_scale") != std::string::npos || e.name.find("A_log") != std::string::npos ||
                     e.name.find("dt_bias") != std::string::npos ||
                     e.name.find("e_score_correction_bias") != std::string::npos;
    EXPECT_EQ(t->dtype, f32 ? DType::kF32 : DType::kBF16) << e.name;
    saw_mtp = saw_mtp || e.name.find("layers.8.eh_proj") != std::string::npos;
  }
  EXPECT_TRUE(saw_mtp);
  auto ws = open_weight_source(dir().string(), c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  std::vector<Status> problems;
  EXPECT_TRUE(validate_checkpoint(**ws, c, &problems).is_ok());
  for (const Status& p : problems) ADD_FAILURE() << p.to_string();
  EXPECT_TRUE((*ws)->unknown_tensors().empty());
  // Scales as intended: matrices ~N(0, 0.02), norms 1, A_log in [0, ln 16], dt_bias in [-6.9, -2.3].
  auto stats = [&](const std::string& name) {
    Expected<Tensor> t = (*ws)->get_f32(name);
    EXPECT_TRUE(t.has_value()) << name;
    const std::vector<float> v = t->to_vector();
    double sum = 0, sq = 0, lo = 1e30, hi = -1e30;
    for (float x : v) sum += x, sq += double(x) * x, lo = std::min(lo, double(x)), hi = std::max(hi, double(x));
    const double mean = sum / v.size();
    return std::array<double, 4>{mean, std::sqrt(sq / v.size() - mean * mean), lo, hi};
  };
  const auto q = stats("model.language_model.layers.0.self_attn.q_proj.weight");
  EXPECT_NEAR(q[0], 0.0, 0.001);
  EXPECT_NEAR(q[1], 0.02, 0.001);
  const auto n = stats("model.language_model.layers.3.input_layernorm.weight");
  EXPECT_EQ(n[2], 1.0);
  EXPECT_EQ(n[3], 1.0);
  const auto a = stats("model.language_model.layers.1.self_attn.A_log");
  EXPECT_GE(a[2], 0.0);
  EXPECT_LE(a[3], 2.78);
  const auto dt = stats("model.language_model.layers.1.self_attn.dt_bias");
  EXPECT_GE(dt[2], -6.91);
  EXPECT_LE(dt[3], -2.30);
}

TEST(DemoWeights, HashNormalIsCenteredUnitAndKeyedByName) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = demo_normal(1, "w", i);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n), 1.0, 0.01);
  EXPECT_NE(demo_normal(1, "w", 7), demo_normal(1, "v", 7));
  EXPECT_NE(demo_normal(1, "w", 7), demo_normal(2, "w", 7));
  EXPECT_EQ(demo_normal(1, "w", 7), demo_normal(1, "w", 7));
}

std::string render_chat(const fs::path& dir, const nlohmann::ordered_json& messages) {
  auto tmpl = ChatTemplate::load((dir / "chat_template.jinja").string(), (dir / "tokenizer_config.json").string());
  EXPECT_TRUE(tmpl.has_value()) << tmpl.status().to_string();
  if (!tmpl.has_value()) return {};
  ChatTemplateRequest req;
  req.messages = messages;
  auto prompt = tmpl->render(req);
  EXPECT_TRUE(prompt.has_value()) << prompt.status().to_string();
  return prompt.has_value() ? prompt->text : std::string();
}

TEST_F(DemoCheckpoint, ChatTemplateRendersAConversation) {
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hello"},
      {"role": "assistant", "content": "Hi! How can I help?", "reasoning_content": "Greet back."},
      {"role": "user", "content": "Tell me a joke."}])");
  const std::string text = render_chat(dir(), messages);
  EXPECT_EQ(text.rfind("[gMASK]<sop>", 0), 0u) << text;
  EXPECT_NE(text.find("<|system|>You are a helpful assistant.<|user|>Hello<|assistant|><think>Greet back.</think>Hi! How can I help?<|user|>Tell me a joke."),
            std::string::npos)
      << text;
  EXPECT_TRUE(text.ends_with("<|assistant|><think>")) << text;
}

TEST_F(DemoCheckpoint, TokenizerSpecialIdsAndHello) {
  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  const int64_t base = demo_tokenizer_info().base_vocab_size;
  EXPECT_EQ(tok->vocab_size(), static_cast<size_t>(base + 36));
  for (const SpecialToken& s : glm53_special_tokens()) {
    EXPECT_EQ(tok->token_to_id(s.text).value_or(-1), demo_token_id(s.id)) << s.text;
    EXPECT_TRUE(tok->is_special(static_cast<text::TokenId>(demo_token_id(s.id)))) << s.text;
  }
  const std::vector<text::TokenId> hello = tok->encode("Hello");
  ASSERT_FALSE(hello.empty());
  for (text::TokenId id : hello) EXPECT_LT(id, base);
  std::vector<text::TokenId> expected = {static_cast<text::TokenId>(base + 2), static_cast<text::TokenId>(base + 4),
                                         static_cast<text::TokenId>(base + 7)};
  expected.insert(expected.end(), hello.begin(), hello.end());
  for (int64_t k : {8, 21, 22}) expected.push_back(static_cast<text::TokenId>(base + k));
  EXPECT_EQ(tok->encode("[gMASK]<sop><|user|>Hello<|assistant|><think></think>"), expected);
  // "Hello" is frequent in the corpus: one token (ignore_merges finds it whole).
  EXPECT_EQ(hello.size(), 1u);
  EXPECT_EQ(tok->eos_token_ids(), (std::vector<text::TokenId>{static_cast<text::TokenId>(base),
                                                                static_cast<text::TokenId>(base + 7),
                                                                static_cast<text::TokenId>(base + 9)}));
  // Lossless on text outside the corpus.
  const std::string s = "Grüße, 世界! 🚀 x=42;\n\tdone <|user|>";
  EXPECT_EQ(tok->decode(tok->encode(s)), s);
}

TEST_F(DemoCheckpoint, ModelDecodesFiniteAndVaried) {
  const Glm5Config c = config();
  auto ws = open_weight_source(dir().string(), c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto ops = make_cpu_ops();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(c, **ws, *ops, *comm);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  EXPECT_TRUE((*model)->has_mtp());
  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  const std::string prompt = render_chat(dir(), nlohmann::ordered_json::parse(
                                                    R"([{"role": "user", "content": "Hello! Can you write a short poem about the sea?"}])"));
  const std::vector<text::TokenId> ids = tok->encode(prompt);
  ASSERT_GT(ids.size(), 20u);
  auto seq = (*model)->new_sequence();
  StepEntry prefill{seq.get(), std::span<const int32_t>(ids.data(), ids.size()), true};
  auto r = (*model)->step({&prefill, 1});
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  const int64_t vocab = c.text.vocab_size;
  auto finite = [](const Tensor& t) {
    const std::vector<float> v = t.to_vector();
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
  };
  EXPECT_TRUE(finite((*r)[0].logits));
  ASSERT_EQ((*r)[0].logits.size(1), vocab);
  Tensor last = (*r)[0].logits.slice(0, (*r)[0].logits.size(0) - 1, (*r)[0].logits.size(0)).contiguous();
  std::vector<int32_t> out;
  double decode_s = 0, decode_cpu_s = 0;
  // Process CPU time: with TF_THREADS=1 it is the one-core cost, unaffected by a busy machine.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  };
  for (int i = 0; i < 32; ++i) {
    const float* p = last.data<float>();
    // Greedy over real tokens only (padding rows have no token).
    const int32_t next = static_cast<int32_t>(std::max_element(p, p + tok->vocab_size()) - p);
    out.push_back(next);
    StepEntry d{seq.get(), std::span<const int32_t>(&next, 1), false};
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    auto rd = (*model)->step({&d, 1});
    decode_cpu_s += cpu_now() - c0;
    decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(rd.has_value()) << rd.status().to_string();
    last = (*rd)[0].logits;
    ASSERT_TRUE(finite(last)) << "decode step " << i;
  }
  const std::set<int32_t> distinct(out.begin(), out.end());
  std::string shown;
  for (int32_t id : out) shown += std::to_string(id) + " ";
  std::printf("greedy: %zu distinct of 32 [%s]\n  text: %s\n  decode step: %.2f ms wall, %.2f ms CPU (TF_THREADS=%s)\n",
              distinct.size(), shown.c_str(), json(tok->decode(out)).dump(-1, ' ', false, json::error_handler_t::replace).c_str(), decode_s / 32 * 1e3,
              decode_cpu_s / 32 * 1e3,
              std::getenv("TF_THREADS") ? std::getenv("TF_THREADS") : "all");
  EXPECT_GE(distinct.size(), 4u) << "greedy decoding repeats itself: " << shown;
  EXPECT_GE(seq->length(), static_cast<int64_t>(ids.size() + 32));
}

// The MTP layer (num_nextn_predict_layers 1) drafts from the main model's hidden states.
TEST_F(DemoCheckpoint, MtpLayerDraftsFiniteLogits) {
  const Glm5Config c = config();
  auto ws = open_weight_source(dir().string(), c);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto ops = make_cpu_ops();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(c, **ws, *ops, *comm);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  const std::vector<text::TokenId> ids = tok->encode("[gMASK]<sop><|user|>Write a function that sorts a list.<|assistant|><think>");
  auto seq = (*model)->new_sequence();
  StepEntry e{seq.get(), std::span<const int32_t>(ids.data(), ids.size()), true};
  e.want_hidden = true;  // the MTP draft below reads the hidden states
  auto r = (*model)->step({&e, 1});
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  const Tensor& logits = (*r)[0].logits;
  const int64_t t = logits.size(0);
  ASSERT_EQ(t, static_cast<int64_t>(ids.size()));
  ASSERT_EQ((*r)[0].hidden.size(0), t);
  // Position i's draft is conditioned on token i+1: the prompt's next tokens, then the greedy one.
  std::vector<int32_t> next(ids.begin() + 1, ids.end());
  const float* last = logits.data<float>() + (t - 1) * logits.size(1);
  next.push_back(static_cast<int32_t>(std::max_element(last, last + logits.size(1)) - last));
  auto draft = (*model)->mtp_step(*seq, (*r)[0].hidden, next);
  ASSERT_TRUE(draft.has_value()) << draft.status().to_string();
  ASSERT_EQ(draft->logits.size(0), t);
  ASSERT_EQ(draft->logits.size(1), c.text.vocab_size);
  const std::vector<float> v = draft->logits.to_vector();
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }));
  // Not a constant output: the drafts differ between positions.
  EXPECT_NE(std::vector<float>(v.begin(), v.begin() + c.text.vocab_size),
            std::vector<float>(v.end() - c.text.vocab_size, v.end()));
}

TEST(DemoCheckpointCache, CreatesReusesRepairsAndSurvivesRaces) {
  const fs::path root = scratch("cache");
  // Four threads at once on an empty cache: all succeed with the same complete folder.
  std::vector<Expected<fs::path>> results(4, Expected<fs::path>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { results[i] = ensure_demo_checkpoint(root); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    EXPECT_EQ(*r, *results[0]);
  }
  const fs::path dir = *results[0];
  EXPECT_EQ(dir, root / ("demo-glm5-v" + std::to_string(kDemoCheckpointVersion)));
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(root)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{dir.filename().string()}) << "temporary folders left behind";
  for (const char* name : kDemoCheckpointFiles) EXPECT_TRUE(fs::exists(dir / name)) << name;

  // Present and complete: reused, not rewritten.
  const auto stamp = fs::last_write_time(dir / "model.safetensors");
  auto again = ensure_demo_checkpoint(root);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, dir);
  EXPECT_EQ(fs::last_write_time(dir / "model.safetensors"), stamp);

  // Incomplete (a file deleted): regenerated.
  fs::remove(dir / "tokenizer.json");
  auto repaired = ensure_demo_checkpoint(root);
  ASSERT_TRUE(repaired.has_value()) << repaired.status().to_string();
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));

  // A checkpoint folder that cannot be created is an error naming it.
  {
    std::ofstream(root / "blocker") << "x";
    const Status s = write_demo_checkpoint(root / "blocker" / "demo");
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("blocker"), std::string::npos) << s.to_string();
    fs::remove(root / "blocker");
  }
  // A cache root that cannot be created is an error naming it.
  const fs::path file = root / "plain_file";
  std::ofstream(file) << "x";
  auto bad = ensure_demo_checkpoint(file / "sub");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("plain_file"), std::string::npos) << bad.status().to_string();
  fs::remove_all(root);
}

TEST(DemoCheckpointCache, DefaultCacheRootFollowsTheEnvironment) {
  auto restore = [](const char* name, const char* old) {
    if (old) ::setenv(name, old, 1); else ::unsetenv(name);
  };
  const char* names[] = {"TF_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::optional<std::string>> saved;
  for (const char* n : names) saved.push_back(std::getenv(n) ? std::optional<std::string>(std::getenv(n)) : std::nullopt);
  ::setenv("TF_CACHE_DIR", "/c/tf", 1);
  ::setenv("XDG_CACHE_HOME", "/c/xdg", 1);
  ::setenv("HOME", "/c/home", 1);
  EXPECT_EQ(default_cache_root(), fs::path("/c/tf"));
  ::setenv("TF_CACHE_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(default_cache_root(), fs::path("/c/xdg/tensorfold"));
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_root(), fs::path("/c/home/.cache/tensorfold"));
  ::unsetenv("HOME");
  ::unsetenv("TF_CACHE_DIR");
  EXPECT_EQ(default_cache_root().filename(), "tensorfold-cache");
  for (size_t i = 0; i < 3; ++i) restore(names[i], saved[i] ? saved[i]->c_str() : nullptr);
}

// Parity with transformers.js on the demo tokenizer (tests/tools/demo_tokenizer_reference.js).
TEST_F(DemoCheckpoint, TokenizerParityWithTransformersJs) {
  const fs::path tests_dir = fs::path(TF_TEST_DATA_DIR).parent_path();
  ASSERT_TRUE(fs::exists(tests_dir / "node_modules" / "@lenml" / "tokenizers"))
      << "run `npm ci` in " << tests_dir.string() << " (scripts/test.sh does it)";
  const fs::path out = fs::path(TF_BINARY_DIR) / "demo_tokenizer_reference.json";
  const std::string cmd = "node \"" + (tests_dir / "tools" / "demo_tokenizer_reference.js").string() + "\" \"" +
                          dir().string() + "\" \"" + out.string() + "\" 3000";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const json ref = json::parse(read_file(out));
  auto tok = tokenizer();
  ASSERT_TRUE(tok);
  const json& corpus = ref.at("corpus");
  ASSERT_GE(corpus.size(), 3000u);
  size_t id_mismatch = 0, decode_mismatch = 0, skip_mismatch = 0, reported = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string s = corpus[i].get<std::string>();
    const auto expected = ref.at("ids")[i].get<std::vector<text::TokenId>>();
    const auto got = tok->encode(s);
    if (got != expected && reported++ < 10) ADD_FAILURE() << "string #" << i << " " << json(s).dump();
    id_mismatch += got != expected;
    decode_mismatch += tok->decode(expected, false) != ref.at("decoded")[i].get<std::string>();
    skip_mismatch += tok->decode(expected, true) != ref.at("decoded_skip")[i].get<std::string>();
  }
  EXPECT_EQ(id_mismatch, 0u);
  EXPECT_EQ(decode_mismatch, 0u);
  EXPECT_EQ(skip_mismatch, 0u);
  // The chat prompts at the front of the corpus use the demo's special ids.
  const int64_t base = demo_tokenizer_info().base_vocab_size;
  EXPECT_EQ(ref.at("ids")[0][0].get<int64_t>(), base + 2);
}

}  // namespace
}  // namespace tf
