// Ops::moe_experts on the CPU backend: against a naive per-token reference (double
// accumulation), bit for bit against the per-expert composition the model used
// before (gather_rows, matmul, swiglu, matmul, scatter_add_rows in ascending expert
// order), bf16 weights, batch independence and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

struct Case {
  int64_t t, k, e, h, i;
};

// out[t] = sum_j w[t,j] * down_e · swiglu(gate_up_e · x_t), in double.
std::vector<double> naive(const Tensor& x, const Tensor& ids, const Tensor& w, const Tensor& gu, const Tensor& dn,
                          float limit) {
  const int64_t h = gu.size(2), two_i = gu.size(1), idim = two_i / 2, t = x.size(0), k = ids.size(1);
  std::vector<double> out(static_cast<size_t>(t * h), 0.0);
  const std::vector<float> xv = x.to_vector(), guv = gu.to_vector(), dv = dn.to_vector();
  for (int64_t r = 0; r < t; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids.data<int32_t>()[r * k + j];
      std::vector<double> a(static_cast<size_t>(idim));
      for (int64_t c = 0; c < idim; ++c) {
        double g = 0, u = 0;
        for (int64_t q = 0; q < h; ++q) {
          g += static_cast<double>(guv[(e * two_i + c) * h + q]) * xv[r * h + q];
          u += static_cast<double>(guv[(e * two_i + idim + c) * h + q]) * xv[r * h + q];
        }
        g = std::min<double>(g, limit);
        u = std::clamp<double>(u, -limit, limit);
        a[c] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < h; ++c) {
        double y = 0;
        for (int64_t q = 0; q < idim; ++q) y += static_cast<double>(dv[(e * h + c) * idim + q]) * a[q];
        out[r * h + c] += w.data<float>()[r * k + j] * y;
      }
    }
  return out;
}

// What Glm5Model::moe_forward computed before moe_experts: experts in ascending id,
// each over its tokens (in token order), scatter-added onto zeros.
Tensor composed(Ops& ops, const Tensor& x, const Tensor& ids, const Tensor& w, const Tensor& gu, const Tensor& dn,
                float limit) {
  const int64_t h = gu.size(2), two_i = gu.size(1), t = x.size(0), k = ids.size(1);
  Tensor out = Tensor::zeros({t, h}, DType::kF32);
  for (int64_t e = 0; e < gu.size(0); ++e) {
    std::vector<int32_t> rows;
    std::vector<float> sc;
    for (int64_t r = 0; r < t; ++r)
      for (int64_t j = 0; j < k; ++j)
        if (ids.data<int32_t>()[r * k + j] == e) {
          rows.push_back(static_cast<int32_t>(r));
          sc.push_back(w.data<float>()[r * k + j]);
        }
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor idx = Tensor::empty({n}, DType::kI32);
    std::copy(rows.begin(), rows.end(), idx.data<int32_t>());
    Tensor xe = Tensor::empty({n, h}, DType::kF32), g = Tensor::empty({n, two_i}, DType::kF32);
    Tensor a = Tensor::empty({n, two_i / 2}, DType::kF32), y = Tensor::empty({n, h}, DType::kF32);
    ops.gather_rows(xe, x, idx);
    ops.matmul(g, xe, gu.select(0, e));
    ops.swiglu(a, g, limit);
    ops.matmul(y, a, dn.select(0, e));
    ops.scatter_add_rows(out, y, idx, Tensor::from_floats({n}, sc));
  }
  return out;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) bad += float_bits(a.data<float>()[i]) != float_bits(b.data<float>()[i]);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.numel() << " values differ";
}

class CpuMoeExperts : public ::testing::TestWithParam<Case> {};

TEST_P(CpuMoeExperts, MatchesNaiveReferenceAndThePerExpertComposition) {
  const Case c = GetParam();
  auto ops = make_cpu_ops();
  const float limit = 1.5f;  // small enough that the clamps matter
  const Tensor x = randn({c.t, c.h}, 1), w = randn({c.t, c.k}, 2, 0.5f);
  const Tensor gu = randn({c.e, 2 * c.i, c.h}, 3, 0.3f), dn = randn({c.e, c.h, c.i}, 4, 0.3f);
  const Tensor ids = moe_route_ids(c.t, c.k, c.e, 5, c.e > c.k ? 1 : -1);
  Tensor out = Tensor::empty({c.t, c.h}, DType::kF32);
  ops->moe_experts(out, x, ids, w, gu, dn, limit);

  const std::vector<double> ref = naive(x, ids, w, gu, dn, limit);
  double scale = 1, worst = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  for (size_t q = 0; q < ref.size(); ++q) worst = std::max(worst, std::fabs(ref[q] - out.data<float>()[q]));
  EXPECT_LE(worst / scale, 2e-5) << "max rel err vs the naive reference";

  expect_same_bits(out, composed(*ops, x, ids, w, gu, dn, limit), "vs gather/matmul/swiglu/matmul/scatter");

  // bf16 weights: the same as f32 weights holding the bf16 values.
  const Tensor gub = gu.to_dtype(DType::kBF16), dnb = dn.to_dtype(DType::kBF16);
  Tensor outb = Tensor::empty({c.t, c.h}, DType::kF32), outr = Tensor::empty({c.t, c.h}, DType::kF32);
  ops->moe_experts(outb, x, ids, w, gub, dnb, limit);
  ops->moe_experts(outr, x, ids, w, gub.to_f32(), dnb.to_f32(), limit);
  expect_same_bits(outb, outr, "bf16 weights vs their f32 values");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuMoeExperts,
                         ::testing::Values(Case{1, 1, 1, 8, 4}, Case{1, 4, 9, 33, 7}, Case{3, 2, 5, 16, 9},
                                           Case{17, 3, 6, 40, 12}, Case{9, 8, 8, 24, 5}, Case{70, 4, 11, 19, 6}));

