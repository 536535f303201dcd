// The capture-safe KDA decode-row ops on the GPU (KdaRowsView: state addresses in
// device memory, 0 = padded row): kda_conv_qkv_rows and kda_recurrent_state_rows must
// give, bit for bit, what causal_conv1d_silu / kda_recurrent give row by row (the graph
// step replays them where the eager step runs the one-sequence ops), padded rows give
// zeros and touch no state, and the CPU backend agrees within f32 rounding. Also the
// recurrence's time at 1, 16 and 64 rows of the real geometry ("[kda-rows]" lines,
// beside the HBM floor of reading and writing every row's state once).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/status.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

int64_t addr(const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); }

bool all_zero(const Tensor& t) {
  for (float x : t.to_vector())
    if (x != 0.0f) return false;
  return true;
}

class CudaKdaRows : public CpuCudaTest {
 protected:
  // The addresses as a device int64 array.
  Tensor addresses(const std::vector<int64_t>& a) {
    return gpu_->to_device(Tensor::view_of(const_cast<int64_t*>(a.data()), {static_cast<int64_t>(a.size())}, DType::kI64));
  }
};

TEST_F(CudaKdaRows, ConvQkvRowsEqualOneSequenceConvs) {
  for (int64_t b : {1, 3, 16, 64}) {
    const int64_t c = 8192 / 32, kw = 4;
    const Tensor x[3] = {randn({b, c}, 1), randn({b, c}, 2), randn({b, c}, 3)};
    const Tensor w = randn({3, c, kw}, 4);
    const Tensor wd = up(w);
    std::vector<Tensor> states, singles;
    std::vector<int64_t> a;
    for (int64_t r = 0; r < b; ++r) {
      const Tensor init = randn({3, kw - 1, c}, 10 + static_cast<uint32_t>(r));
      states.push_back(up(init));
      singles.push_back(up(init));
      a.push_back(r % 3 == 2 ? 0 : addr(states.back()));  // every third row padded
    }
    const Tensor ad = addresses(a);
    KdaRowsView v;
    v.rows = b;
    v.conv_states = ad.data<int64_t>();
    const Tensor xd[3] = {up(x[0]), up(x[1]), up(x[2])};
    Tensor od[3] = {gpu_->empty({b, c}), gpu_->empty({b, c}), gpu_->empty({b, c})};
    gpu_->kda_conv_qkv_rows(od[0], od[1], od[2], xd[0], xd[1], xd[2], v, wd);
    for (int p = 0; p < 3; ++p) {
      const Tensor got = down(od[p]);
      for (int64_t r = 0; r < b; ++r) {
        const Tensor row = got.slice(0, r, r + 1).contiguous();
        if (a[r] == 0) {
          EXPECT_TRUE(all_zero(row)) << "padded row " << r;
          continue;
        }
        Tensor st = singles[r].select(0, p);
        Tensor one = gpu_->empty({1, c});
        gpu_->causal_conv1d_silu(one, xd[p].slice(0, r, r + 1), st, wd.select(0, p));
        EXPECT_TRUE(same_bits(down(one), row)) << "b " << b << " row " << r << " part " << p;
      }
    }
    for (int64_t r = 0; r < b; ++r) {
      if (a[r] == 0) {
        const Tensor init = randn({3, kw - 1, c}, 10 + static_cast<uint32_t>(r));
        EXPECT_TRUE(same_bits(down(states[r]), init)) << "padded row " << r << " state touched";
      } else {
        EXPECT_TRUE(same_bits(down(states[r]), down(singles[r]))) << "state of row " << r;
      }
    }
  }
}

