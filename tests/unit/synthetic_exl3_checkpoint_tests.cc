// `tensorfold synth-checkpoint --exl3`: a tiny synthetic checkpoint whose routed experts are EXL3
// (K=4 mcg and K=3 mul1) in the release's layout: files and index agree, the quantization_config
// is the served one, validate_exl3_checkpoint accepts it, the normal loader builds the EXL3 expert
// tables, and the model decodes finite, varied tokens on the CPU backend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "comm/communicator.h"
#include "engine/synthetic_checkpoint.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/exl3_weights.h"
#include "model/glm5/glm5_model.h"
#include "model/safetensors.h"
#include "model/weight_source.h"
#include "synthetic_decode_testing.h"

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

struct Written {
  fs::path dir;
  SyntheticSummary summary;
};

Written write_tiny(int bits, Exl3Codebook cb) {
  static int counter = 0;
  Written w;
  w.dir = fs::temp_directory_path() /
          ("tf_synth_exl3_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(w.dir);
  SyntheticCheckpointOptions o;
  auto g = synthetic_geometry_preset("tiny");
  EXPECT_TRUE(g.has_value());
  o.geometry = *g;
  o.shard_bytes = 1 << 20;
  Exl3SyntheticOptions x;
  x.bits = bits;
  x.codebook = cb;
  o.exl3 = x;
  auto s = write_synthetic_checkpoint(w.dir, o);
  EXPECT_TRUE(s.has_value()) << s.status().to_string();
  if (s.has_value()) w.summary = *s;
  return w;
}

TEST(SyntheticExl3, FilesIndexAndConfigAreTheServedLayout) {
  const Written w = write_tiny(4, Exl3Codebook::kMcg);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(w.dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>(w.summary.files.begin(), w.summary.files.end()));
  uint64_t bytes = 0;
  for (const std::string& f : w.summary.files) bytes += fs::file_size(w.dir / f);
  EXPECT_EQ(bytes, w.summary.bytes);

  const json config = json::parse(read_file(w.dir / "config.json"));
  const json& q = config.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "exl3");
  EXPECT_EQ(q.at("bits"), 4);
  EXPECT_EQ(q.at("codebook"), "mcg");
  EXPECT_EQ(q.at("head_bits"), 16);
  EXPECT_EQ(q.at("scope"), "glm53_routed_experts_only");

  // Every tensor of the index is where it says, the routed experts only as EXL3 tensors.
  const json index = json::parse(read_file(w.dir / "model.safetensors.index.json"));
  auto ckpt = Checkpoint::open(w.dir.string());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  EXPECT_EQ(index["weight_map"].size(), (*ckpt)->names().size());
  EXPECT_EQ(index["weight_map"].size(), w.summary.tensors);
  uint64_t data = 0;
  int trellis = 0;
  for (const std::string& n : (*ckpt)->names()) {
    EXPECT_EQ((*ckpt)->file_of(n), (w.dir / index["weight_map"][n].get<std::string>()).string()) << n;
    const TensorEntry* e = (*ckpt)->find(n);
    data += e->data_end - e->data_begin;
    if (n.find(".mlp.experts.") != std::string::npos) {
      EXPECT_TRUE(n.ends_with(".trellis") || n.ends_with(".suh") || n.ends_with(".svh") || n.ends_with(".mcg")) << n;
      trellis += n.ends_with(".trellis");
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), data);
  Expected<Glm5Config> c = load_glm5_config(w.dir.string());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  const int moe_layers = c->text.num_hidden_layers - static_cast<int>(std::count(
      c->text.mlp_layer_types.begin(), c->text.mlp_layer_types.end(), MlpKind::kDense)) + c->text.num_nextn_predict_layers;
  EXPECT_EQ(trellis, 3 * c->text.n_routed_experts * moe_layers);
  std::vector<Status> problems;
  EXPECT_TRUE(validate_exl3_checkpoint(**ckpt, *c, &problems).is_ok())
      << (problems.empty() ? "" : problems[0].to_string());
  fs::remove_all(w.dir);
}

TEST(SyntheticExl3, LoadsAndDecodesOnTheCpu) {
  for (auto [bits, cb] : {std::pair{4, Exl3Codebook::kMcg}, std::pair{3, Exl3Codebook::kMul1}}) {
    const Written w = write_tiny(bits, cb);
    const std::vector<int32_t> out = cpu_greedy_tokens(w.dir.string(), 12);
    EXPECT_EQ(out.size(), 12u);
    EXPECT_GE(std::set<int32_t>(out.begin(), out.end()).size(), 3u) << "K=" << bits;
    fs::remove_all(w.dir);
  }
}

TEST(SyntheticExl3, RefusesBadBits) {
  SyntheticCheckpointOptions o;
  o.geometry = *synthetic_geometry_preset("tiny");
  Exl3SyntheticOptions x;
  x.bits = 9;
  o.exl3 = x;
  const fs::path dir = fs::temp_directory_path() / ("tf_synth_exl3_bad_" + std::to_string(::getpid()));
  auto s = write_synthetic_checkpoint(dir, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.status().to_string().find("--bits 9"), std::string::npos) << s.status().to_string();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tf
