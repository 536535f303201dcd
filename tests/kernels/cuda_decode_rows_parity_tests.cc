// The batched decode-row MLA/DSA ops (ops.h DecodeRowsView) on CUDA against the CPU
// reference, over awkward batches: mixed lengths, rows shorter than a pool, rows whose
// pool completes in this step, rows with more pools than the top-k keeps, f32, bf16
// and fp8 latent caches. Integer outputs (rings, selected pools, token indices, latent
// pages) must be equal; floats within the stated tolerance ("[parity] ..." lines). The
// GPU attention and store of a row must also equal, bit for bit, the one-sequence op on
// that row alone (what keeps a reply the same beside other sequences). SplitAttentionShapes
// covers the shapes that pick the split-token attention kernels (cuda_mla_decode.cu) or
// their per-head fallback, up to the model's 64 heads x 512 with W = 8195 indices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu_cuda_test.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "mla_decode_precision.h"
#include "test_tensors.h"

namespace tf {
namespace {

int64_t addr(const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); }

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

Tensor i64(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

double max_rel(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

bool equal_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Per-row state on one backend: rings [2, kp, D], pool keys [cap, D], page tables.
struct Side {
  std::vector<Tensor> rings, pool_keys, tables;
  Tensor positions, table_addrs, ring_addrs, pk_addrs;
};

class CudaDecodeRows : public CpuCudaTest {
 protected:
  void report(const std::string& what, double err, double tol) {
    std::printf("[parity] %-52s max rel err %.3g (tol %.0e)\n", what.c_str(), err, tol);
    EXPECT_LE(err, tol) << what;
  }
};

// Positions of the awkward batch: shorter than a pool (0, 1, 2), completing a pool
// (3, 7, 4095), just past one (4, 8), long (more pools than any top-k here keeps).
const std::vector<int32_t> kPositions = {0, 1, 2, 3, 4, 7, 8, 63, 64, 127, 130, 517, 2050, 4095, 4096, 2999};

TEST_F(CudaDecodeRows, IndexerUpdateScoresTopkAndTokens) {
  const int64_t kp = 4, d = 128, h = 32;
  const int64_t b = static_cast<int64_t>(kPositions.size());
  int64_t max_pools = 0;
  for (int32_t p : kPositions) max_pools = std::max<int64_t>(max_pools, (p + 1) / kp);
  Side hs, ds;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t cap = kPositions[r] / kp + 1;
    const Tensor ring = randn({2, kp, d}, 10 + static_cast<uint32_t>(r));
    const Tensor pk = randn({cap, d}, 40 + static_cast<uint32_t>(r), 0.5f);
    hs.rings.push_back(ring.contiguous());
    hs.pool_keys.push_back(pk.contiguous());
    ds.rings.push_back(up(ring));
    ds.pool_keys.push_back(up(pk));
  }
  std::vector<int64_t> hr, hp, dr, dp;
  for (int64_t r = 0; r < b; ++r) {
    hr.push_back(addr(hs.rings[r]));
    hp.push_back(addr(hs.pool_keys[r]));
    dr.push_back(addr(ds.rings[r]));
    dp.push_back(addr(ds.pool_keys[r]));
  }
  hs.positions = i32(kPositions);
  hs.ring_addrs = i64(hr);
  hs.pk_addrs = i64(hp);
  ds.positions = up(hs.positions);
  ds.ring_addrs = up(i64(dr));
  ds.pk_addrs = up(i64(dp));
  auto view = [&](Side& s) {
    DecodeRowsView v;
    v.rows = b;
    v.positions = s.positions.data<int32_t>();
    v.rings = s.ring_addrs.data<int64_t>();
    v.pool_keys = s.pk_addrs.data<int64_t>();
    v.kpool = kp;
    v.index_dim = d;
    return v;
  };
  const DecodeRowsView hv = view(hs), dv = view(ds);

  // 1. Ring slot + completed pools.
  const Tensor key = randn({b, d}, 1), gate = randn({b, d}, 2, 2.0f), ape = randn({kp, d}, 3);
  cpu_->indexer_update_rows(hv, key, gate, ape);
  gpu_->indexer_update_rows(dv, up(key), up(gate), up(ape));
  double pk_err = 0;
  for (int64_t r = 0; r < b; ++r) {
    EXPECT_TRUE(equal_bytes(hs.rings[r], down(ds.rings[r]))) << "ring of row " << r;
    pk_err = std::max(pk_err, max_rel(hs.pool_keys[r], down(ds.pool_keys[r])));
  }
  report("indexer_update_rows pool keys B=" + std::to_string(b), pk_err, 1e-6);
  // The completed pool of a row is the one-sequence pooled key of its ring.
  for (int64_t r = 0; r < b; ++r) {
    if (kPositions[r] % kp != kp - 1) continue;
    Tensor one = Tensor::empty({1, d}, DType::kF32);
    cpu_->indexer_pool_keys(one, hs.rings[r].select(0, 0).reshape({1, kp, d}),
                            hs.rings[r].select(0, 1).reshape({1, kp, d}), ape);
    EXPECT_TRUE(same_bits(one, hs.pool_keys[r].slice(0, kPositions[r] / kp, kPositions[r] / kp + 1).contiguous()))
        << "completed pool of row " << r;
  }

  // 2. Scores over a wider buffer than any row needs (columns past a row's pools unused).
  const int64_t width = max_pools + 37;
  const Tensor q = randn({b, h, d}, 4), w = randn({b, h}, 5);
  Tensor hsc = Tensor::zeros({b, width}, DType::kF32);
  Tensor dsc = gpu_->zeros({b, width});
  cpu_->indexer_scores_rows(hsc, hv, q, w, 0.088f, 0);
  gpu_->indexer_scores_rows(dsc, dv, up(q), up(w), 0.088f, 0);
  report("indexer_scores_rows B=" + std::to_string(b) + " W=" + std::to_string(width), max_rel(hsc, down(dsc)), 1e-5);
  // Row by row, the one-sequence op over the row's pools.
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = (kPositions[r] + 1) / kp;
    if (n == 0) continue;
    Tensor one = Tensor::empty({1, n}, DType::kF32);
    cpu_->indexer_scores(one, q.slice(0, r, r + 1).contiguous(), hs.pool_keys[r].slice(0, 0, n).contiguous(),
                         w.slice(0, r, r + 1).contiguous(), i32({static_cast<int32_t>(n)}), 0.088f);
    EXPECT_TRUE(same_bits(one, hsc.slice(0, r, r + 1).slice(1, 0, n).contiguous())) << "scores of row " << r;
  }
  // A buffer past 2048 pools takes the thread-per-pool kernel, this one the warp-per-pool
  // kernel: the same bits (the buffer width follows the longest sequence of the batch,
  // so a row's scores must not depend on it).
  Tensor dwide = gpu_->zeros({b, 4096});
  gpu_->indexer_scores_rows(dwide, dv, up(q), up(w), 0.088f, 0);
  const Tensor narrow_h = down(dsc), wide_h = down(dwide);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = (kPositions[r] + 1) / kp;
    if (n == 0) continue;
    EXPECT_TRUE(same_bits(narrow_h.slice(0, r, r + 1).slice(1, 0, n).contiguous(),
                          wide_h.slice(0, r, r + 1).slice(1, 0, n).contiguous()))
        << "scores of row " << r << " at widths " << width << " and 4096";
  }

