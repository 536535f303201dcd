// Ops::mhc_pre's and mhc_expand_pre's defaults (what every backend without fused
// kernels runs): the same bits as the ops they stand for, and errors that name the
// tensor at fault.
#include <gtest/gtest.h>

#include <string>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

struct Outs {
  Tensor post, comb, out;
};

// The sequence glm5_model.cc ran before mhc_pre existed.
Outs by_hand(Ops& ops, const Tensor& streams, const Tensor& fn, const Tensor& base, const Tensor& scale,
             const Tensor& w, float eps, float hc_eps, int iters) {
  const int64_t n = streams.size(0), m = streams.size(1), d = streams.size(2);
  const Tensor flat = streams.reshape({n, m * d});
  Tensor normed = ops.empty({n, m * d});
  ops.rms_norm(normed, flat, Tensor(), eps);
  Tensor logits = ops.empty({n, (2 + m) * m});
  ops.matmul(logits, normed, fn);
  Tensor pre = ops.empty({n, m});
  Outs o{ops.empty({n, m}), ops.empty({n, m, m}), ops.empty({n, d})};
  ops.mhc_coefficients(pre, o.post, o.comb, logits, base, scale, hc_eps, iters);
  Tensor collapsed = ops.empty({n, d});
  ops.mhc_collapse(collapsed, streams, pre);
  ops.rms_norm(o.out, collapsed, w, eps);
  return o;
}

TEST(CpuMhcPre, DefaultIsTheFiveOpsBitForBit) {
  auto ops = make_cpu_ops();
  for (int64_t m : {4, 2}) {
    for (int64_t n : {1, 5}) {
      const int64_t d = 96, mix = (2 + m) * m;
      const Tensor streams = randn({n, m, d}, 11 + static_cast<uint32_t>(n));
      const Tensor fn = randn({mix, m * d}, 12, 0.05f), base = randn({mix}, 13, 0.5f);
      const Tensor scale = Tensor::from_floats({3}, {0.7f, 1.3f, 2.0f}), w = randn({d}, 14, 0.3f, 1.0f);
      for (bool weighted : {true, false}) {
        const Tensor nw = weighted ? w : Tensor();
        const Outs want = by_hand(*ops, streams, fn, base, scale, nw, 1e-5f, 1e-6f, 20);
        Outs got{ops->empty({n, m}), ops->empty({n, m, m}), ops->empty({n, d})};
        ops->mhc_pre(got.post, got.comb, got.out, streams, fn, base, scale, nw, 1e-5f, 1e-6f, 20);
        const std::string tag =
            "M=" + std::to_string(m) + " T=" + std::to_string(n) + (weighted ? "" : " no weight");
        EXPECT_TRUE(same_bits(want.post, got.post)) << tag;
        EXPECT_TRUE(same_bits(want.comb, got.comb)) << tag;
        EXPECT_TRUE(same_bits(want.out, got.out)) << tag;
        // Sanity of the result itself: the combination matrix is (nearly) doubly
        // stochastic, post in (0, 2), and the unweighted output has unit RMS.
        for (int64_t r = 0; r < n; ++r)
          for (int64_t i = 0; i < m; ++i) {
            double row = 0, col = 0;
            for (int64_t j = 0; j < m; ++j) {
              row += got.comb.data<float>()[(r * m + i) * m + j];
              col += got.comb.data<float>()[(r * m + j) * m + i];
            }
            EXPECT_NEAR(col, 1.0, 1e-4) << tag;
            EXPECT_NEAR(row, 1.0, 1e-2) << tag;
            const float p = got.post.data<float>()[r * m + i];
            EXPECT_GT(p, 0.0f);
            EXPECT_LT(p, 2.0f);
          }
        if (!weighted) {
          double ss = 0;
          for (int64_t i = 0; i < d; ++i) ss += double(got.out.data<float>()[i]) * got.out.data<float>()[i];
          EXPECT_NEAR(ss / d, 1.0, 1e-3) << tag;
        }
      }
    }
  }
}

// mhc_expand_pre's default: mhc_expand into streams_out, then mhc_pre over it.
TEST(CpuMhcPre, ExpandPreIsExpandThenPre) {
  auto ops = make_cpu_ops();
  const int64_t n = 3, m = 4, d = 64, mix = 24;
  const Tensor residual = randn({n, m, d}, 31), y = randn({n, d}, 32);
  const Tensor prev_post = randn({n, m}, 33, 0.3f, 1.0f), prev_comb = randn({n, m, m}, 34, 0.2f, 0.25f);
  const Tensor fn = randn({mix, m * d}, 35, 0.05f), base = randn({mix}, 36, 0.5f);
  const Tensor scale = Tensor::from_floats({3}, {0.7f, 1.3f, 2.0f}), w = randn({d}, 37, 0.3f, 1.0f);
  Tensor want_streams = ops->empty({n, m, d});
  ops->mhc_expand(want_streams, y, prev_post, prev_comb, residual);
  const Outs want = by_hand(*ops, want_streams, fn, base, scale, w, 1e-5f, 1e-6f, 20);
  Tensor streams = ops->empty({n, m, d});
  Outs got{ops->empty({n, m}), ops->empty({n, m, m}), ops->empty({n, d})};
  ops->mhc_expand_pre(streams, got.post, got.comb, got.out, y, prev_post, prev_comb, residual, fn, base,
                      scale, w, 1e-5f, 1e-6f, 20);
  EXPECT_TRUE(same_bits(want_streams, streams));
  EXPECT_TRUE(same_bits(want.post, got.post));
  EXPECT_TRUE(same_bits(want.comb, got.comb));
  EXPECT_TRUE(same_bits(want.out, got.out));
}

TEST(CpuMhcPre, MismatchedTensorsAreErrorsNamingThem) {
  auto ops = make_cpu_ops();
  const int64_t n = 2, m = 4, d = 32, mix = 24;
  const Tensor streams = randn({n, m, d}, 21), base = randn({mix}, 22), scale = randn({3}, 23);
  Tensor post = ops->empty({n, m}), comb = ops->empty({n, m, m}), out = ops->empty({n, d});
  const Tensor w = randn({d}, 24);
  try {
    ops->mhc_pre(post, comb, out, streams, randn({mix, m * d + 4}, 25), base, scale, w, 1e-5f, 1e-6f, 20);
    FAIL() << "a wrong fn width was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().to_string().find("fn"), std::string::npos) << e.status().to_string();
  }
  try {
    ops->mhc_pre(post, comb, out, streams.reshape({n, m * d}), randn({mix, m * d}, 25), base, scale, w, 1e-5f,
                 1e-6f, 20);
    FAIL() << "2-D streams were accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().to_string().find("streams"), std::string::npos) << e.status().to_string();
  }
}

}  // namespace
}  // namespace tf
