// The batched decode ops (causal_conv1d_silu_rows, kda_recurrent_rows) and the
// indexer's token expansion on the GPU: the *_rows ops must give, bit for bit,
// what the one-sequence ops give row by row (that is what keeps a reply the same
// alone or beside others), and indexer_token_indices must equal the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

class CudaRowsOps : public CpuCudaTest {};

TEST_F(CudaRowsOps, ConvRowsEqualOneByOne) {
  for (int64_t b : {1, 2, 5, 64}) {
    const int64_t c = 200, kw = 4;
    const Tensor x = randn({b, c}, 1 + b), w = randn({c, kw}, 2);
    std::vector<Tensor> s_batch, s_single;
    for (int64_t i = 0; i < b; ++i) {
      const Tensor init = randn({kw - 1, c}, 100 + i);
      s_batch.push_back(gpu_->to_device(init));
      s_single.push_back(gpu_->to_device(init));
    }
    std::vector<Tensor*> ptrs;
    for (Tensor& t : s_batch) ptrs.push_back(&t);
    const Tensor xd = gpu_->to_device(x), wd = gpu_->to_device(w);
    Tensor out = gpu_->empty({b, c});
    gpu_->causal_conv1d_silu_rows(out, xd, ptrs, wd);
    const Tensor got = gpu_->to_host(out);
    for (int64_t i = 0; i < b; ++i) {
      Tensor one = gpu_->empty({1, c});
      gpu_->causal_conv1d_silu(one, xd.slice(0, i, i + 1), s_single[i], wd);
      EXPECT_TRUE(same_bits(gpu_->to_host(one), got.slice(0, i, i + 1).contiguous())) << "b=" << b << " row " << i;
      EXPECT_TRUE(same_bits(gpu_->to_host(s_single[i]), gpu_->to_host(s_batch[i]))) << "state of row " << i;
    }
  }
}

TEST_F(CudaRowsOps, KdaRecurrentRowsEqualOneByOneAndCpu) {
  for (int64_t b : {1, 3, 64}) {
    const int64_t h = 4, dk = 128, dv = 128;
    const Tensor q = randn({b, h, dk}, 3), k = randn({b, h, dk}, 4), v = randn({b, h, dv}, 5);
    const Tensor g = randn({b, h, dk}, 6, 0.1f), beta = randn({b, h}, 7, 0.3f);
    std::vector<Tensor> s_batch, s_single, s_cpu;
    for (int64_t i = 0; i < b; ++i) {
      const Tensor init = randn({h, dk, dv}, 200 + i, 0.1f);
      s_batch.push_back(gpu_->to_device(init));
      s_single.push_back(gpu_->to_device(init));
      s_cpu.push_back(init.contiguous());
    }
    std::vector<Tensor*> ptrs, cptrs;
    for (Tensor& t : s_batch) ptrs.push_back(&t);
    for (Tensor& t : s_cpu) cptrs.push_back(&t);
    const Tensor qd = gpu_->to_device(q), kd = gpu_->to_device(k), vd = gpu_->to_device(v);
    const Tensor gd = gpu_->to_device(g), bd = gpu_->to_device(beta);
    Tensor out = gpu_->empty({b, h, dv});
    gpu_->kda_recurrent_rows(out, qd, kd, vd, gd, bd, ptrs);
    const Tensor got = gpu_->to_host(out);
    Tensor cpu_out = Tensor::empty({b, h, dv}, DType::kF32);
    cpu_->kda_recurrent_rows(cpu_out, q, k, v, g, beta, cptrs);
    double worst = 0;
    for (int64_t i = 0; i < b * h * dv; ++i)
      worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - cpu_out.data<float>()[i]));
    EXPECT_LT(worst, 1e-4) << "vs the CPU backend, b=" << b;
    for (int64_t i = 0; i < b; ++i) {
      Tensor one = gpu_->empty({1, h, dv});
      gpu_->kda_recurrent(one, qd.slice(0, i, i + 1), kd.slice(0, i, i + 1), vd.slice(0, i, i + 1),
                          gd.slice(0, i, i + 1), bd.slice(0, i, i + 1), s_single[i]);
      EXPECT_TRUE(same_bits(gpu_->to_host(one), got.slice(0, i, i + 1).contiguous())) << "b=" << b << " row " << i;
      EXPECT_TRUE(same_bits(gpu_->to_host(s_single[i]), gpu_->to_host(s_batch[i]))) << "state of row " << i;
    }
  }
}

TEST_F(CudaRowsOps, IndexerTokenIndicesEqualCpu) {
  std::mt19937 rng(9);
  for (auto [t, s, first, kp, tail] : std::vector<std::tuple<int64_t, int64_t, int64_t, int, bool>>{
           {1, 4, 37, 4, true}, {5, 3, 0, 4, true}, {7, 2, 11, 4, false}, {3, 0, 2, 4, true}, {64, 16, 999, 4, true}}) {
    const int64_t w = s * kp + (tail ? kp - 1 : 0) + 2;
    Tensor sel = Tensor::empty({t, s}, DType::kI32);
    for (int64_t i = 0; i < t * s; ++i) sel.data<int32_t>()[i] = static_cast<int32_t>(rng() % ((first + t) / kp + 3));
    Tensor cpu_idx = Tensor::empty({t, w}, DType::kI32);
    cpu_->indexer_token_indices(cpu_idx, sel, first, kp, tail);
    Tensor gi = gpu_->empty({t, w}, DType::kI32);
    gpu_->indexer_token_indices(gi, gpu_->to_device(sel), first, kp, tail);
    EXPECT_TRUE(same_bits(cpu_idx, gpu_->to_host(gi))) << "t=" << t << " s=" << s << " first=" << first;
    // Spot-check the CPU's meaning: the tail of row 0 lists its own incomplete pool.
    if (tail && t > 0) {
      const int64_t visible = first + 1;
      for (int64_t o = 0; o < visible % kp; ++o)
        EXPECT_EQ(cpu_idx.data<int32_t>()[s * kp + o], visible - visible % kp + o);
    }
  }
}

}  // namespace
}  // namespace tf