  // Rows with at most `select` pools are not scored (the top-k takes them all): left as they
  // were, on both kernels; the other rows get the same bits as without it.
  const int64_t select = max_pools / 2;
  for (int64_t w_buf : {width, int64_t{4096}}) {
    Tensor sentinel = Tensor::empty({b, w_buf}, DType::kF32);
    std::fill_n(sentinel.data<float>(), b * w_buf, -7.0f);
    Tensor dsel = up(sentinel);
    gpu_->indexer_scores_rows(dsel, dv, up(q), up(w), 0.088f, select);
    const Tensor got = down(dsel), full = w_buf == width ? narrow_h : wide_h;
    int scored = 0, unscored = 0;
    for (int64_t r = 0; r < b; ++r) {
      const int64_t n = (kPositions[r] + 1) / kp;
      if (n == 0) continue;
      const Tensor g = got.slice(0, r, r + 1).slice(1, 0, n).contiguous();
      if (n <= select) {
        for (int64_t p = 0; p < n; ++p) EXPECT_EQ(g.data<float>()[p], -7.0f) << "row " << r << " was scored";
        ++unscored;
      } else {
        EXPECT_TRUE(same_bits(full.slice(0, r, r + 1).slice(1, 0, n).contiguous(), g)) << "row " << r;
        ++scored;
      }
    }
    EXPECT_GT(scored, 0) << "width " << w_buf;
    EXPECT_GT(unscored, 0) << "width " << w_buf;
  }

