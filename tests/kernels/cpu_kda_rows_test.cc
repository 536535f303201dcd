// The CPU KDA decode-row ops over a KdaRowsView (state addresses, 0 = padded row):
// kda_conv_qkv_rows against causal_conv1d_silu on each row and each of q/k/v with its
// part of the row's [3, K-1, C] state, kda_recurrent_state_rows against kda_recurrent
// row by row (outputs and states bit for bit); padded rows give zeros and leave every
// state alone; the argument errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

int64_t addr(const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); }

bool all_zero(const Tensor& t) {
  for (float x : t.to_vector())
    if (x != 0.0f) return false;
  return true;
}

TEST(CpuKdaRows, ConvQkvRowsEqualOneSequenceConvs) {
  auto ops = make_cpu_ops();
  for (int64_t kw : {1, 2, 4}) {
    const int64_t b = 5, c = 24;
    const std::vector<bool> padded = {false, true, false, false, true};
    const Tensor x[3] = {randn({b, c}, 1), randn({b, c}, 2), randn({b, c}, 3)};
    const Tensor w = randn({3, c, kw}, 4).contiguous();
    std::vector<Tensor> states, ref;
    std::vector<int64_t> addrs;
    for (int64_t r = 0; r < b; ++r) {
      states.push_back(randn({3, kw - 1, c}, 10 + static_cast<uint32_t>(r)).contiguous());
      Tensor copy = Tensor::empty(states.back().shape(), DType::kF32);
      copy.copy_from(states.back());
      ref.push_back(copy);
      addrs.push_back(padded[r] ? 0 : addr(states.back()));
    }
    KdaRowsView v;
    v.rows = b;
    v.conv_states = addrs.data();
    Tensor out[3] = {Tensor::empty({b, c}, DType::kF32), Tensor::empty({b, c}, DType::kF32),
                     Tensor::empty({b, c}, DType::kF32)};
    ops->kda_conv_qkv_rows(out[0], out[1], out[2], x[0], x[1], x[2], v, w);
    for (int64_t r = 0; r < b; ++r)
      for (int p = 0; p < 3; ++p) {
        const Tensor got = out[p].slice(0, r, r + 1).contiguous();
        if (padded[r] && kw > 1) {  // (K = 1: no state, every row computed)
          EXPECT_TRUE(all_zero(got)) << "padded row " << r;
          continue;
        }
        Tensor st = kw > 1 ? ref[r].select(0, p).contiguous() : Tensor::zeros({0, c}, DType::kF32);
        Tensor want = Tensor::empty({1, c}, DType::kF32);
        ops->causal_conv1d_silu(want, x[p].slice(0, r, r + 1), st, w.select(0, p).contiguous());
        EXPECT_TRUE(same_bits(got, want)) << "kw " << kw << " row " << r << " part " << p;
        if (kw > 1) {
          EXPECT_TRUE(same_bits(states[r].select(0, p).contiguous(), st)) << "state of row " << r << " part " << p;
        }
      }
    // Padded rows' states were not touched.
    for (int64_t r = 0; r < b; ++r)
      if (padded[r]) {
        EXPECT_TRUE(same_bits(states[r], ref[r])) << "padded row " << r;
      }
  }
}

