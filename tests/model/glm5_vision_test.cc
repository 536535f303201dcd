// The GLM-5.3-Flash vision tower on the CPU backend against transformers 5.17
// (tests/data/model/tiny-vision: a 2-block tower, hidden 64, 4 heads, D_o 64; fp32
// forward on the CPU): two images in one call (vision_features = get_image_features
// of images 0 and 1) and a video of two temporal groups (video_features). Both sides
// compute in f32, so the tolerance is tight: max|Δ| / max|ref| ≤ 1e-5 (kTol).
// Also: segments are independent (an image alone gives, bit for bit, its rows of a
// joint call), a flat text-only checkpoint has no tower, bad grids are errors, and
// the new ops (add_bias, gelu, rotary, segment_attention) against plain double loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "vision_fixture.h"

namespace tf::test {
namespace {

constexpr double kTol = 1e-5;

Ops& cpu() {
  static std::unique_ptr<Ops> ops = make_cpu_ops();
  return *ops;
}

std::unique_ptr<Glm5VisionTower> load_tower(const VisionFixture& f) {
  auto t = Glm5VisionTower::load(f.config, *f.weights, cpu());
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  return t.has_value() ? std::move(*t) : nullptr;
}

Tensor encode(Glm5VisionTower& tower, const Tensor& patches, const std::vector<VisionGrid>& grids) {
  auto out = tower.encode(patches, grids);
  EXPECT_TRUE(out.has_value()) << out.status().to_string();
  return out.has_value() ? cpu().to_host(*out) : Tensor();
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor rows(const Tensor& t, int64_t r0, int64_t r1) { return t.slice(0, r0, r1).contiguous(); }

Tensor random(const Shape& shape, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
  return t;
}

TEST(Glm5Vision, ConfigParsesTheTower) {
  const VisionFixture f = load_vision_fixture();
  const Glm5VisionConfig& v = f.config.vision;
  EXPECT_TRUE(v.present);
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden_size, 64);
  EXPECT_EQ(v.num_heads, 4);
  EXPECT_EQ(v.out_hidden_size, 64);
  EXPECT_DOUBLE_EQ(v.rope_theta, 10000.0);
}

TEST(Glm5Vision, ImagesMatchTransformers) {
  const VisionFixture f = load_vision_fixture();
  auto tower = load_tower(f);
  ASSERT_TRUE(tower);
  EXPECT_EQ(tower->out_hidden(), 64);
  const std::vector<VisionGrid> grids = {f.grid("img0_grid"), f.grid("img1_grid")};
  EXPECT_EQ(grids[0].h, 10);
  EXPECT_EQ(grids[1].w, 10);
  const Tensor got = encode(*tower, concat_rows({f.f32("img0_pixels"), f.f32("img1_pixels")}), grids);
  const Tensor ref = f.f32("vision_features");
  ASSERT_EQ(got.shape(), ref.shape());
  const Deviation d = deviation(got, ref);
  std::printf("[vision] images [1,10,8] + [1,8,10] -> %lld x %lld: max|d| %.3g, max|d|/max|ref| %.3g\n",
              static_cast<long long>(got.size(0)), static_cast<long long>(got.size(1)), d.max_abs, d.rel);
  EXPECT_LE(d.rel, kTol);
}

TEST(Glm5Vision, VideoMatchesTransformers) {
  const VisionFixture f = load_vision_fixture();
  auto tower = load_tower(f);
  ASSERT_TRUE(tower);
  const VisionGrid g = f.grid("video_grid");
  EXPECT_EQ(g.t, 2);
  const Tensor pixels = f.f32("video_pixels");
  const Tensor got = encode(*tower, pixels, {g});
  const Tensor ref = f.f32("video_features");
  ASSERT_EQ(got.shape(), ref.shape());
  const Deviation d = deviation(got, ref);
  std::printf("[vision] video [2,6,8] -> %lld x %lld: max|d| %.3g, max|d|/max|ref| %.3g\n",
              static_cast<long long>(got.size(0)), static_cast<long long>(got.size(1)), d.max_abs, d.rel);
  EXPECT_LE(d.rel, kTol);
  // A grid (t, h, w) is t independent (1, h, w) groups (what get_video_features passes).
  const Tensor split = encode(*tower, pixels, {{1, g.h, g.w}, {1, g.h, g.w}});
  EXPECT_TRUE(bit_equal(split, got));
}

TEST(Glm5Vision, SegmentsAreIndependent) {
  const VisionFixture f = load_vision_fixture();
  auto tower = load_tower(f);
  ASSERT_TRUE(tower);
  const VisionGrid g0 = f.grid("img0_grid"), g1 = f.grid("img1_grid");
  const Tensor p0 = f.f32("img0_pixels"), p1 = f.f32("img1_pixels");
  const Tensor joint = encode(*tower, concat_rows({p0, p1}), {g0, g1});
  const Tensor a = encode(*tower, p0, {g0}), b = encode(*tower, p1, {g1});
  const int64_t n0 = g0.t * g0.h * g0.w / 4;
  ASSERT_EQ(joint.size(0), n0 + b.size(0));
  EXPECT_TRUE(bit_equal(a, rows(joint, 0, n0)));
  EXPECT_TRUE(bit_equal(b, rows(joint, n0, joint.size(0))));
  // In the other order too.
  const Tensor swapped = encode(*tower, concat_rows({p1, p0}), {g1, g0});
  EXPECT_TRUE(bit_equal(b, rows(swapped, 0, b.size(0))));
  EXPECT_TRUE(bit_equal(a, rows(swapped, b.size(0), swapped.size(0))));
}

TEST(Glm5Vision, RowChunksDoNotChangeResults) {
  // A large image first (4048 patches, one segment longer than a row chunk of the
  // encoder's row-wise stages), so that image 0's rows straddle the chunk boundary at
  // row 4096: its features must still be those it gets alone.
  const VisionFixture f = load_vision_fixture();
  auto tower = load_tower(f);
  ASSERT_TRUE(tower);
  const VisionGrid big{1, 44, 92}, g0 = f.grid("img0_grid");
  const Tensor pbig = random({big.h * big.w, tower->patch_width()}, 17);
  const Tensor p0 = f.f32("img0_pixels");
  const Tensor joint = encode(*tower, concat_rows({pbig, p0}), {big, g0});
  const Tensor alone = encode(*tower, p0, {g0});
  const int64_t nbig = big.h * big.w / 4;
  ASSERT_EQ(joint.size(0), nbig + alone.size(0));
  EXPECT_TRUE(bit_equal(alone, rows(joint, nbig, joint.size(0))));
  const Deviation d =
      deviation(rows(joint, nbig, joint.size(0)), f.f32("vision_features").slice(0, 0, 20).contiguous());
  EXPECT_LE(d.rel, kTol);
}

TEST(Glm5Vision, FlatCheckpointHasNoTower) {
  const std::string dir = model_fixture_dir("tiny-flat");
  auto cfg = load_glm5_config(dir);
  ASSERT_TRUE(cfg.has_value()) << cfg.status().to_string();
  EXPECT_FALSE(cfg->vision.present);
  auto ws = open_weight_source(dir, *cfg);
  ASSERT_TRUE(ws.has_value()) << ws.status().to_string();
  auto t = Glm5VisionTower::load(*cfg, **ws, cpu());
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no vision tower"), std::string::npos) << t.status().to_string();
}

TEST(Glm5Vision, BadInputsAreErrors) {
  const VisionFixture f = load_vision_fixture();
  auto tower = load_tower(f);
  ASSERT_TRUE(tower);
  const Tensor p0 = f.f32("img0_pixels");
  // h not a multiple of the merge size.
  auto r = tower->encode(p0, std::vector<VisionGrid>{{1, 5, 16}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("grid 0"), std::string::npos) << r.status().to_string();
  // Rows that do not add up to the grids.
  r = tower->encode(p0, std::vector<VisionGrid>{{1, 8, 8}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("patches"), std::string::npos) << r.status().to_string();
  // bf16 matrices on the CPU backend.
  auto t = Glm5VisionTower::load(f.config, *f.weights, cpu(), DType::kBF16);
  EXPECT_FALSE(t.has_value());
  // No grids, no patches: an empty result.
  auto e = tower->encode(Tensor::empty({0, tower->patch_width()}, DType::kF32), {});
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  EXPECT_EQ(e->size(0), 0);
}

TEST(Glm5Vision, RopeTablesFollowMergeBlockOrder) {
  // hd 16: 4 frequencies f_i = 10000^(-i/4); columns [h·f ; w·f ; h·f ; w·f].
  Tensor cos, sin;
  const std::vector<VisionGrid> grids = {{1, 4, 4}, {2, 2, 2}};
  vision_rope_tables(grids, 2, 16, 10000.0, &cos, &sin);
  ASSERT_EQ(cos.shape(), (Shape{24, 16}));
  // Grid 0 in merge-block order: (0,0) (0,1) (1,0) (1,1) | (0,2) (0,3) (1,2) (1,3) | (2,0) ...
  const int hw[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 0}};
  for (int r = 0; r < 9; ++r) {
    for (int i = 0; i < 4; ++i) {
      const double f = std::pow(10000.0, -i / 4.0);
      EXPECT_NEAR(cos.data<float>()[r * 16 + i], std::cos(hw[r][0] * f), 1e-6) << r << " " << i;
      EXPECT_NEAR(sin.data<float>()[r * 16 + 4 + i], std::sin(hw[r][1] * f), 1e-6) << r << " " << i;
      EXPECT_EQ(cos.data<float>()[r * 16 + i], cos.data<float>()[r * 16 + 8 + i]);
      EXPECT_EQ(sin.data<float>()[r * 16 + 4 + i], sin.data<float>()[r * 16 + 12 + i]);
    }
  }
  // Grid 1's two temporal groups repeat the same coordinates.
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(cos.data<float>()[(16 + 3) * 16 + c], cos.data<float>()[(20 + 3) * 16 + c]);
    EXPECT_EQ(sin.data<float>()[(16 + 1) * 16 + c], sin.data<float>()[(20 + 1) * 16 + c]);
  }
}

// ---- the new ops against plain double loops ---------------------------------

TEST(VisionOps, AddBiasAndGelu) {
  const Tensor x = random({7, 13}, 1), bias = random({13}, 2);
  Tensor out = Tensor::empty({7, 13}, DType::kF32);
  cpu().add_bias(out, x, bias);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t i = 0; i < 13; ++i)
      EXPECT_EQ(out.data<float>()[r * 13 + i], x.data<float>()[r * 13 + i] + bias.data<float>()[i]);
  Tensor g = x.contiguous();
  cpu().gelu(g, g);  // in place
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    EXPECT_NEAR(g.data<float>()[i], 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))), 1e-6);
  }
  Tensor bad = Tensor::empty({7, 12}, DType::kF32);
  EXPECT_THROW(cpu().add_bias(bad, Tensor::empty({7, 12}, DType::kF32), bias), StatusError);
}