  // 3. Top-k on the same scores, with many exact ties (values rounded to a coarse grid).
  Tensor tied = hsc.contiguous();
  for (int64_t i = 0; i < tied.numel(); ++i) tied.data<float>()[i] = std::round(tied.data<float>()[i] * 0.5f);
  for (const Tensor* sc : {&hsc, &tied}) {
    for (int64_t s : {int64_t{8}, int64_t{512}}) {
      for (TopkTies ties : {TopkTies::kLowerIndex, TopkTies::kTorchCpu}) {
        const std::string tag = std::string(sc == &tied ? " tied" : "") + " S=" + std::to_string(s) +
                                (ties == TopkTies::kTorchCpu ? " torch-cpu" : " lower-index");
        Tensor hsel = Tensor::empty({b, s}, DType::kI32);
        Tensor dsel = gpu_->empty({b, s}, DType::kI32);
        cpu_->indexer_topk_rows(hsel, *sc, hv, ties);
        gpu_->indexer_topk_rows(dsel, up(*sc), dv, ties);
        const Tensor got = down(dsel);
        EXPECT_TRUE(equal_bytes(hsel, got)) << "indexer_topk_rows" << tag;
        std::printf("[parity] indexer_topk_rows%-30s %s\n", tag.c_str(), equal_bytes(hsel, got) ? "equal" : "DIFFERENT");
        // The set is topk's over the row's own pools.
        for (int64_t r = 0; r < b; ++r) {
          const int64_t n = (kPositions[r] + 1) / kp, k = std::min(s, n);
          std::vector<int32_t> want(static_cast<size_t>(s), -1);
          if (k > 0) {
            Tensor vals = Tensor::empty({1, k}, DType::kF32), idx = Tensor::empty({1, k}, DType::kI32);
            cpu_->topk(vals, idx, sc->slice(0, r, r + 1).slice(1, 0, n).contiguous(), static_cast<int>(k), ties);
            std::copy_n(idx.data<int32_t>(), k, want.begin());
            std::sort(want.begin(), want.begin() + k);
          }
          EXPECT_TRUE(std::equal(want.begin(), want.end(), hsel.data<int32_t>() + r * s)) << "row " << r << tag;
        }
        // 4. Token expansion of the selection.
        for (bool tail : {true, false}) {
          const int64_t wi = s * kp + (tail ? kp - 1 : 0) + 5;
          Tensor hidx = Tensor::empty({b, wi}, DType::kI32);
          Tensor didx = gpu_->empty({b, wi}, DType::kI32);
          cpu_->indexer_token_indices_rows(hidx, hsel, hv, tail);
          gpu_->indexer_token_indices_rows(didx, up(hsel), dv, tail);
          EXPECT_TRUE(equal_bytes(hidx, down(didx))) << "indexer_token_indices_rows" << tag << " tail " << tail;
        }
      }
    }
  }
}

