// The CPU decode-row MLA/DSA ops (ops.h DecodeRowsView) against the one-sequence ops
// row by row: the ring slot and pool completion of indexer_update_rows, the candidate
// count of indexer_scores_rows, the top-k set (ascending, -1 padded, both tie rules) of
// indexer_topk_rows, and the per-row length and page table of the latent store and
// attention. Also the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

int64_t addr(const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); }

TEST(CpuDecodeRows, IndexerRowsEqualOneSequenceOps) {
  auto ops = make_cpu_ops();
  const int64_t kp = 4, d = 16, h = 3;
  const std::vector<int32_t> pos = {0, 2, 3, 4, 11, 40};
  const int64_t b = static_cast<int64_t>(pos.size());
  std::vector<Tensor> rings, pks;
  std::vector<int64_t> ra, pa;
  for (int64_t r = 0; r < b; ++r) {
    rings.push_back(randn({2, kp, d}, 1 + static_cast<uint32_t>(r)).contiguous());
    pks.push_back(randn({pos[r] / kp + 1, d}, 20 + static_cast<uint32_t>(r)).contiguous());
    ra.push_back(addr(rings.back()));
    pa.push_back(addr(pks.back()));
  }
  std::vector<std::vector<float>> rings0;  // copies before the update
  for (const Tensor& t : rings) rings0.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  DecodeRowsView v;
  v.rows = b;
  v.positions = pos.data();
  v.rings = ra.data();
  v.pool_keys = pa.data();
  v.kpool = kp;
  v.index_dim = d;
  const Tensor key = randn({b, d}, 50), gate = randn({b, d}, 51), ape = randn({kp, d}, 52);
  ops->indexer_update_rows(v, key, gate, ape);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t slot = pos[r] % kp;
    for (int64_t x = 0; x < d; ++x) {
      EXPECT_EQ(rings[r].data<float>()[slot * d + x], key.data<float>()[r * d + x]) << "row " << r;
      EXPECT_EQ(rings[r].data<float>()[(kp + slot) * d + x], gate.data<float>()[r * d + x]) << "row " << r;
    }
    if (slot == kp - 1) {
      Tensor want = Tensor::empty({1, d}, DType::kF32);
      ops->indexer_pool_keys(want, rings[r].select(0, 0).reshape({1, kp, d}), rings[r].select(0, 1).reshape({1, kp, d}),
                             ape);
      EXPECT_TRUE(same_bits(want, pks[r].slice(0, pos[r] / kp, pos[r] / kp + 1).contiguous())) << "row " << r;
    } else {
      // No pool completes: the other ring slots and the pooled keys are untouched.
      EXPECT_EQ(0, std::memcmp(rings[r].data<float>(), rings0[r].data(), slot * d * 4)) << "row " << r;
    }
  }
  const int64_t width = 12;  // >= every row's (pos + 1) / kp
  Tensor scores = Tensor::empty({b, width}, DType::kF32);
  std::fill_n(scores.data<float>(), b * width, -7.0f);
  const Tensor q = randn({b, h, d}, 60), w = randn({b, h}, 61);
  ops->indexer_scores_rows(scores, v, q, w, 0.25f, 0);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = (pos[r] + 1) / kp;
    for (int64_t p = n; p < width; ++p) EXPECT_EQ(scores.data<float>()[r * width + p], -7.0f) << "untouched past n";
    if (n == 0) continue;
    Tensor one = Tensor::empty({1, n}, DType::kF32);
    int32_t cand = static_cast<int32_t>(n);
    ops->indexer_scores(one, q.slice(0, r, r + 1).contiguous(), pks[r].slice(0, 0, n).contiguous(),
                        w.slice(0, r, r + 1).contiguous(), Tensor::view_of(&cand, {1}, DType::kI32), 0.25f);
    EXPECT_TRUE(same_bits(one, scores.slice(0, r, r + 1).slice(1, 0, n).contiguous())) << "row " << r;
  }
  // select = 4: rows with at most 4 pools are not scored at all; the others get the same bits.
  Tensor skipped = Tensor::empty({b, width}, DType::kF32);
  std::fill_n(skipped.data<float>(), b * width, -7.0f);
  ops->indexer_scores_rows(skipped, v, q, w, 0.25f, 4);
  int scored = 0, unscored = 0;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = (pos[r] + 1) / kp;
    const Tensor got = skipped.slice(0, r, r + 1).contiguous();
    if (n <= 4) {
      for (int64_t p = 0; p < width; ++p) EXPECT_EQ(got.data<float>()[p], -7.0f) << "row " << r << " was scored";
      unscored += n > 0;
    } else {
      EXPECT_TRUE(same_bits(scores.slice(0, r, r + 1).contiguous(), got)) << "row " << r;
      ++scored;
    }
  }
  EXPECT_GT(scored, 0);
  EXPECT_GT(unscored, 0);
  // A top-k that takes every candidate reads no score: NaN scores give every pool in order.
  Tensor nans = Tensor::empty({b, width}, DType::kF32);
  std::fill_n(nans.data<float>(), b * width, std::nanf(""));
  Tensor all = Tensor::empty({b, 4}, DType::kI32);
  ops->indexer_topk_rows(all, nans, v, TopkTies::kTorchCpu);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = (pos[r] + 1) / kp;
    if (n > 4) continue;
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(all.data<int32_t>()[r * 4 + j], j < n ? j : -1) << "row " << r;
  }
  // Top-2 with ties: row 5 (11 pools) has equal scores at the boundary.
  Tensor tied = Tensor::zeros({b, width}, DType::kF32);
  const float row5[] = {1, 3, 3, 0, 3, 2, 5, 3, 0, 0, 3};
  std::copy(std::begin(row5), std::end(row5), tied.data<float>() + 5 * width);
  Tensor sel = Tensor::empty({b, 2}, DType::kI32);
  ops->indexer_topk_rows(sel, tied, v, TopkTies::kLowerIndex);
  const std::vector<int32_t> want = {-1, -1, -1, -1, 0, -1, 0, -1, 0, 1, 1, 6};
  EXPECT_EQ(std::vector<int32_t>(sel.data<int32_t>(), sel.data<int32_t>() + 2 * b), want);
  Tensor idx = Tensor::empty({b, 2 * kp + kp - 1}, DType::kI32);
  ops->indexer_token_indices_rows(idx, sel, v, true);
  // Row 4 (position 11): pools 0 and 1 complete, both selected, the tail pool 2 is complete too: no tail.
  const std::vector<int32_t> row4 = {0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1};
  EXPECT_EQ(std::vector<int32_t>(idx.data<int32_t>() + 4 * 11, idx.data<int32_t>() + 5 * 11), row4);
  // Row 1 (position 2): no pool, tail tokens 0..2.
  const std::vector<int32_t> row1 = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2};
  EXPECT_EQ(std::vector<int32_t>(idx.data<int32_t>() + 11, idx.data<int32_t>() + 2 * 11), row1);
}