TEST(VisionOps, RotaryHalfConvention) {
  const int64_t t = 5, h = 3, d = 8;
  const Tensor x = random({t, h, d}, 3), cos = random({t, d}, 4), sin = random({t, d}, 5);
  Tensor out = x.contiguous();
  cpu().rotary(out, out, cos, sin);  // in place
  for (int64_t r = 0; r < t; ++r)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < d; ++i) {
        const float* xr = x.data<float>() + (r * h + hh) * d;
        const double rot = i < d / 2 ? -xr[i + d / 2] : xr[i - d / 2];
        const double want = xr[i] * cos.data<float>()[r * d + i] + rot * sin.data<float>()[r * d + i];
        EXPECT_NEAR(out.data<float>()[(r * h + hh) * d + i], want, 1e-5);
      }
}

TEST(VisionOps, SegmentAttentionMatchesDoubleLoops) {
  const int64_t t = 41, h = 3, d = 12;
  const std::vector<int32_t> offsets = {0, 1, 18, 18, 41};  // a one-row and an empty segment
  const Tensor q = random({t, h, d}, 6), k = random({t, h, d}, 7), v = random({t, h, d}, 8);
  Tensor off = Tensor::empty({static_cast<int64_t>(offsets.size())}, DType::kI32);
  std::copy(offsets.begin(), offsets.end(), off.data<int32_t>());
  Tensor out = Tensor::empty({t, h, d}, DType::kF32);
  const float scale = 0.3f;
  cpu().segment_attention(out, q, k, v, off, scale);
  double worst = 0;
  for (size_t s = 0; s + 1 < offsets.size(); ++s)
    for (int64_t r = offsets[s]; r < offsets[s + 1]; ++r)
      for (int64_t hh = 0; hh < h; ++hh) {
        auto at = [&](const Tensor& x, int64_t row, int64_t i) {
          return double(x.data<float>()[(row * h + hh) * d + i]);
        };
        std::vector<double> p;
        double m = -INFINITY, sum = 0;
        for (int64_t j = offsets[s]; j < offsets[s + 1]; ++j) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += at(q, r, i) * at(k, j, i);
          p.push_back(dot * scale);
          m = std::max(m, p.back());
        }
        for (double& e : p) sum += (e = std::exp(e - m));
        for (int64_t i = 0; i < d; ++i) {
          double o = 0;
          for (size_t j = 0; j < p.size(); ++j)
            o += p[j] / sum * at(v, offsets[s] + static_cast<int64_t>(j), i);
          worst = std::max(worst, std::fabs(o - out.data<float>()[(r * h + hh) * d + i]));
        }
      }
  std::printf("[vision] segment_attention vs double loops: max|d| %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
  // Offsets that do not cover the rows are refused.
  Tensor bad = Tensor::empty({2}, DType::kI32);
  bad.data<int32_t>()[0] = 0;
  bad.data<int32_t>()[1] = 40;
  EXPECT_THROW(cpu().segment_attention(out, q, k, v, bad, scale), StatusError);
}

}  // namespace
}  // namespace tf::test