TEST_F(CudaDecodeRows, LatentStoreAndAttentionRows) {
  const int64_t page_size = 64, heads = 5;
  const int64_t b = static_cast<int64_t>(kPositions.size());
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t r : {72, 512}) {
      const std::string tag = std::string(" ") + dtype_name(dt) + " R=" + std::to_string(r);
      // Scrambled physical pages: every row gets its own pages out of one pool.
      std::vector<int64_t> first_page(static_cast<size_t>(b) + 1, 0);
      for (int64_t i = 0; i < b; ++i) first_page[i + 1] = first_page[i] + kPositions[i] / page_size + 1;
      const int64_t num_pages = first_page[b];
      std::vector<int32_t> perm(static_cast<size_t>(num_pages));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
      const int64_t es = static_cast<int64_t>(dtype_size(dt));
      Tensor hpages = Tensor::zeros({num_pages * page_size * r * es}, DType::kU8);
      Tensor hscales = Tensor::zeros({num_pages * page_size}, DType::kF32);
      Tensor dpages = gpu_->zeros({num_pages * page_size * r * es}, DType::kU8);
      Tensor dscales = gpu_->zeros({num_pages * page_size}, DType::kF32);
      Side hs, ds;
      std::vector<int64_t> ht, dtab;
      for (int64_t i = 0; i < b; ++i) {
        std::vector<int32_t> table(perm.begin() + first_page[i], perm.begin() + first_page[i + 1]);
        hs.tables.push_back(i32(table));
        ds.tables.push_back(up(hs.tables.back()));
        ht.push_back(addr(hs.tables.back()));
        dtab.push_back(addr(ds.tables.back()));
        // The row's earlier tokens, stored by the one-sequence op on both sides.
        if (kPositions[i] > 0) {
          const Tensor old = randn({kPositions[i], r}, 300 + static_cast<uint32_t>(i), 2.0f);
          LatentPagesView hv{hpages.raw(), hscales.data<float>(), dt, page_size, r, page_size * r,
                             hs.tables.back().data<int32_t>(), kPositions[i]};
          LatentPagesView dv{dpages.raw(), dscales.data<float>(), dt, page_size, r, page_size * r,
                             ds.tables.back().data<int32_t>(), kPositions[i]};
          cpu_->latent_store(hv, hpages.raw(), hscales.data<float>(), old, 0);
          gpu_->latent_store(dv, dpages.raw(), dscales.data<float>(), up(old), 0);
        }
      }
      hs.positions = i32(kPositions);
      ds.positions = up(hs.positions);
      hs.table_addrs = i64(ht);
      ds.table_addrs = up(i64(dtab));
      auto view = [&](Side& s, Tensor& pages, Tensor& scales) {
        DecodeRowsView v;
        v.rows = b;
        v.positions = s.positions.data<int32_t>();
        v.page_tables = s.table_addrs.data<int64_t>();
        v.pages = pages.raw();
        v.scales = scales.data<float>();
        v.dtype = dt;
        v.page_size = page_size;
        v.width = r;
        v.page_stride = page_size * r;
        return v;
      };
      const DecodeRowsView hv = view(hs, hpages, hscales), dv = view(ds, dpages, dscales);
      const Tensor lat = randn({b, r}, 400, 2.0f);
      cpu_->latent_store_rows(hv, lat);
      gpu_->latent_store_rows(dv, up(lat));
      EXPECT_TRUE(equal_bytes(hpages, down(dpages))) << "latent_store_rows pages" << tag;
      EXPECT_TRUE(equal_bytes(hscales, down(dscales))) << "latent_store_rows scales" << tag;

      // Indices: the expansion a DSA layer gives (pools of 4, 6 selected + tail) mixed
      // with random tokens, -1s, duplicates and tokens past the row's length.
      const int64_t w = 2051;
      std::mt19937 rng(500);
      std::vector<int32_t> idx(static_cast<size_t>(b * w), -1);
      for (int64_t i = 0; i < b; ++i) {
        std::uniform_int_distribution<int32_t> pick(-2, kPositions[i] + 3);
        const int64_t used = i % 3 == 0 ? w : 40 + i * 13;
        for (int64_t j = 0; j < used; ++j) idx[i * w + j] = pick(rng);
      }
      const Tensor hidx = i32(idx).reshape({b, w});
      const Tensor q = randn({b, heads, r}, 501, 0.3f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(r));
      Tensor ref = Tensor::empty({b, heads, r}, DType::kF32);
      cpu_->mla_sparse_attention_rows(ref, q, hv, hidx, scale);
      const Tensor didx = up(hidx), dq = up(q);
      each_mla_decode_precision(dt, r, [&](const char* how, double tol) {
        Tensor out = gpu_->empty({b, heads, r});
        gpu_->mla_sparse_attention_rows(out, dq, dv, didx, scale);
        const Tensor got = down(out);
        report("mla_sparse_attention_rows" + tag + how + " B=" + std::to_string(b), max_rel(ref, got), tol);
        // Row alone through the one-sequence ops: the CPU's exactly, the GPU's bit for bit.
        for (int64_t i = 0; i < b; ++i) {
          auto one_row = [&](Tensor& pages, Tensor& scales, const Tensor& table) {
            return LatentPagesView{
                pages.raw(),           scales.data<float>(), dt, page_size, r, page_size * r,
                table.data<int32_t>(), kPositions[i] + 1};
          };
          const LatentPagesView one_h = one_row(hpages, hscales, hs.tables[i]);
          const LatentPagesView one_d = one_row(dpages, dscales, ds.tables[i]);
          Tensor ho = Tensor::empty({1, heads, r}, DType::kF32);
          cpu_->mla_sparse_attention(ho, q.slice(0, i, i + 1).contiguous(), one_h,
                                     hidx.slice(0, i, i + 1).contiguous(), scale);
          EXPECT_TRUE(same_bits(ho, ref.slice(0, i, i + 1).contiguous())) << "cpu row " << i << tag;
          Tensor dout = gpu_->empty({1, heads, r});
          gpu_->mla_sparse_attention(dout, dq.slice(0, i, i + 1), one_d, didx.slice(0, i, i + 1), scale);
          EXPECT_TRUE(same_bits(down(dout), got.slice(0, i, i + 1).contiguous()))
              << "gpu row " << i << tag << how;
        }
      });
    }
  }
}

