// head_matmul at decode rows with bf16 weights of K = 256 or 512 (the absorbed MLA
// products w_uk_t [H, 512, 256] and w_uv [H, 256, 512]), which run the one-wave GEMV in
// cuda_linear.cu: CUDA vs CPU (weights bf16-rounded on the CPU) within 1e-5 for row
// counts that fill, split and overflow its 8-row groups, and each row alone through the
// op equal, bit for bit, to that row of the batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

class CudaHeadGemv : public CpuCudaTest {};

TEST_F(CudaHeadGemv, MatchesTheCpuAndRowsAreIndependent) {
  struct Shape3 {
    int64_t h, n, k;
  };
  for (const Shape3 s : {Shape3{3, 512, 256}, Shape3{2, 256, 512}, Shape3{64, 128, 256}}) {
    const Tensor w = randn({s.h, s.n, s.k}, 901, 0.05f);
    const Tensor wr = w.to_dtype(DType::kBF16).to_f32(), dw = up(w.to_dtype(DType::kBF16));
    for (int64_t t : {1, 2, 5, 8, 9, 17, 64}) {
      const std::string tag = "H=" + std::to_string(s.h) + " N=" + std::to_string(s.n) + " K=" +
                              std::to_string(s.k) + " T=" + std::to_string(t);
      const Tensor x = randn({t, s.h, s.k}, 902 + static_cast<uint32_t>(t));
      Tensor ref = Tensor::empty({t, s.h, s.n}, DType::kF32);
      cpu_->head_matmul(ref, x, wr);
      Tensor out = gpu_->empty({t, s.h, s.n});
      gpu_->head_matmul(out, up(x), dw);
      const Tensor got = down(out);
      const double err = parity_rel_err(ref, got);
      std::printf("[parity] head_matmul bf16 %-28s max rel err %.3g (tol 1e-05)\n", tag.c_str(), err);
      EXPECT_LE(err, 1e-5) << tag;
      for (int64_t r : {int64_t{0}, t / 2, t - 1}) {
        Tensor one = gpu_->empty({1, s.h, s.n});
        gpu_->head_matmul(one, up(x.slice(0, r, r + 1).contiguous()), dw);
        EXPECT_TRUE(same_bits(down(one), got.slice(0, r, r + 1).contiguous())) << "row " << r << " of " << tag;
      }
    }
  }
}

}  // namespace
}  // namespace tf
