// The fast weight load (WeightSource::get_native: matrices read as stored, views of
// the mapped checkpoint, assembled straight in their final dtype, layers on several
// threads) gives bit for bit the weights of the f32 route (every tensor through
// get_f32, then converted), on every fixture (f32, fused-expert and the FP8/BF16
// mixed checkpoint), for f32 and bf16 matrices, dense and DENSE=q4/fp8, at one rank
// and at both ranks of two; and the views outlive the weight source.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "glm5_fixture.h"
#include "model/glm5/glm5_weights.h"
#include "f32_route_source.h"
#include "model/safetensors.h"

namespace tf::test {
namespace {

// Compares every tensor of two loads: dtype, shape and bytes.
class Compare {
 public:
  int tensors = 0;
  void t(const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.is_null(), b.is_null()) << what;
    if (a.is_null()) return;
    ASSERT_EQ(a.dtype(), b.dtype()) << what;
    ASSERT_EQ(a.shape(), b.shape()) << what;
    const Tensor pa = a.contiguous(), pb = b.contiguous();
    EXPECT_EQ(0, std::memcmp(pa.raw(), pb.raw(), pa.nbytes())) << what << " differs";
    ++tensors;
  }
  void m(const Matrix& a, const Matrix& b, const std::string& what) {
    ASSERT_EQ(a.format(), b.format()) << what;
    if (a.is_dense()) return t(a.dense(), b.dense(), what);
    t(a.codes(), b.codes(), what + " codes");
    t(a.scales(), b.scales(), what + " scales");
  }
  void mlp(const MlpWeights& a, const MlpWeights& b, const std::string& p) {
    m(a.gate_up, b.gate_up, p + "gate_up");
    m(a.down, b.down, p + "down");
    ASSERT_EQ(a.exl3 == nullptr, b.exl3 == nullptr) << p;
  }
  void layer(const LayerWeights& a, const LayerWeights& b, const std::string& p) {
    t(a.input_norm, b.input_norm, p + "input_norm");
    t(a.post_norm, b.post_norm, p + "post_norm");
    for (auto [x, y, n] : {std::tuple{&a.attn_hc, &b.attn_hc, "attn_hc"}, {&a.ffn_hc, &b.ffn_hc, "ffn_hc"}}) {
      t(x->fn, y->fn, p + n + ".fn");
      t(x->base, y->base, p + n + ".base");
      t(x->scale, y->scale, p + n + ".scale");
    }
    const KdaWeights &ka = a.kda, &kb = b.kda;
    for (auto [x, y, n] : {std::tuple{&ka.q_proj, &kb.q_proj, "q_proj"}, {&ka.k_proj, &kb.k_proj, "k_proj"},
                           {&ka.v_proj, &kb.v_proj, "v_proj"}, {&ka.o_proj, &kb.o_proj, "o_proj"}})
      m(*x, *y, p + "kda." + n);
    for (auto [x, y, n] : {std::tuple{&ka.q_conv, &kb.q_conv, "q_conv"}, {&ka.k_conv, &kb.k_conv, "k_conv"},
                           {&ka.v_conv, &kb.v_conv, "v_conv"}, {&ka.f_a, &kb.f_a, "f_a"}, {&ka.f_b, &kb.f_b, "f_b"},
                           {&ka.dt_bias, &kb.dt_bias, "dt_bias"}, {&ka.a_log, &kb.a_log, "a_log"},
                           {&ka.b_proj, &kb.b_proj, "b_proj"}, {&ka.g_a, &kb.g_a, "g_a"}, {&ka.g_b, &kb.g_b, "g_b"},
                           {&ka.o_norm, &kb.o_norm, "o_norm"}})
      t(*x, *y, p + "kda." + n);
    const MlaWeights &ma = a.mla, &mb = b.mla;
    for (auto [x, y, n] : {std::tuple{&ma.q_a, &mb.q_a, "q_a"}, {&ma.q_b, &mb.q_b, "q_b"}, {&ma.kv_a, &mb.kv_a, "kv_a"},
                           {&ma.o_proj, &mb.o_proj, "o_proj"}})
      m(*x, *y, p + "mla." + n);
    for (auto [x, y, n] : {std::tuple{&ma.q_a_norm, &mb.q_a_norm, "q_a_norm"}, {&ma.kv_a_norm, &mb.kv_a_norm, "kv_a_norm"},
                           {&ma.w_uk_t, &mb.w_uk_t, "w_uk_t"}, {&ma.w_uv, &mb.w_uv, "w_uv"}})
      t(*x, *y, p + "mla." + n);
    ASSERT_EQ(ma.indexer.has_value(), mb.indexer.has_value()) << p;
    if (ma.indexer) {
      const IndexerWeights &ia = *ma.indexer, &ib = *mb.indexer;
      for (auto [x, y, n] : {std::tuple{&ia.wq_b, &ib.wq_b, "wq_b"}, {&ia.wk, &ib.wk, "wk"},
                             {&ia.k_norm_w, &ib.k_norm_w, "k_norm_w"}, {&ia.k_norm_b, &ib.k_norm_b, "k_norm_b"},
                             {&ia.weights_proj, &ib.weights_proj, "weights_proj"}, {&ia.ape, &ib.ape, "ape"},
                             {&ia.compress_gate, &ib.compress_gate, "compress_gate"}})
        t(*x, *y, p + "indexer." + n);
    }
    mlp(a.dense, b.dense, p + "dense.");
    t(a.moe.router, b.moe.router, p + "router");
    t(a.moe.bias, b.moe.bias, p + "router bias");
    t(a.moe.experts_gate_up, b.moe.experts_gate_up, p + "experts_gate_up");
    t(a.moe.experts_down, b.moe.experts_down, p + "experts_down");
    const Fp8ExpertStack &fa = a.moe.fp8_experts, &fb = b.moe.fp8_experts;
    for (auto [x, y, n] : {std::tuple{&fa.gate, &fb.gate, "gate"}, {&fa.gate_scales, &fb.gate_scales, "gate scales"},
                           {&fa.up, &fb.up, "up"}, {&fa.up_scales, &fb.up_scales, "up scales"},
                           {&fa.down, &fb.down, "down"}, {&fa.down_scales, &fb.down_scales, "down scales"}})
      t(*x, *y, p + "fp8 experts " + n);
    ASSERT_EQ(a.moe.experts.size(), b.moe.experts.size()) << p;
    for (size_t e = 0; e < a.moe.experts.size(); ++e)
      mlp(a.moe.experts[e], b.moe.experts[e], p + "expert " + std::to_string(e) + ".");
    mlp(a.moe.shared, b.moe.shared, p + "shared.");
  }
  void all(const Glm5Weights& a, const Glm5Weights& b) {
    t(a.embed, b.embed, "embed");
    t(a.norm, b.norm, "norm");
    m(a.lm_head, b.lm_head, "lm_head");
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) layer(a.layers[i], b.layers[i], "layer " + std::to_string(i) + ": ");
    ASSERT_EQ(a.mtp.has_value(), b.mtp.has_value());
    if (!a.mtp) return;
    t(a.mtp->enorm, b.mtp->enorm, "mtp.enorm");
    t(a.mtp->hnorm, b.mtp->hnorm, "mtp.hnorm");
    t(a.mtp->shared_head_norm, b.mtp->shared_head_norm, "mtp.shared_head_norm");
    m(a.mtp->eh_proj, b.mtp->eh_proj, "mtp.eh_proj");
    layer(a.mtp->block, b.mtp->block, "mtp: ");
  }
};