TEST(CpuKdaRows, RecurrentStateRowsEqualOneSequenceRecurrence) {
  auto ops = make_cpu_ops();
  const int64_t b = 4, h = 3, dk = 16, dv = 8;
  const std::vector<bool> padded = {false, false, true, false};
  const Tensor q = randn({b, h * dk}, 1), k = randn({b, h * dk}, 2), v = randn({b, h * dv}, 3);
  const Tensor g = randn({b, h * dk}, 4, 0.1f, -0.2f), beta = randn({b, h}, 5, 0.2f, 0.5f);
  std::vector<Tensor> states, ref;
  std::vector<int64_t> addrs;
  for (int64_t r = 0; r < b; ++r) {
    states.push_back(randn({h, dk, dv}, 20 + static_cast<uint32_t>(r), 0.1f).contiguous());
    Tensor copy = Tensor::empty({h, dk, dv}, DType::kF32);
    copy.copy_from(states.back());
    ref.push_back(copy);
    addrs.push_back(padded[r] ? 0 : addr(states.back()));
  }
  KdaRowsView view;
  view.rows = b;
  view.recurrent_states = addrs.data();
  view.heads = h;
  view.key_dim = dk;
  view.value_dim = dv;
  Tensor out = Tensor::empty({b, h * dv}, DType::kF32);
  // A previous value in the padded row must be overwritten with zeros.
  for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = 7.0f;
  ops->kda_recurrent_state_rows(out, q, k, v, g, beta, view);
  for (int64_t r = 0; r < b; ++r) {
    const Tensor got = out.slice(0, r, r + 1).contiguous();
    if (padded[r]) {
      EXPECT_TRUE(all_zero(got));
      EXPECT_TRUE(same_bits(states[r], ref[r]));
      continue;
    }
    Tensor want = Tensor::empty({1, h * dv}, DType::kF32);
    ops->kda_recurrent(want, q.slice(0, r, r + 1), k.slice(0, r, r + 1), v.slice(0, r, r + 1), g.slice(0, r, r + 1),
                       beta.slice(0, r, r + 1), ref[r]);
    EXPECT_TRUE(same_bits(got, want)) << "row " << r;
    EXPECT_TRUE(same_bits(states[r], ref[r])) << "state of row " << r;
    EXPECT_FALSE(all_zero(got));
  }
}

TEST(CpuKdaRows, ArgumentErrors) {
  auto ops = make_cpu_ops();
  const int64_t b = 2, c = 8, kw = 3;
  std::vector<Tensor> states{Tensor::zeros({3, kw - 1, c}, DType::kF32), Tensor::zeros({3, kw - 1, c}, DType::kF32)};
  std::vector<int64_t> addrs{addr(states[0]), addr(states[1])};
  KdaRowsView v;
  v.rows = b;
  v.conv_states = addrs.data();
  Tensor o[3] = {Tensor::empty({b, c}, DType::kF32), Tensor::empty({b, c}, DType::kF32),
                 Tensor::empty({b, c}, DType::kF32)};
  const Tensor x = randn({b, c}, 1), bad_x = randn({b + 1, c}, 2);
  // Weight not [3, C, K].
  EXPECT_THROW(ops->kda_conv_qkv_rows(o[0], o[1], o[2], x, x, x, v, randn({c, kw}, 3)), StatusError);
  // x with a row too many.
  EXPECT_THROW(ops->kda_conv_qkv_rows(o[0], o[1], o[2], x, bad_x, x, v, randn({3, c, kw}, 3)), StatusError);
  // No state addresses.
  KdaRowsView none;
  none.rows = b;
  EXPECT_THROW(ops->kda_conv_qkv_rows(o[0], o[1], o[2], x, x, x, none, randn({3, c, kw}, 3)), StatusError);
  // Recurrence: dims unset, then q of the wrong width.
  Tensor out = Tensor::empty({b, 2 * 4}, DType::kF32);
  const Tensor q = randn({b, 2 * 4}, 4), beta = randn({b, 2}, 5);
  EXPECT_THROW(ops->kda_recurrent_state_rows(out, q, q, q, q, beta, none), StatusError);
  KdaRowsView r = none;
  r.heads = 2;
  r.key_dim = 4;
  r.value_dim = 4;
  std::vector<int64_t> zeros(b, 0);
  r.recurrent_states = zeros.data();
  EXPECT_THROW(ops->kda_recurrent_state_rows(out, randn({b, 7}, 6), q, q, q, beta, r), StatusError);
  // All rows padded: zeros out, no error.
  ops->kda_recurrent_state_rows(out, q, q, q, q, beta, r);
  EXPECT_TRUE(all_zero(out));
}

}  // namespace
}  // namespace tf