// The one-sequence op over the shapes that pick the split-token kernels or the
// per-head fallback: the model's 64 heads x 512 with a DSA expansion of 2048 pools
// (W = 8195), one index, rows without any valid index (zeros), a width that is not a
// multiple of 4 (fallback), more rows than one launch batch (16), widths of 128 and 256 (the
// tensor-core kernels' runtime-width forms). CUDA vs CPU within the
// tolerance, and every row bit for bit the op on that row alone.
TEST_F(CudaDecodeRows, SplitAttentionShapes) {
  struct Case {
    int64_t heads, r, w, t, tokens;
    DType dt;
    int kind;  // 0: random with repeats and -1s, 1: ascending pools of 4 + tail, 2: all -1
  };
  const std::vector<Case> cases = {
      {64, 512, 8195, 2, 16500, DType::kF8E4M3, 1},
      {64, 512, 2051, 3, 9000, DType::kBF16, 1},
      {16, 128, 1, 4, 50, DType::kBF16, 0},
      {8, 64, 300, 3, 700, DType::kF8E4M3, 2},
      {3, 70, 100, 3, 300, DType::kF32, 0},
      {8, 64, 300, 40, 700, DType::kBF16, 0},
      {12, 96, 4099, 2, 5000, DType::kF32, 0},
      // Widths other than the model's 512 take the tensor-core kernels' runtime-width forms.
      {16, 256, 700, 3, 1500, DType::kF8E4M3, 0},
      {16, 128, 700, 2, 1500, DType::kBF16, 1},
  };
  const int64_t page_size = 64;
  for (const Case& c : cases) {
    const std::string tag = std::string(" ") + dtype_name(c.dt) + " H=" + std::to_string(c.heads) +
                            " R=" + std::to_string(c.r) + " W=" + std::to_string(c.w) + " T=" + std::to_string(c.t);
    const int64_t num_pages = c.tokens / page_size + 1, es = static_cast<int64_t>(dtype_size(c.dt));
    std::vector<int32_t> table(static_cast<size_t>(num_pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(11));
    Tensor hpages = Tensor::zeros({num_pages * page_size * c.r * es}, DType::kU8);
    Tensor hscales = Tensor::zeros({num_pages * page_size}, DType::kF32);
    Tensor dpages = gpu_->zeros({num_pages * page_size * c.r * es}, DType::kU8);
    Tensor dscales = gpu_->zeros({num_pages * page_size}, DType::kF32);
    const Tensor htable = i32(table), dtable = up(htable);
    const LatentPagesView hv{hpages.raw(), hscales.data<float>(), c.dt, page_size, c.r, page_size * c.r,
                             htable.data<int32_t>(), c.tokens};
    const LatentPagesView dv{dpages.raw(), dscales.data<float>(), c.dt, page_size, c.r, page_size * c.r,
                             dtable.data<int32_t>(), c.tokens};
    const Tensor lat = randn({c.tokens, c.r}, 600, 2.0f);
    cpu_->latent_store(hv, hpages.raw(), hscales.data<float>(), lat, 0);
    gpu_->latent_store(dv, dpages.raw(), dscales.data<float>(), up(lat), 0);
    std::mt19937 rng(601);
    std::vector<int32_t> idx(static_cast<size_t>(c.t * c.w), -1);
    for (int64_t i = 0; i < c.t; ++i) {
      int32_t* row = idx.data() + i * c.w;
      if (c.kind == 0) {
        std::uniform_int_distribution<int32_t> pick(-3, static_cast<int32_t>(c.tokens) + 2);
        for (int64_t j = 0; j < c.w; ++j) row[j] = pick(rng);
      } else if (c.kind == 1) {  // (w - 3) / 4 ascending pools (some -1 pools), then the tail
        const int64_t sel = (c.w - 3) / 4, pools = (c.tokens - 3) / 4;
        int64_t pool = static_cast<int64_t>(rng() % 3);
        for (int64_t s = 0; s < sel && pool < pools; ++s, pool += 1 + static_cast<int64_t>(rng() % 2))
          if (s % 97 != 5)
            for (int64_t k = 0; k < 4; ++k) row[s * 4 + k] = static_cast<int32_t>(pool * 4 + k);
        for (int64_t k = 0; k < 3; ++k) row[sel * 4 + k] = static_cast<int32_t>(pools * 4 + k);
      }
    }
    const Tensor hidx = i32(idx).reshape({c.t, c.w}), didx = up(hidx);
    const Tensor q = randn({c.t, c.heads, c.r}, 602, 0.3f), dq = up(q);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.r));
    Tensor ref = Tensor::empty({c.t, c.heads, c.r}, DType::kF32);
    cpu_->mla_sparse_attention(ref, q, hv, hidx, scale);
    each_mla_decode_precision(c.dt, c.r, [&](const char* how, double tol) {
      Tensor out = gpu_->empty({c.t, c.heads, c.r});
      gpu_->mla_sparse_attention(out, dq, dv, didx, scale);
      const Tensor got = down(out);
      report("mla_sparse_attention" + tag + how, max_rel(ref, got), tol);
      if (c.kind == 2) {
        const std::vector<float> v = got.to_vector();
        EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }))
            << "no index: zeros" << tag;
      }
      for (int64_t i = 0; i < c.t; ++i) {
        Tensor one = gpu_->empty({1, c.heads, c.r});
        gpu_->mla_sparse_attention(one, dq.slice(0, i, i + 1), dv, didx.slice(0, i, i + 1), scale);
        EXPECT_TRUE(same_bits(down(one), got.slice(0, i, i + 1).contiguous()))
            << "gpu row " << i << tag << how;
      }
    });
  }
}

