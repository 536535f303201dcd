// Ops::moe_experts_exl3 on the CPU backend (the default, per-expert path) against a
// token-by-token reference built from cpu::exl3_matmul, and the table checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/exl3_linear.h"
#include "model/exl3_synthetic.h"

namespace tf {
namespace {

Exl3Weight synthetic(int64_t k, int64_t n, int bits, Exl3Codebook cb, uint64_t salt) {
  Exl3SyntheticOptions o;
  o.bits = bits;
  o.codebook = cb;
  o.seed = 99;
  o.weight_rms = 0.05f;
  return make_synthetic_exl3_linear(k, n, o, salt);
}

Exl3ExpertTable table(int64_t experts, int64_t hidden, int64_t inter) {
  Exl3ExpertTable t;
  t.hidden = hidden;
  t.intermediate = inter;
  for (int64_t e = 0; e < experts; ++e) {
    t.gate.push_back(synthetic(hidden, inter, 4, Exl3Codebook::kMcg, 3 * e));
    t.up.push_back(synthetic(hidden, inter, 4, Exl3Codebook::kMcg, 3 * e + 1));
    t.down.push_back(synthetic(inter, hidden, 4, Exl3Codebook::kMcg, 3 * e + 2));
  }
  return t;
}

Tensor randn(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// One token through its experts, in j order: 0 + w0 * y0 + w1 * y1 + ...
std::vector<float> reference_token(const Exl3ExpertTable& t, const float* x, const int32_t* ids, const float* w,
                                   int64_t k, float limit) {
  const int64_t h = t.hidden, il = t.intermediate;
  std::vector<float> acc(static_cast<size_t>(h), 0.0f);
  const Tensor xt = Tensor::from_floats({1, h}, std::vector<float>(x, x + h));
  for (int64_t j = 0; j < k; ++j) {
    Tensor g = Tensor::empty({1, il}, DType::kF32), u = Tensor::empty({1, il}, DType::kF32);
    cpu::exl3_matmul(g, xt, t.gate[ids[j]]);
    cpu::exl3_matmul(u, xt, t.up[ids[j]]);
    Tensor a = Tensor::empty({1, il}, DType::kF32);
    for (int64_t i = 0; i < il; ++i) {
      const float gc = std::min(g.data<float>()[i], limit);
      const float uc = std::clamp(u.data<float>()[i], -limit, limit);
      a.data<float>()[i] = gc / (1.0f + std::exp(-gc)) * uc;
    }
    Tensor y = Tensor::empty({1, h}, DType::kF32);
    cpu::exl3_matmul(y, a, t.down[ids[j]]);
    for (int64_t c = 0; c < h; ++c) acc[c] += w[j] * y.data<float>()[c];
  }
  return acc;
}

TEST(CpuExl3Moe, EqualsTheTokenByTokenReference) {
  auto ops = make_cpu_ops();
  const int64_t experts = 6, hidden = 256, inter = 200, k = 3, tokens = 9;
  const Exl3ExpertTable t = table(experts, hidden, inter);
  Exl3ExpertTable up = t;
  ASSERT_TRUE(ops->upload_exl3_experts(up).is_ok());
  std::mt19937 rng(4);
  Tensor ids = Tensor::empty({tokens, k}, DType::kI32), wts = Tensor::empty({tokens, k}, DType::kF32);
  for (int64_t i = 0; i < tokens; ++i) {
    std::vector<int32_t> all = {0, 1, 2, 3, 4, 5};
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      ids.data<int32_t>()[i * k + j] = all[j];
      wts.data<float>()[i * k + j] = 0.2f + 0.1f * static_cast<float>(j);
    }
  }
  const Tensor x = randn({tokens, hidden}, 8);
  Tensor out = Tensor::empty({tokens, hidden}, DType::kF32);
  ops->moe_experts_exl3(out, x, ids, wts, t, 7.0f);
  for (int64_t i = 0; i < tokens; ++i) {
    const std::vector<float> want = reference_token(t, x.data<float>() + i * hidden, ids.data<int32_t>() + i * k,
                                                    wts.data<float>() + i * k, k, 7.0f);
    // cpu::exl3_matmul rows do not depend on the batch, and the sum order is the same: equal bits.
    EXPECT_EQ(std::memcmp(want.data(), out.data<float>() + i * hidden, hidden * 4), 0) << "token " << i;
  }
}

TEST(CpuExl3Moe, RefusesBadIdsAndTables) {
  auto ops = make_cpu_ops();
  const Exl3ExpertTable t = table(2, 128, 128);
  Tensor ids = Tensor::empty({1, 1}, DType::kI32), wts = Tensor::from_floats({1, 1}, {1.0f});
  ids.data<int32_t>()[0] = 5;
  const Tensor x = randn({1, 128}, 1);
  Tensor out = Tensor::empty({1, 128}, DType::kF32);
  try {
    ops->moe_experts_exl3(out, x, ids, wts, t, 7.0f);
    FAIL() << "expert id 5 of 2 accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 5"), std::string::npos) << e.what();
  }
  Exl3ExpertTable bad = t;
  bad.down[1] = synthetic(256, 128, 4, Exl3Codebook::kMcg, 7);  // another shape than expert 0's
  const Status s = check_exl3_expert_table(bad, "layers.3.mlp.experts");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.to_string().find("layers.3.mlp.experts.1.down_proj"), std::string::npos) << s.to_string();
  Exl3ExpertTable mixed = t;
  mixed.up[0] = synthetic(128, 128, 4, Exl3Codebook::kMul1, 8);
  EXPECT_FALSE(check_exl3_expert_table(mixed, "e").is_ok());
  Exl3ExpertTable narrow = t;
  narrow.intermediate = 129;  // wider than the padded 128
  EXPECT_FALSE(check_exl3_expert_table(narrow, "e").is_ok());
  EXPECT_FALSE(check_exl3_expert_table(Exl3ExpertTable{}, "e").is_ok());
}

}  // namespace
}  // namespace tf