TEST(CpuDecodeRows, LatentStoreAndAttentionUseEachRowsTableAndLength) {
  auto ops = make_cpu_ops();
  const int64_t ps = 4, r = 8, heads = 2, pages = 8;
  Tensor store = Tensor::zeros({pages * ps * r}, DType::kF32);
  // Row 0: pages 5, 2 (position 6); row 1: pages 0, 7, 3 (position 9).
  std::vector<int32_t> t0 = {5, 2}, t1 = {0, 7, 3};
  const std::vector<int32_t> pos = {6, 9};
  const std::vector<int64_t> tables = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(t0.data())),
                                       static_cast<int64_t>(reinterpret_cast<uintptr_t>(t1.data()))};
  DecodeRowsView v;
  v.rows = 2;
  v.positions = pos.data();
  v.page_tables = tables.data();
  v.pages = store.raw();
  v.dtype = DType::kF32;
  v.page_size = ps;
  v.width = r;
  v.page_stride = ps * r;
  // Earlier tokens by the one-sequence store, then the new ones by the rows op.
  for (int i = 0; i < 2; ++i) {
    LatentPagesView one{store.raw(), nullptr, DType::kF32, ps, r, ps * r, i == 0 ? t0.data() : t1.data(), pos[i]};
    ops->latent_store(one, store.raw(), nullptr, randn({pos[i], r}, 70 + static_cast<uint32_t>(i)), 0);
  }
  const Tensor lat = randn({2, r}, 80);
  ops->latent_store_rows(v, lat);
  EXPECT_EQ(0, std::memcmp(store.data<float>() + (2 * ps + 2) * r, lat.data<float>(), r * 4));      // row 0: slot 6
  EXPECT_EQ(0, std::memcmp(store.data<float>() + (3 * ps + 1) * r, lat.data<float>() + r, r * 4));  // row 1: slot 9
  // Attention: every row lists tokens 0..11; each sees only its own pos + 1.
  std::vector<int32_t> idx(24);
  for (int i = 0; i < 24; ++i) idx[i] = i % 12;
  const Tensor q = randn({2, heads, r}, 90);
  Tensor out = Tensor::empty({2, heads, r}, DType::kF32);
  ops->mla_sparse_attention_rows(out, q, v, Tensor::view_of(idx.data(), {2, 12}, DType::kI32), 0.3f);
  for (int i = 0; i < 2; ++i) {
    LatentPagesView one{store.raw(), nullptr, DType::kF32, ps, r, ps * r, i == 0 ? t0.data() : t1.data(), pos[i] + 1};
    Tensor o = Tensor::empty({1, heads, r}, DType::kF32);
    ops->mla_sparse_attention(o, q.slice(0, i, i + 1).contiguous(), one,
                              Tensor::view_of(idx.data() + 12 * i, {1, 12}, DType::kI32), 0.3f);
    EXPECT_TRUE(same_bits(o, out.slice(0, i, i + 1).contiguous())) << "row " << i;
  }
}

TEST(CpuDecodeRows, BadViewsAreErrors) {
  auto ops = make_cpu_ops();
  DecodeRowsView v;
  v.rows = 2;
  EXPECT_THROW(ops->latent_store_rows(v, Tensor::zeros({2, 8}, DType::kF32)), StatusError);
  std::vector<int32_t> pos = {3, -1};
  v.positions = pos.data();
  v.kpool = 4;
  Tensor sel = Tensor::empty({2, 2}, DType::kI32);
  EXPECT_THROW(ops->indexer_topk_rows(sel, Tensor::zeros({2, 4}, DType::kF32), v, TopkTies::kLowerIndex), StatusError);
  v.kpool = 0;
  pos[1] = 1;
  EXPECT_THROW(ops->indexer_topk_rows(sel, Tensor::zeros({2, 4}, DType::kF32), v, TopkTies::kLowerIndex), StatusError);
  // Row counts must match the view.
  v.kpool = 4;
  Tensor sel3 = Tensor::empty({3, 2}, DType::kI32);
  EXPECT_THROW(ops->indexer_topk_rows(sel3, Tensor::zeros({2, 4}, DType::kF32), v, TopkTies::kLowerIndex), StatusError);
}

}  // namespace
}  // namespace tf