// A row's split-attention bits are a function of its own valid indices only: the same
// tokens listed in a W of their own count, in a wider buffer in another order with -1s,
// repeats and tokens past the end (the prep sorts and drops them), or as the middle row
// beside a long and a short row, give the same bits (64 heads x 512, bf16 and fp8 pages,
// from 1 to 4099 tokens: one tile to many chunks of many tiles). CUDA vs CPU within 1e-5.
TEST_F(CudaDecodeRows, SplitAttentionBitsIgnoreTheWidth) {
  const int64_t heads = 64, r = 512, page_size = 64, tokens = 9000, wide = 8195;
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    const int64_t num_pages = tokens / page_size + 1, es = static_cast<int64_t>(dtype_size(dt));
    std::vector<int32_t> table(static_cast<size_t>(num_pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(21));
    Tensor hpages = Tensor::zeros({num_pages * page_size * r * es}, DType::kU8);
    Tensor hscales = Tensor::zeros({num_pages * page_size}, DType::kF32);
    Tensor dpages = gpu_->zeros({num_pages * page_size * r * es}, DType::kU8);
    Tensor dscales = gpu_->zeros({num_pages * page_size}, DType::kF32);
    const Tensor htable = i32(table), dtable = up(htable);
    const LatentPagesView hv{hpages.raw(), hscales.data<float>(), dt, page_size, r, page_size * r,
                             htable.data<int32_t>(), tokens};
    const LatentPagesView dv{dpages.raw(), dscales.data<float>(), dt, page_size, r, page_size * r,
                             dtable.data<int32_t>(), tokens};
    const Tensor lat = randn({tokens, r}, 700, 2.0f);
    cpu_->latent_store(hv, hpages.raw(), hscales.data<float>(), lat, 0);
    gpu_->latent_store(dv, dpages.raw(), dscales.data<float>(), up(lat), 0);
    const float scale = 1.0f / std::sqrt(192.0f);
    std::mt19937 rng(701);
    for (int64_t n : {1, 31, 67, 300, 1024, 2051, 4099}) {
      const std::string tag = std::string(" ") + dtype_name(dt) + " n=" + std::to_string(n);
      // n distinct ascending tokens (about every other one).
      std::vector<int32_t> own;
      for (int32_t tok = static_cast<int32_t>(rng() % 2); static_cast<int64_t>(own.size()) < n;
           tok += 1 + static_cast<int32_t>(rng() % 2))
        own.push_back(tok);
      // The same set in a wide row: shuffled, with repeats, -1s and tokens past the end.
      std::vector<int32_t> mixed = own;
      for (int64_t j = 0; j < std::min<int64_t>(n, 50); ++j) mixed.push_back(own[rng() % own.size()]);
      while (static_cast<int64_t>(mixed.size()) < wide - 40) mixed.push_back(-1);
      while (static_cast<int64_t>(mixed.size()) < wide) mixed.push_back(static_cast<int32_t>(tokens + rng() % 9));
      std::shuffle(mixed.begin(), mixed.end(), rng);
      // Three rows at the wide width: a long row, the row ascending then -1s, a short row.
      std::vector<int32_t> three(static_cast<size_t>(3 * wide), -1);
      for (int64_t j = 0; j < 4099; ++j) three[j] = static_cast<int32_t>(2 * j);
      std::copy(own.begin(), own.end(), three.begin() + wide);
      three[2 * wide] = 5;
      const Tensor q = randn({1, heads, r}, 702, 0.3f), q3 = randn({3, heads, r}, 703, 0.3f);
      Tensor q3m = q3.contiguous();
      std::memcpy(q3m.data<float>() + heads * r, q.raw(), q.nbytes());
      const Tensor hown = i32(own).reshape({1, n});
      Tensor ref = Tensor::empty({1, heads, r}, DType::kF32);
      cpu_->mla_sparse_attention(ref, q, hv, hown, scale);
      each_mla_decode_precision(dt, r, [&](const char* how, double tol) {
        Tensor a = gpu_->empty({1, heads, r}), b = gpu_->empty({1, heads, r}), c = gpu_->empty({3, heads, r});
        gpu_->mla_sparse_attention(a, up(q), dv, up(hown), scale);
        gpu_->mla_sparse_attention(b, up(q), dv, up(i32(mixed).reshape({1, wide})), scale);
        gpu_->mla_sparse_attention(c, up(q3m), dv, up(i32(three).reshape({3, wide})), scale);
        const Tensor ha = down(a), hb = down(b), hc = down(c);
        report("mla split width" + tag + how, max_rel(ref, ha), tol);
        EXPECT_TRUE(same_bits(ha, hb)) << "own width vs wide shuffled row" << tag << how;
        EXPECT_TRUE(same_bits(ha, hc.slice(0, 1, 2).contiguous()))
            << "own width vs middle of three rows" << tag << how;
      });
    }
  }
}