TEST(Glm5Load, NativeRouteEqualsTheF32RouteBitForBit) {
  const std::vector<std::string> dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  int compared = 0;
  for (const std::string& dir : dirs) {
    const Fixture f = load_fixture(dir);
    const auto src = open_weights(f);
    ASSERT_NE(src, nullptr);
    const test::F32RouteSource ref(*src);
    for (DType dt : {DType::kF32, DType::kBF16})
      for (MatrixFormat q : {MatrixFormat::kDense, MatrixFormat::kQ4, MatrixFormat::kFp8Block})
        for (auto [rank, world] : {std::pair{0, 1}, {0, 2}, {1, 2}}) {
          SCOPED_TRACE(f.name + " " + dtype_name(dt) + " format " + std::to_string(static_cast<int>(q)) + " rank " +
                       std::to_string(rank) + "/" + std::to_string(world));
          auto fast = load_glm5_weights(*src, f.config.text, rank, world, dt, q, /*head_quant=*/q);
          auto slow = load_glm5_weights(ref, f.config.text, rank, world, dt, q, /*head_quant=*/q);
          ASSERT_EQ(fast.has_value(), slow.has_value());
          if (!fast.has_value()) {
            EXPECT_EQ(fast.status().to_string(), slow.status().to_string());
            continue;
          }
          Compare c;
          c.all(*fast, *slow);
          EXPECT_GT(c.tensors, 20);
          compared += c.tensors;
        }
  }
  std::printf("[load] %d tensors compared bit for bit over %zu fixtures\n", compared, dirs.size());
}

TEST(Glm5Load, SameWeightsOnOneThreadAndOnMany) {
  const Fixture f = load_fixture(fixture_dirs().front());
  const auto src = open_weights(f);
  ASSERT_NE(src, nullptr);
  setenv("TF_LOAD_THREADS", "1", 1);
  auto one = load_glm5_weights(*src, f.config.text, 0, 1, DType::kBF16);
  setenv("TF_LOAD_THREADS", "7", 1);
  auto many = load_glm5_weights(*src, f.config.text, 0, 1, DType::kBF16);
  unsetenv("TF_LOAD_THREADS");
  ASSERT_TRUE(one.has_value()) << one.status().to_string();
  ASSERT_TRUE(many.has_value()) << many.status().to_string();
  Compare c;
  c.all(*one, *many);
  EXPECT_GT(c.tensors, 20);
}

