// Properties of the CPU ops the model relies on: the two KDA forms agree and
// compose over splits, the conv state carries across calls, rows are
// independent of the batch, Sinkhorn gives a doubly-stochastic mix, the paged
// latent store round-trips, the router respects its groups, top-k tie rules.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "glm5_fixture.h"

namespace tf::test {
namespace {

Tensor random_tensor(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v) x = d(rng);
  return Tensor::from_floats(shape, v);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

TEST(Glm5Ops, KdaChunkedEqualsRecurrentAndComposes) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(7);
  const int64_t t = 150, h = 3, dk = 16, dv = 8;
  Tensor q = random_tensor({t, h, dk}, rng), k = random_tensor({t, h, dk}, rng), v = random_tensor({t, h, dv}, rng);
  Tensor g = random_tensor({t, h, dk}, rng, 0.5f);
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = -std::fabs(g.data<float>()[i]);  // decays
  Tensor beta = random_tensor({t, h}, rng);
  ops.sigmoid(beta, beta);
  Tensor s0 = random_tensor({h, dk, dv}, rng, 0.1f);
  Tensor s_rec = s0.contiguous(), s_chunk = s0.contiguous(), s_small = s0.contiguous();
  Tensor o_rec = Tensor::empty({t, h, dv}, DType::kF32), o_chunk = o_rec.contiguous(), o_small = o_rec.contiguous();
  ops.kda_recurrent(o_rec, q, k, v, g, beta, s_rec);
  ops.kda_chunked(o_chunk, q, k, v, g, beta, s_chunk, 64);
  ops.kda_chunked(o_small, q, k, v, g, beta, s_small, 16);
  EXPECT_LE(max_abs_diff(o_chunk, o_rec), 1e-5);
  EXPECT_LE(max_abs_diff(o_small, o_rec), 1e-5);
  EXPECT_LE(max_abs_diff(s_chunk, s_rec), 1e-5);
  // Two calls (100 + 50 tokens) carry the state.
  Tensor s_split = s0.contiguous(), o_split = Tensor::empty({t, h, dv}, DType::kF32);
  Tensor o_a = o_split.slice(0, 0, 100), o_b = o_split.slice(0, 100, t);
  ops.kda_chunked(o_a, q.slice(0, 0, 100), k.slice(0, 0, 100), v.slice(0, 0, 100), g.slice(0, 0, 100),
                  beta.slice(0, 0, 100), s_split, 64);
  ops.kda_recurrent(o_b, q.slice(0, 100, t), k.slice(0, 100, t), v.slice(0, 100, t), g.slice(0, 100, t),
                    beta.slice(0, 100, t), s_split);
  EXPECT_LE(max_abs_diff(o_split, o_rec), 1e-5);
  EXPECT_LE(max_abs_diff(s_split, s_rec), 1e-5);
}

TEST(Glm5Ops, ConvStateCarriesAcrossCalls) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(3);
  const int64_t t = 10, c = 6, kw = 4;
  Tensor x = random_tensor({t, c}, rng), w = random_tensor({c, kw}, rng);
  Tensor st1 = Tensor::zeros({kw - 1, c}, DType::kF32), st2 = st1.contiguous();
  Tensor whole = Tensor::empty({t, c}, DType::kF32), parts = whole.contiguous();
  ops.causal_conv1d_silu(whole, x, st1, w);
  for (int64_t b = 0; b < t; b += 3) {
    const int64_t e = std::min(t, b + 3);
    Tensor out = parts.slice(0, b, e);
    ops.causal_conv1d_silu(out, x.slice(0, b, e), st2, w);
  }
  EXPECT_EQ(max_abs_diff(whole, parts), 0.0);
  EXPECT_EQ(max_abs_diff(st1, st2), 0.0);
  EXPECT_EQ(max_abs_diff(st1, x.slice(0, t - 3, t).contiguous()), 0.0);  // the last K-1 inputs
  // Tap K-1 multiplies the newest row: with only that tap set, out = silu(x * w).
  Tensor w_last = Tensor::zeros({c, kw}, DType::kF32);
  for (int64_t ch = 0; ch < c; ++ch) w_last.data<float>()[ch * kw + kw - 1] = 1.0f;
  Tensor st3 = Tensor::zeros({kw - 1, c}, DType::kF32), o3 = Tensor::empty({t, c}, DType::kF32);
  ops.causal_conv1d_silu(o3, x, st3, w_last);
  const float x0 = x.data<float>()[0];
  EXPECT_FLOAT_EQ(o3.data<float>()[0], x0 / (1.0f + std::exp(-x0)));
}

TEST(Glm5Ops, MatmulRowsIndependentOfBatch) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(5);
  Tensor x = random_tensor({37, 200}, rng), w = random_tensor({300, 200}, rng);
  Tensor all = Tensor::empty({37, 300}, DType::kF32);
  ops.matmul(all, x, w);
  for (int64_t r : {0, 17, 36}) {
    Tensor one = Tensor::empty({1, 300}, DType::kF32);
    ops.matmul(one, x.slice(0, r, r + 1), w);
    EXPECT_EQ(max_abs_diff(one, all.slice(0, r, r + 1).contiguous()), 0.0);
  }
}

