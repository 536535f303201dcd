// Ops::moe_experts_fp8's default (host grouping, each expert's Matrix::fp8_block matmuls)
// on the CPU backend: equal within f32 rounding to moe_experts on the same weights
// dequantized (e4m3 * scale), over partial scale blocks (I = 72, H = 200), duplicate
// ids, k = 0; its argument errors name the stack.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/fp8_expert_stack.h"
#include "kernels/cpu/cpu_ops.h"
#include "fp8_expert_stack_testing.h"
#include "test_tensors.h"

namespace tf {
namespace {

TEST(CpuMoeFp8, EqualsTheDenseOpOnTheDequantizedWeights) {
  auto ops = make_cpu_ops();
  struct Case {
    int64_t t, k, e, h, i;
  };
  for (const Case& c : {Case{1, 8, 12, 192, 72}, Case{5, 3, 7, 200, 136}, Case{17, 4, 16, 128, 128}}) {
    const Fp8ExpertStack st = random_fp8_stack(c.e, c.i, c.h, 31);
    Tensor gu, dn;
    dequantized_fp8_stack(st, &gu, &dn);
    const Tensor x = randn({c.t, c.h}, 32), w = randn({c.t, c.k}, 33, 0.5f);
    const Tensor ids = moe_route_ids(c.t, c.k, c.e, 34, -1);
    Tensor ref = Tensor::empty({c.t, c.h}, DType::kF32), out = Tensor::empty({c.t, c.h}, DType::kF32);
    ops->moe_experts(ref, x, ids, w, gu, dn, 2.0f);
    ops->moe_experts_fp8(out, x, ids, w, st, 2.0f);
    EXPECT_LE(rel_err_to_max_ref(ref, out), 1e-5) << "T=" << c.t << " E=" << c.e << " H=" << c.h << " I=" << c.i;
    // Not vacuous: the outputs are not all zero.
    double mx = 0;
    for (float v : ref.to_vector()) mx = std::max(mx, static_cast<double>(std::fabs(v)));
    EXPECT_GT(mx, 1e-3);
  }
}

TEST(CpuMoeFp8, DuplicateIdsAndKZero) {
  auto ops = make_cpu_ops();
  const int64_t t = 6, k = 3, e = 4, h = 130, i = 40;
  const Fp8ExpertStack st = random_fp8_stack(e, i, h, 41);
  Tensor gu, dn;
  dequantized_fp8_stack(st, &gu, &dn);
  const Tensor x = randn({t, h}, 42), w = randn({t, k}, 43);
  Tensor ids = moe_route_ids(t, k, e, 44, -1);
  ids.data<int32_t>()[0] = ids.data<int32_t>()[1];  // row 0 names one expert twice: counted twice
  Tensor ref = Tensor::empty({t, h}, DType::kF32), out = Tensor::empty({t, h}, DType::kF32);
  ops->moe_experts(ref, x, ids, w, gu, dn, 10.0f);
  ops->moe_experts_fp8(out, x, ids, w, st, 10.0f);
  EXPECT_LE(rel_err_to_max_ref(ref, out), 1e-5);
  Tensor zk = Tensor::from_floats({t, h}, std::vector<float>(t * h, 7.0f));
  ops->moe_experts_fp8(zk, x, Tensor::empty({t, 0}, DType::kI32), Tensor::empty({t, 0}, DType::kF32), st, 10.0f);
  EXPECT_EQ(zk.to_vector(), std::vector<float>(t * h, 0.0f));
}

TEST(CpuMoeFp8, BadStacksAndIdsAreNamed) {
  auto ops = make_cpu_ops();
  const int64_t t = 2, k = 2, e = 3, h = 64, i = 32;
  Fp8ExpertStack st = random_fp8_stack(e, i, h, 51);
  const Tensor x = randn({t, h}, 52), w = randn({t, k}, 53);
  Tensor out = Tensor::empty({t, h}, DType::kF32);
  Tensor ids = moe_route_ids(t, k, e, 54, -1);
  ids.data<int32_t>()[1] = static_cast<int32_t>(e);
  try {
    ops->moe_experts_fp8(out, x, ids, w, st, 10.0f);
    FAIL() << "an id outside [0, E) must be refused";
  } catch (const StatusError& err) {
    EXPECT_EQ(err.status().code(), StatusCode::kOutOfRange);
    EXPECT_NE(err.status().message().find("moe_experts_fp8"), std::string::npos) << err.status().message();
  }
  st.down_scales = Tensor::empty({e, 1, 1}, DType::kF32);  // [E, ceil(H/128), ceil(I/128)] is [3, 1, 1]: fine
  EXPECT_TRUE(check_fp8_expert_stack(st, "s").is_ok());
  st.down_scales = Tensor::empty({e, 2, 1}, DType::kF32);
  const Status bad = check_fp8_expert_stack(st, "layers.3.mlp.experts");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("layers.3.mlp.experts down"), std::string::npos) << bad.message();
  st.down_scales = Tensor::empty({e, 1, 1}, DType::kF32);
  st.up = Tensor::empty({e, i, h}, DType::kBF16);
  EXPECT_THROW(ops->moe_experts_fp8(out, x, moe_route_ids(t, k, e, 55, -1), w, st, 10.0f), StatusError);
}

}  // namespace
}  // namespace tf