// Matrices kept as views of the mapped checkpoint stay readable after the source
// (and its Checkpoint, whose files mapped them) is gone.
TEST(Glm5Load, ViewsOutliveTheWeightSource) {
  for (const std::string& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    Expected<Glm5Weights> kept = invalid_argument("unset");
    Expected<Glm5Weights> ref = invalid_argument("unset");
    {
      const auto src = open_weights(f);
      ASSERT_NE(src, nullptr);
      kept = load_glm5_weights(*src, f.config.text, 0, 1, DType::kF32);
      ref = load_glm5_weights(test::F32RouteSource(*src), f.config.text, 0, 1, DType::kF32);
    }
    ASSERT_TRUE(kept.has_value()) << kept.status().to_string();
    ASSERT_TRUE(ref.has_value());
    Compare c;
    c.all(*kept, *ref);
  }
}

// The FP8 release's routed experts load as their own bytes (Fp8ExpertStack) when the
// rank's slice of the intermediate dim is whole 128-blocks, and dequantized (e4m3 *
// scale) they are bit for bit the dense stacks of the route without them; a slice that
// cuts a block (I = 72 over two ranks) loads dense.
TEST(Glm5Load, Fp8ExpertsKeepTheCheckpointBytes) {
  int checked = 0;
  for (const std::string& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    if (f.config.quantization.method != "fp8") continue;
    const auto src = open_weights(f);
    ASSERT_NE(src, nullptr);
    const test::NoFp8Source dense_route(*src);
    auto kept = load_glm5_weights(*src, f.config.text, 0, 1, DType::kF32);
    auto dense = load_glm5_weights(dense_route, f.config.text, 0, 1, DType::kF32);
    ASSERT_TRUE(kept.has_value()) << kept.status().to_string();
    ASSERT_TRUE(dense.has_value()) << dense.status().to_string();
    for (size_t i = 0; i < kept->layers.size(); ++i) {
      const MoeWeights &k = kept->layers[i].moe, &d = dense->layers[i].moe;
      if (d.experts_gate_up.is_null()) continue;  // a dense layer
      SCOPED_TRACE(f.name + " layer " + std::to_string(i));
      ASSERT_GT(k.fp8_experts.num_experts(), 0);
      EXPECT_TRUE(k.experts_gate_up.is_null());
      EXPECT_TRUE(check_fp8_expert_stack(k.fp8_experts, "kept").is_ok());
      const int64_t e = k.fp8_experts.num_experts(), il = k.fp8_experts.intermediate(), h = k.fp8_experts.hidden();
      ASSERT_EQ(d.experts_gate_up.shape(), (Shape{e, 2 * il, h}));
      std::vector<float> gu(static_cast<size_t>(2 * il * h)), dn(static_cast<size_t>(h * il));
      for (int64_t x = 0; x < e; ++x) {
        dequantize_matrix_rows(k.fp8_experts.gate_of(x), 0, il, gu.data());
        dequantize_matrix_rows(k.fp8_experts.up_of(x), 0, il, gu.data() + il * h);
        dequantize_matrix_rows(k.fp8_experts.down_of(x), 0, h, dn.data());
        EXPECT_EQ(0, std::memcmp(gu.data(), d.experts_gate_up.select(0, x).raw(), gu.size() * 4)) << "expert " << x;
        EXPECT_EQ(0, std::memcmp(dn.data(), d.experts_down.select(0, x).raw(), dn.size() * 4)) << "expert " << x;
      }
      // The codes are the checkpoint's bytes: expert 0's gate as stored.
      const auto stored = src->get_fp8("model.language_model.layers." + std::to_string(i) +
                                           ".mlp.experts.0.gate_proj.weight", {il, h});
      ASSERT_TRUE(stored.has_value() && stored->has_value());
      EXPECT_EQ(0, std::memcmp((*stored)->codes().raw(), k.fp8_experts.gate.raw(), static_cast<size_t>(il * h)));
      ++checked;
      // Two ranks cut I = 72 at 36, inside a block: dense stacks.
      if (il % 2 == 0 && (il / 2) % kFp8BlockSize != 0) {
        auto half = load_glm5_weights(*src, f.config.text, 1, 2, DType::kF32);
        ASSERT_TRUE(half.has_value()) << half.status().to_string();
        EXPECT_EQ(half->layers[i].moe.fp8_experts.num_experts(), 0);
        EXPECT_FALSE(half->layers[i].moe.experts_gate_up.is_null());
      }
    }
  }
  EXPECT_GT(checked, 0) << "no FP8 fixture with MoE layers";
}

// A tensor read from a safetensors file keeps the mapping alive.
TEST(Glm5Load, SafetensorsViewOutlivesItsFile) {
  const Fixture f = load_fixture(fixture_dirs().front());
  auto file = SafetensorsFile::open(f.dir + "/model.safetensors");
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  const std::string name = (*file)->entries().front().name;
  auto t = (*file)->tensor(name);
  ASSERT_TRUE(t.has_value());
  const Tensor copy = t->contiguous();
  Tensor view = *t;
  file->reset();
  ASSERT_EQ(view.nbytes(), copy.nbytes());
  EXPECT_EQ(0, std::memcmp(view.raw(), copy.raw(), copy.nbytes()));
}

}  // namespace
}  // namespace tf::test