TEST(Glm5Ops, SinkhornMixIsDoublyStochastic) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(9);
  const int64_t m = 4, n = 5, mix = (2 + m) * m;
  Tensor logits = random_tensor({n, mix}, rng, 2.0f), base = random_tensor({mix}, rng);
  Tensor scale = Tensor::from_floats({3}, {1.0f, 0.5f, 2.0f});
  Tensor pre = Tensor::empty({n, m}, DType::kF32), post = pre.contiguous(), comb = Tensor::empty({n, m, m}, DType::kF32);
  ops.mhc_coefficients(pre, post, comb, logits, base, scale, 1e-6f, 20);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      float row = 0, col = 0;
      for (int64_t j = 0; j < m; ++j) {
        row += comb.data<float>()[(r * m + i) * m + j];
        col += comb.data<float>()[(r * m + j) * m + i];
      }
      EXPECT_NEAR(col, 1.0f, 1e-5);  // ends on a column normalisation
      EXPECT_NEAR(row, 1.0f, 5e-2);  // 20 iterations leave rows ~1% off on peaked inputs
      EXPECT_GT(pre.data<float>()[r * m + i], 0.0f);
      EXPECT_GE(post.data<float>()[r * m + i], 0.0f);
      EXPECT_LE(post.data<float>()[r * m + i], 2.0f);
    }
  }
}

TEST(Glm5Ops, PagedLatentsRoundTrip) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(11);
  const int64_t r = 32, t = 20;
  Tensor lat = random_tensor({t, r}, rng);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    LatentCachePool pool(ops, 2, r, 8, 6, dt);
    std::vector<int32_t> table;
    ASSERT_TRUE(pool.reserve(table, t).is_ok());
    EXPECT_EQ(table.size(), 3u);
    const Tensor table_dev =
        ops.to_device(Tensor::view_of(table.data(), {static_cast<int64_t>(table.size())}, DType::kI32));
    const LatentPagesView view = pool.view(1, table_dev, t);
    ops.latent_store(view, pool.layer_pages(1), pool.layer_scales(1), lat, 0);
    // One selected token: softmax over one entry is 1, so the output is that latent.
    Tensor q = random_tensor({t, 1, r}, rng);
    std::vector<int32_t> idx(t * 2, -1);
    for (int64_t i = 0; i < t; ++i) idx[i * 2] = static_cast<int32_t>(i);
    Tensor out = Tensor::empty({t, 1, r}, DType::kF32);
    ops.mla_sparse_attention(out, q, view, Tensor::view_of(idx.data(), {t, 2}, DType::kI32), 0.25f);
    const double tol = dt == DType::kF32 ? 0.0 : dt == DType::kBF16 ? 1.0 / 128 : 1.0 / 8;
    for (int64_t i = 0; i < t; ++i) {
      float amax = 0;
      for (int64_t x = 0; x < r; ++x) amax = std::max(amax, std::fabs(lat.data<float>()[i * r + x]));
      for (int64_t x = 0; x < r; ++x)
        ASSERT_LE(std::fabs(out.data<float>()[i * r + x] - lat.data<float>()[i * r + x]), tol * amax)
            << dtype_name(dt) << " token " << i;
    }
    pool.release(table);
    EXPECT_EQ(pool.free_pages(), 6);
  }
}

TEST(Glm5Ops, RouterKeepsItsGroupsAndNormalises) {
  Ops& ops = cpu_ops();
  std::mt19937 rng(13);
  const int64_t n = 16, e = 12;
  Tensor logits = random_tensor({n, e}, rng), bias = random_tensor({e}, rng, 0.1f);
  Tensor w = Tensor::empty({n, 4}, DType::kF32), ids = Tensor::empty({n, 4}, DType::kI32);
  ops.moe_route(w, ids, logits, bias, 3, 2, 4, true, 2.5f);
  for (int64_t r = 0; r < n; ++r) {
    std::set<int> groups;
    float sum = 0;
    for (int j = 0; j < 4; ++j) {
      groups.insert(ids.data<int32_t>()[r * 4 + j] / 4);
      sum += w.data<float>()[r * 4 + j];
      if (j) {
        EXPECT_LT(ids.data<int32_t>()[r * 4 + j - 1], ids.data<int32_t>()[r * 4 + j]);
      }
    }
    EXPECT_LE(groups.size(), 2u);
    EXPECT_NEAR(sum, 2.5f, 1e-5);
  }
}

TEST(Glm5Ops, TopkTieRules) {
  Ops& ops = cpu_ops();
  Tensor x = Tensor::from_floats({1, 6}, {0.0f, 3.0f, 0.0f, 0.0f, 3.0f, -1.0f});
  Tensor v = Tensor::empty({1, 3}, DType::kF32), i = Tensor::empty({1, 3}, DType::kI32);
  ops.topk(v, i, x, 3, TopkTies::kLowerIndex);
  EXPECT_EQ(i.data<int32_t>()[0], 1);
  EXPECT_EQ(i.data<int32_t>()[1], 4);
  EXPECT_EQ(i.data<int32_t>()[2], 0);
  ops.topk(v, i, x, 3, TopkTies::kTorchCpu);  // same values, whichever zero it keeps
  EXPECT_EQ(v.data<float>()[0], 3.0f);
  EXPECT_EQ(v.data<float>()[1], 3.0f);
  EXPECT_EQ(v.data<float>()[2], 0.0f);
}

}  // namespace
}  // namespace tf::test