// Long rows for the indexer: scores over 40K+ pools (blocks across the row) and top-k
// among up to 262144 candidates (one 1024-thread block a row), with and without ties,
// against the CPU; the scores buffer is wider than every row.
TEST_F(CudaDecodeRows, IndexerLongRows) {
  const int64_t kp = 4, d = 128, h = 32;
  const std::vector<int32_t> positions = {4 * 40000 - 1, 4 * 70001 + 2, 4 * 262144 - 1, 37};
  const int64_t b = static_cast<int64_t>(positions.size()), width = 262144 + 64;
  Side hs, ds;
  std::vector<int64_t> hp, dp;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t cap = positions[r] / kp + 1;
    const Tensor pk = randn({cap, d}, 70 + static_cast<uint32_t>(r), 0.5f);
    hs.pool_keys.push_back(pk.contiguous());
    ds.pool_keys.push_back(up(pk));
    hp.push_back(addr(hs.pool_keys.back()));
    dp.push_back(addr(ds.pool_keys.back()));
  }
  hs.positions = i32(positions);
  ds.positions = up(hs.positions);
  hs.pk_addrs = i64(hp);
  ds.pk_addrs = up(i64(dp));
  auto view = [&](Side& s) {
    DecodeRowsView v;
    v.rows = b;
    v.positions = s.positions.data<int32_t>();
    v.pool_keys = s.pk_addrs.data<int64_t>();
    v.kpool = kp;
    v.index_dim = d;
    return v;
  };
  const DecodeRowsView hv = view(hs), dv = view(ds);
  const Tensor q = randn({b, h, d}, 80), w = randn({b, h}, 81);
  Tensor hsc = Tensor::zeros({b, width}, DType::kF32);
  Tensor dsc = gpu_->zeros({b, width});
  cpu_->indexer_scores_rows(hsc, hv, q, w, 0.088f, 0);
  gpu_->indexer_scores_rows(dsc, dv, up(q), up(w), 0.088f, 0);
  report("indexer_scores_rows long B=" + std::to_string(b), max_rel(hsc, down(dsc)), 1e-5);
  Tensor tied = hsc.contiguous();
  for (int64_t i = 0; i < tied.numel(); ++i) tied.data<float>()[i] = std::round(tied.data<float>()[i] * 0.25f);
  for (const Tensor* sc : {&hsc, &tied})
    for (int64_t s : {int64_t{512}, int64_t{2048}}) {
      Tensor hsel = Tensor::empty({b, s}, DType::kI32);
      Tensor dsel = gpu_->empty({b, s}, DType::kI32);
      cpu_->indexer_topk_rows(hsel, *sc, hv, TopkTies::kLowerIndex);
      gpu_->indexer_topk_rows(dsel, up(*sc), dv, TopkTies::kLowerIndex);
      const bool same = equal_bytes(hsel, down(dsel));
      EXPECT_TRUE(same) << "indexer_topk_rows long S=" << s << (sc == &tied ? " tied" : "");
      std::printf("[parity] indexer_topk_rows long%s S=%-5lld %s\n", sc == &tied ? " tied" : "",
                  static_cast<long long>(s), same ? "equal" : "DIFFERENT");
    }
}