TEST_F(CudaKdaRows, RecurrentStateRowsEqualOneSequenceAndCpu) {
  for (int64_t b : {1, 5, 16}) {
    const int64_t h = 4, dk = 128, dv = 128;
    const Tensor q = randn({b, h * dk}, 3), k = randn({b, h * dk}, 4), v = randn({b, h * dv}, 5);
    const Tensor g = randn({b, h * dk}, 6, 0.1f, -0.1f), beta = randn({b, h}, 7, 0.3f, 0.5f);
    std::vector<Tensor> states, singles, cpu_states;
    std::vector<int64_t> a, ca;
    for (int64_t r = 0; r < b; ++r) {
      const Tensor init = randn({h, dk, dv}, 200 + static_cast<uint32_t>(r), 0.1f);
      states.push_back(up(init));
      singles.push_back(up(init));
      Tensor hc = Tensor::empty({h, dk, dv}, DType::kF32);
      hc.copy_from(init);
      cpu_states.push_back(hc);
      const bool pad = b > 1 && r == b - 2;
      a.push_back(pad ? 0 : addr(states.back()));
      ca.push_back(pad ? 0 : addr(cpu_states.back()));
    }
    const Tensor ad = addresses(a);
    KdaRowsView view;
    view.rows = b;
    view.recurrent_states = ad.data<int64_t>();
    view.heads = h;
    view.key_dim = dk;
    view.value_dim = dv;
    const Tensor qd = up(q), kd = up(k), vd = up(v), gd = up(g), bd = up(beta);
    Tensor out = gpu_->empty({b, h * dv});
    gpu_->kda_recurrent_state_rows(out, qd, kd, vd, gd, bd, view);
    const Tensor got = down(out);
    KdaRowsView cview = view;
    cview.recurrent_states = ca.data();
    Tensor cpu_out = Tensor::empty({b, h * dv}, DType::kF32);
    cpu_->kda_recurrent_state_rows(cpu_out, q, k, v, g, beta, cview);
    double worst = 0;
    for (int64_t i = 0; i < b * h * dv; ++i)
      worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - cpu_out.data<float>()[i]));
    EXPECT_LT(worst, 1e-4) << "vs the CPU backend, b=" << b;
    for (int64_t r = 0; r < b; ++r) {
      const Tensor row = got.slice(0, r, r + 1).contiguous();
      if (a[r] == 0) {
        EXPECT_TRUE(all_zero(row)) << "padded row " << r;
        EXPECT_TRUE(same_bits(down(states[r]), randn({h, dk, dv}, 200 + static_cast<uint32_t>(r), 0.1f)));
        continue;
      }
      Tensor one = gpu_->empty({1, h * dv});
      gpu_->kda_recurrent(one, qd.slice(0, r, r + 1), kd.slice(0, r, r + 1), vd.slice(0, r, r + 1),
                          gd.slice(0, r, r + 1), bd.slice(0, r, r + 1), singles[r]);
      EXPECT_TRUE(same_bits(down(one), row)) << "b " << b << " row " << r;
      EXPECT_TRUE(same_bits(down(states[r]), down(singles[r]))) << "state of row " << r;
    }
  }
}

// The real geometry (64 heads x 128 x 128 f32 = 4 MiB of state per row): the time per
// call at 1, 16 and 64 rows beside the floor of one read and one write of the states
// at ~4.2 TB/s. Self-checking only for finiteness; the numbers are for the report.
TEST_F(CudaKdaRows, RecurrentStateRowsTiming) {
  const int64_t h = 64, dk = 128, dv = 128;
  for (int64_t b : {1, 16, 64}) {
    std::vector<Tensor> states;
    std::vector<int64_t> a;
    for (int64_t r = 0; r < b; ++r) {
      states.push_back(gpu_->zeros({h, dk, dv}));
      a.push_back(addr(states.back()));
    }
    const Tensor ad = addresses(a);
    KdaRowsView view;
    view.rows = b;
    view.recurrent_states = ad.data<int64_t>();
    view.heads = h;
    view.key_dim = dk;
    view.value_dim = dv;
    const Tensor q = up(randn({b, h * dk}, 1)), k = up(randn({b, h * dk}, 2)), v = up(randn({b, h * dv}, 3));
    const Tensor g = up(randn({b, h * dk}, 4, 0.1f, -0.1f)), beta = up(randn({b, h}, 5, 0.2f, 0.5f));
    Tensor out = gpu_->empty({b, h * dv});
    gpu_->kda_recurrent_state_rows(out, q, k, v, g, beta, view);  // warm-up
    (void)down(out.slice(0, 0, 1));
    const int iters = 50;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gpu_->kda_recurrent_state_rows(out, q, k, v, g, beta, view);
    const Tensor o = down(out);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    bool finite = true;
    for (float x : o.to_vector()) finite = finite && std::isfinite(x);
    EXPECT_TRUE(finite) << "b " << b;
    const double floor_us = 2.0 * static_cast<double>(b * h * dk * dv * 4) / 4.2e12 * 1e6;
    std::printf("[kda-rows] kda_recurrent_state_rows %lld rows: %.1f us per call (HBM floor %.1f us, %.0f%%)\n",
                static_cast<long long>(b), us, floor_us, 100.0 * floor_us / us);
  }
}

}  // namespace
}  // namespace tf