TEST(CpuMoeExpertsSingle, RowsDoNotDependOnTheBatch) {
  auto ops = make_cpu_ops();
  const int64_t t = 13, k = 3, e = 7, h = 36, i = 10;
  const Tensor x = randn({t, h}, 11), w = randn({t, k}, 12);
  const Tensor gu = randn({e, 2 * i, h}, 13, 0.3f), dn = randn({e, h, i}, 14, 0.3f);
  const Tensor ids = moe_route_ids(t, k, e, 15, 2);
  Tensor all = Tensor::empty({t, h}, DType::kF32);
  ops->moe_experts(all, x, ids, w, gu, dn, 10.0f);
  for (int64_t r : {0, 6, 12}) {
    Tensor one = Tensor::empty({1, h}, DType::kF32);
    ops->moe_experts(one, x.slice(0, r, r + 1).contiguous(), ids.slice(0, r, r + 1).contiguous(),
                     w.slice(0, r, r + 1).contiguous(), gu, dn, 10.0f);
    expect_same_bits(one, all.slice(0, r, r + 1).contiguous(), "row " + std::to_string(r));
  }
}

TEST(CpuMoeExpertsSingle, EmptyBatchAndSlotOrder) {
  auto ops = make_cpu_ops();
  const Tensor gu = randn({3, 4, 5}, 21), dn = randn({3, 5, 2}, 22);
  Tensor out0 = Tensor::empty({0, 5}, DType::kF32);
  ops->moe_experts(out0, Tensor::empty({0, 5}, DType::kF32), Tensor::empty({0, 2}, DType::kI32),
                   Tensor::empty({0, 2}, DType::kF32), gu, dn, 10.0f);
  // k = 0: nothing routed, zeros.
  Tensor outk = Tensor::from_floats({2, 5}, std::vector<float>(10, 7.0f));
  ops->moe_experts(outk, randn({2, 5}, 24), Tensor::empty({2, 0}, DType::kI32), Tensor::empty({2, 0}, DType::kF32), gu,
                   dn, 10.0f);
  EXPECT_EQ(outk.to_vector(), std::vector<float>(10, 0.0f));
  // Two slots routed to the same pair of experts in either order: the sum runs in slot
  // order, so both are the naive sums (to rounding) and a zero weight drops an expert.
  const Tensor x = randn({1, 5}, 23);
  Tensor ids = Tensor::empty({1, 2}, DType::kI32);
  ids.data<int32_t>()[0] = 2;
  ids.data<int32_t>()[1] = 0;
  const Tensor w = Tensor::from_floats({1, 2}, {0.0f, 1.0f});
  Tensor out = Tensor::empty({1, 5}, DType::kF32);
  ops->moe_experts(out, x, ids, w, gu, dn, 10.0f);
  Tensor ids0 = Tensor::empty({1, 1}, DType::kI32);
  ids0.data<int32_t>()[0] = 0;
  Tensor only0 = Tensor::empty({1, 5}, DType::kF32);
  ops->moe_experts(only0, x, ids0, Tensor::from_floats({1, 1}, {1.0f}), gu, dn, 10.0f);
  expect_same_bits(out, only0, "zero-weighted expert 2 then expert 0");
}

TEST(CpuMoeExpertsSingle, BadArgumentsAreErrorsNamingTheTensor) {
  auto ops = make_cpu_ops();
  const Tensor gu = randn({3, 4, 5}, 31), dn = randn({3, 5, 2}, 32), x = randn({2, 5}, 33);
  const Tensor w = randn({2, 2}, 34);
  Tensor out = Tensor::empty({2, 5}, DType::kF32);
  Tensor ids = Tensor::empty({2, 2}, DType::kI32);
  for (int q = 0; q < 4; ++q) ids.data<int32_t>()[q] = q % 2;
  ids.data<int32_t>()[3] = 3;  // E = 3
  try {
    ops->moe_experts(out, x, ids, w, gu, dn, 10.0f);
    FAIL() << "expected an out-of-range expert id error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(e.status().message().find("expert id 3"), std::string::npos) << e.status().message();
  }
  ids.data<int32_t>()[3] = 2;
  try {
    ops->moe_experts(out, x, ids, w, gu, randn({3, 5, 3}, 35), 10.0f);
    FAIL() << "expected a shape error";
  } catch (const StatusError& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find("down"), std::string::npos) << e.status().message();
  }
  try {
    ops->moe_experts(out, x, ids, randn({2, 3}, 36), gu, dn, 10.0f);
    FAIL() << "expected a weights shape error";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("moe_experts weights"), std::string::npos) << e.status().message();
  }
  try {
    ops->moe_experts(out, x, ids, w, gu.to_dtype(DType::kF16), dn, 10.0f);
    FAIL() << "expected a dtype error";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().message().find("gate_up"), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace tf