// Top-k over buffers past 8,192 pools goes in two steps (each 8,192-pool chunk keeps its
// own top-k, then a block a row selects among those): the same set as the CPU's, where a
// row's top-k sits in one chunk, spreads over all, ends just past a chunk, or is all ties.
TEST_F(CudaDecodeRows, IndexerTopkInChunksKeepsTheSet) {
  const int64_t kp = 4, width = 65536, s = 512;
  const std::vector<int64_t> pools = {513, 8192, 8193, 20000, 65536, 100};
  const int64_t b = static_cast<int64_t>(pools.size());
  std::vector<int32_t> positions;
  for (int64_t n : pools) positions.push_back(static_cast<int32_t>(n * kp + 1));
  const Tensor hpos = i32(positions), dpos = up(hpos);
  auto view = [&](const Tensor& pos) {
    DecodeRowsView v;
    v.rows = b;
    v.positions = pos.data<int32_t>();
    v.kpool = kp;
    v.index_dim = 128;
    return v;
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const char* patterns[] = {"random", "rising", "falling", "all equal", "coarse ties"};
  for (int pattern = 0; pattern < 5; ++pattern) {
    Tensor sc = Tensor::empty({b, width}, DType::kF32);
    float* x = sc.data<float>();
    for (int64_t r = 0; r < b; ++r)
      for (int64_t j = 0; j < width; ++j) {
        float v = normal(rng);
        if (pattern == 1) v = static_cast<float>(j) * 1e-3f;
        if (pattern == 2) v = -static_cast<float>(j);
        if (pattern == 3) v = 0.5f;
        if (pattern == 4) v = std::round(v * 2.0f);
        x[r * width + j] = j % 7 == 3 && pattern == 0 ? -0.0f : v;  // -0 and +0 are one value
      }
    Tensor hsel = Tensor::empty({b, s}, DType::kI32);
    Tensor dsel = gpu_->empty({b, s}, DType::kI32);
    cpu_->indexer_topk_rows(hsel, sc, view(hpos), TopkTies::kLowerIndex);
    gpu_->indexer_topk_rows(dsel, up(sc), view(dpos), TopkTies::kLowerIndex);
    const bool same = equal_bytes(hsel, down(dsel));
    EXPECT_TRUE(same) << "indexer_topk_rows in chunks, " << patterns[pattern];
    std::printf("[parity] indexer_topk_rows in chunks, %-12s %s\n", patterns[pattern],
                same ? "equal" : "DIFFERENT");
  }
}

TEST_F(CudaDecodeRows, BadViewsAreErrorsNotCrashes) {
  DecodeRowsView v;
  v.rows = 2;  // no positions, no pages
  Tensor lat = gpu_->zeros({2, 8});
  EXPECT_THROW(gpu_->latent_store_rows(v, lat), StatusError);
  Tensor sel = gpu_->empty({2, 4}, DType::kI32), sc = gpu_->zeros({2, 16});
  EXPECT_THROW(gpu_->indexer_topk_rows(sel, sc, v, TopkTies::kLowerIndex), StatusError);
  EXPECT_THROW(cpu_->latent_store_rows(v, Tensor::zeros({2, 8}, DType::kF32)), StatusError);
}

}  // namespace
}  // namespace tf
