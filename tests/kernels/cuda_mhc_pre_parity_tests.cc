// The fused mHC pre-step (Ops::mhc_pre on CUDA, cuda_mhc_pre.cu) against the
// default sequence of five ops on the GPU (legacy_small_ops() forces it) and
// against the CPU reference:
// - decode rows (1-64, M = 4): within 2e-5 of both (the fused op applies the flat
//   norm's scale after the fn dot products: rounding differences only);
// - a row's bits do not depend on the other rows of the call, repeated calls give
//   the same bits (no float atomics), a captured graph replays the eager bits;
// - calls the kernels do not take (over exact_rows rows, M != 4, D not a multiple
//   of 4, no norm weight) still give the CPU's result through the default path;
// - with or without programmatic dependent launch: the same bits; with any rows per
//   pass block too;
// - mhc_expand_pre (the expand folded into the pass) writes mhc_expand's streams and
//   then gives mhc_pre's bits over them;
// - fn in bf16 gives the bits of its values in f32 (and stays fused past exact_rows);
// - past exact_rows the rows pass (cuda_mhc_pre_rows.cuh) agrees with the decode pass
//   and the CPU, is deterministic, and a row's bits do not depend on its batch-mates;
// - today's kernels give session 7's bits (mhc_pre_v1), the Sinkhorn chain alone too,
//   and its division equals IEEE division;
// - a mis-shaped fn is an error naming it.
// Part of cuda_ops_parity_tests (label gpu): runs on the GPU machine.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "cpu_cuda_test.h"
#include "kernels/cuda/cuda_mhc_pre.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/legacy_small_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

struct Site {
  Tensor streams, fn, base, scale, weight;  // host
};

Site make_site(int64_t t, int64_t m, int64_t d, uint32_t seed, bool weighted = true) {
  const int64_t mix = (2 + m) * m;
  Site s;
  s.streams = randn({t, m, d}, seed, 1.5f);
  // fn entries ~ 1/sqrt(K) so that the logits are O(1), as in a trained model.
  s.fn = randn({mix, m * d}, seed + 1, 1.0f / 64.0f);
  s.base = randn({mix}, seed + 2, 0.5f);
  s.scale = Tensor::from_floats({3}, {0.9f, 1.1f, 1.7f});
  if (weighted) s.weight = randn({d}, seed + 3, 0.2f, 1.0f);
  return s;
}

struct Outs {
  Tensor post, comb, out;
};

class MhcPre : public CpuCudaTest {
 protected:
  // mhc_pre on the GPU (default sequence when `legacy`), results on the host; fn in
  // `fn_dtype` (f32 or bf16: s.fn's values converted).
  Outs gpu(const Site& s, bool legacy = false, DType fn_dtype = DType::kF32) {
    const int64_t t = s.streams.size(0), m = s.streams.size(1), d = s.streams.size(2);
    Tensor post = gpu_->empty({t, m}), comb = gpu_->empty({t, m, m}), out = gpu_->empty({t, d});
    cuda::legacy_small_ops() = legacy;
    gpu_->mhc_pre(post, comb, out, up(s.streams), up(s.fn.to_dtype(fn_dtype)), up(s.base), up(s.scale),
                  s.weight.is_null() ? Tensor() : up(s.weight), 1e-5f, 1e-6f, 20);
    cuda::legacy_small_ops() = false;
    return {down(post), down(comb), down(out)};
  }
  Outs cpu(const Site& s) {
    const int64_t t = s.streams.size(0), m = s.streams.size(1), d = s.streams.size(2);
    Outs o{Tensor::empty({t, m}, DType::kF32), Tensor::empty({t, m, m}, DType::kF32),
           Tensor::empty({t, d}, DType::kF32)};
    cpu_->mhc_pre(o.post, o.comb, o.out, s.streams, s.fn, s.base, s.scale, s.weight, 1e-5f, 1e-6f, 20);
    return o;
  }
  void expect_close(const Outs& ref, const Outs& got, double tol, const std::string& tag) {
    EXPECT_LE(parity_rel_err(ref.post, got.post), tol) << "post " << tag;
    EXPECT_LE(parity_rel_err(ref.comb, got.comb), tol) << "comb " << tag;
    EXPECT_LE(parity_rel_err(ref.out, got.out), tol) << "out " << tag;
  }
};

Tensor row_of(const Tensor& t, int64_t r) {
  Tensor one = t.select(0, r).contiguous();
  return one;
}

// `into` with its streams' row `at` replaced by row `r` of `from`'s (same fn and the rest).
Site with_row_at(Site into, const Site& from, int64_t r, int64_t at) {
  Site s = from;
  s.streams = into.streams.contiguous();
  const int64_t n = from.streams.size(1) * from.streams.size(2);
  std::memcpy(s.streams.data<float>() + at * n, from.streams.data<float>() + r * n, n * sizeof(float));
  return s;
}

TEST_F(MhcPre, FusedMatchesTheDefaultSequenceAndTheCpu) {
  int differing = 0;  // cases whose bits differ from the default: the fused kernels ran
  for (int64_t d : {4096, 1024, 260, 8192}) {
    for (int64_t t : {1, 3, 8, 9, 64}) {
      const Site s = make_site(t, 4, d, 100 + static_cast<uint32_t>(t + d));
      const std::string tag = "T=" + std::to_string(t) + " D=" + std::to_string(d);
      const Outs fused = gpu(s), seq = gpu(s, true), ref = cpu(s);
      expect_close(seq, fused, 2e-5, tag + " vs GPU default");
      expect_close(ref, fused, 2e-5, tag + " vs CPU");
      differing += !same_bits(seq.out, fused.out) || !same_bits(seq.comb, fused.comb);
    }
  }
  EXPECT_GT(differing, 0) << "every case has the default sequence's bits: the fused path never ran";
}

TEST_F(MhcPre, RowsAreIndependentAndDeterministic) {
  const int64_t t = 8, d = 4096;
  const Site s = make_site(t, 4, d, 300);
  const Outs all = gpu(s), again = gpu(s);
  EXPECT_TRUE(same_bits(all.post, again.post));
  EXPECT_TRUE(same_bits(all.comb, again.comb));
  EXPECT_TRUE(same_bits(all.out, again.out));
  for (int64_t r : {0, 5, 7}) {
    Site one = s;
    one.streams = s.streams.slice(0, r, r + 1).contiguous();
    const Outs alone = gpu(one);
    const std::string tag = "row " + std::to_string(r);
    EXPECT_TRUE(same_bits(row_of(all.post, r), row_of(alone.post, 0))) << tag;
    EXPECT_TRUE(same_bits(row_of(all.comb, r), row_of(alone.comb, 0))) << tag;
    EXPECT_TRUE(same_bits(row_of(all.out, r), row_of(alone.out, 0))) << tag;
  }
  // A row in a call of 33 rows (pass blocks of 8 rows: row 32 is alone in its group).
  const Site big = make_site(33, 4, d, 301);
  Site last = big;
  last.streams = big.streams.slice(0, 32, 33).contiguous();
  const Outs b = gpu(big), l = gpu(last);
  EXPECT_TRUE(same_bits(row_of(b.out, 32), row_of(l.out, 0)));
  EXPECT_TRUE(same_bits(row_of(b.comb, 32), row_of(l.comb, 0)));
}

TEST_F(MhcPre, GraphReplayGivesTheEagerBits) {
  const int64_t t = 4, m = 4, d = 4096;
  const Site s = make_site(t, m, d, 400);
  const Outs eager = gpu(s);
  const Tensor streams = up(s.streams), fn = up(s.fn), base = up(s.base), scale = up(s.scale),
               w = up(s.weight);
  Tensor post = gpu_->zeros({t, m}), comb = gpu_->zeros({t, m, m}), out = gpu_->zeros({t, d});
  auto graph =
      gpu_->capture([&]() { gpu_->mhc_pre(post, comb, out, streams, fn, base, scale, w, 1e-5f, 1e-6f, 20); });
  ASSERT_TRUE(graph) << graph.status().to_string();
  ASSERT_TRUE(gpu_->replay(**graph).is_ok());
  EXPECT_TRUE(same_bits(eager.post, down(post)));
  EXPECT_TRUE(same_bits(eager.comb, down(comb)));
  EXPECT_TRUE(same_bits(eager.out, down(out)));
}

TEST_F(MhcPre, CallsTheKernelsDoNotTakeGiveTheCpuResult) {
  struct Case {
    int64_t t, m, d;
    bool weighted;
  };
  for (const Case& c : {Case{65, 4, 512, true}, Case{3, 3, 256, true}, Case{2, 4, 130, true},
                        Case{5, 4, 1024, false}, Case{2, 2, 64, true}, Case{1, 4, 16384, true}}) {
    const Site s = make_site(c.t, c.m, c.d, 500 + static_cast<uint32_t>(c.t * c.m + c.d), c.weighted);
    const std::string tag = "T=" + std::to_string(c.t) + " M=" + std::to_string(c.m) +
                            " D=" + std::to_string(c.d) + (c.weighted ? "" : " no weight");
    expect_close(cpu(s), gpu(s), 2e-5, tag);
  }
}

// mhc_expand_pre: the streams it writes are mhc_expand's bits, and the rest is then
// exactly mhc_pre over them (the same pass over the same streams); vs the CPU within
// the tolerance. Also through the default path (65 rows) and after a graph capture.
TEST_F(MhcPre, ExpandPreIsExpandThenPre) {
  const int64_t m = 4;
  for (int64_t t : {1, 8, 13, 65}) {
    for (int64_t d : {4096, 260}) {
      const Site s = make_site(t, m, d, 700 + static_cast<uint32_t>(t + d));
      const Tensor y = up(randn({t, d}, 701, 2.0f)), residual = up(s.streams);
      const Tensor pp = up(randn({t, m}, 702, 0.3f, 1.0f)), pc = up(randn({t, m, m}, 703, 0.2f, 0.25f));
      const Tensor fn = up(s.fn), base = up(s.base), scale = up(s.scale), w = up(s.weight);
      const std::string tag = "T=" + std::to_string(t) + " D=" + std::to_string(d);
      // Separately: mhc_expand, then mhc_pre over its streams.
      Tensor streams_a = gpu_->empty({t, m, d});
      gpu_->mhc_expand(streams_a, y, pp, pc, residual);
      Tensor post_a = gpu_->empty({t, m}), comb_a = gpu_->empty({t, m, m}), out_a = gpu_->empty({t, d});
      gpu_->mhc_pre(post_a, comb_a, out_a, streams_a, fn, base, scale, w, 1e-5f, 1e-6f, 20);
      // Folded.
      Tensor streams_b = gpu_->empty({t, m, d});
      Tensor post_b = gpu_->empty({t, m}), comb_b = gpu_->empty({t, m, m}), out_b = gpu_->empty({t, d});
      gpu_->mhc_expand_pre(streams_b, post_b, comb_b, out_b, y, pp, pc, residual, fn, base, scale, w, 1e-5f,
                           1e-6f, 20);
      EXPECT_TRUE(same_bits(down(streams_a), down(streams_b))) << "streams " << tag;
      EXPECT_TRUE(same_bits(down(post_a), down(post_b))) << "post " << tag;
      EXPECT_TRUE(same_bits(down(comb_a), down(comb_b))) << "comb " << tag;
      EXPECT_TRUE(same_bits(down(out_a), down(out_b))) << "out " << tag;
      // The CPU: expand then the five ops.
      Site cs = s;
      cs.streams = Tensor::empty({t, m, d}, DType::kF32);
      cpu_->mhc_expand(cs.streams, down(y), down(pp), down(pc), s.streams);
      EXPECT_LE(parity_rel_err(cs.streams, down(streams_b)), 1e-6) << "streams vs CPU " << tag;
      expect_close(cpu(cs), {down(post_b), down(comb_b), down(out_b)}, 2e-5, tag + " vs CPU");
    }
  }
  // Captured and replayed: the eager bits.
  const int64_t t = 2, d = 4096;
  const Site s = make_site(t, m, d, 710);
  const Tensor y = up(randn({t, d}, 711)), residual = up(s.streams), pp = up(randn({t, m}, 712, 0.3f, 1.0f));
  const Tensor pc = up(randn({t, m, m}, 713, 0.2f, 0.25f)), fn = up(s.fn), base = up(s.base);
  const Tensor scale = up(s.scale), w = up(s.weight);
  Tensor st[2] = {gpu_->zeros({t, m, d}), gpu_->zeros({t, m, d})};
  Tensor po[2] = {gpu_->zeros({t, m}), gpu_->zeros({t, m})},
         co[2] = {gpu_->zeros({t, m, m}), gpu_->zeros({t, m, m})};
  Tensor ou[2] = {gpu_->zeros({t, d}), gpu_->zeros({t, d})};
  auto call = [&](int v) {
    gpu_->mhc_expand_pre(st[v], po[v], co[v], ou[v], y, pp, pc, residual, fn, base, scale, w, 1e-5f, 1e-6f,
                         20);
  };
  call(0);
  auto graph = gpu_->capture([&]() { call(1); });
  ASSERT_TRUE(graph) << graph.status().to_string();
  ASSERT_TRUE(gpu_->replay(**graph).is_ok());
  EXPECT_TRUE(same_bits(down(st[0]), down(st[1])));
  EXPECT_TRUE(same_bits(down(po[0]), down(po[1])));
  EXPECT_TRUE(same_bits(down(co[0]), down(co[1])));
  EXPECT_TRUE(same_bits(down(ou[0]), down(ou[1])));
}

// The finish kernel launched with or without programmatic dependent launch: the same
// bits (mhc_pre and mhc_expand_pre).
TEST_F(MhcPre, PdlDoesNotChangeTheBits) {
  const int64_t t = 3, m = 4, d = 4096;
  const Site s = make_site(t, m, d, 800);
  const Tensor streams = up(s.streams), fn = up(s.fn), base = up(s.base), scale = up(s.scale),
               w = up(s.weight);
  const Tensor y = up(randn({t, d}, 801)), pp = up(randn({t, m}, 802, 0.3f, 1.0f));
  const Tensor pc = up(randn({t, m, m}, 803, 0.2f, 0.25f));
  Tensor out[2][2], comb[2][2], ex[2];
  for (int pdl = 0; pdl < 2; ++pdl) {
    cuda::mhc_pre_pdl() = pdl == 1;
    Tensor post = gpu_->empty({t, m});
    out[pdl][0] = gpu_->empty({t, d});
    comb[pdl][0] = gpu_->empty({t, m, m});
    gpu_->mhc_pre(post, comb[pdl][0], out[pdl][0], streams, fn, base, scale, w, 1e-5f, 1e-6f, 20);
    ex[pdl] = gpu_->empty({t, m, d});
    out[pdl][1] = gpu_->empty({t, d});
    comb[pdl][1] = gpu_->empty({t, m, m});
    gpu_->mhc_expand_pre(ex[pdl], post, comb[pdl][1], out[pdl][1], y, pp, pc, streams, fn, base, scale, w,
                         1e-5f, 1e-6f, 20);
  }
  cuda::mhc_pre_pdl() = true;
  for (int v = 0; v < 2; ++v) {
    EXPECT_TRUE(same_bits(down(out[0][v]), down(out[1][v]))) << (v ? "mhc_expand_pre" : "mhc_pre");
    EXPECT_TRUE(same_bits(down(comb[0][v]), down(comb[1][v]))) << (v ? "mhc_expand_pre" : "mhc_pre");
  }
  EXPECT_TRUE(same_bits(down(ex[0]), down(ex[1])));
}

// The pass's rows per block (mhc_pre_pass_rows: 2, 4 or 8 for calls of 2 to 8 rows, or
// the fewest that hold them) does not change the bits, for mhc_pre and mhc_expand_pre,
// f32 and bf16 fn; nor does a row's place in a block of 8 against a block of its own.
TEST_F(MhcPre, PassBlockRowsDoNotChangeTheBits) {
  const int64_t m = 4, d = 4096;
  const int setting = cuda::mhc_pre_pass_rows();
  for (int64_t t : {2, 3, 4, 5, 8}) {
    const Site s = make_site(t, m, d, 850 + static_cast<uint32_t>(t));
    const Tensor y = up(randn({t, d}, 861)), pp = up(randn({t, m}, 862, 0.3f, 1.0f));
    const Tensor pc = up(randn({t, m, m}, 863, 0.2f, 0.25f));
    for (DType fdt : {DType::kF32, DType::kBF16}) {
      const Tensor streams = up(s.streams), fn = up(s.fn.to_dtype(fdt)), base = up(s.base),
                   scale = up(s.scale), w = up(s.weight);
      std::vector<Tensor> got;  // per setting: out, comb, post, expand's out, comb, streams
      for (int set : {0, 2, 4, 8}) {
        cuda::mhc_pre_pass_rows() = set;
        Tensor post = gpu_->empty({t, m}), comb = gpu_->empty({t, m, m}), out = gpu_->empty({t, d});
        gpu_->mhc_pre(post, comb, out, streams, fn, base, scale, w, 1e-5f, 1e-6f, 20);
        Tensor ex = gpu_->empty({t, m, d}), post2 = gpu_->empty({t, m}), comb2 = gpu_->empty({t, m, m}),
               out2 = gpu_->empty({t, d});
        gpu_->mhc_expand_pre(ex, post2, comb2, out2, y, pp, pc, streams, fn, base, scale, w, 1e-5f, 1e-6f,
                             20);
        for (const Tensor* r : {&out, &comb, &post, &out2, &comb2, &ex}) got.push_back(down(*r));
      }
      cuda::mhc_pre_pass_rows() = setting;
      const size_t per = got.size() / 4;
      for (size_t v = 1; v < 4; ++v)
        for (size_t i = 0; i < per; ++i)
          EXPECT_TRUE(same_bits(got[i], got[v * per + i]))
              << "T=" << t << " fn " << dtype_name(fdt) << " setting #" << v << " output " << i;
      // Row 1 alone (a block of one) against its place in the call.
      Site one = s;
      one.streams = s.streams.slice(0, 1, 2).contiguous();
      Tensor post = gpu_->empty({1, m}), comb = gpu_->empty({1, m, m}), out = gpu_->empty({1, d});
      gpu_->mhc_pre(post, comb, out, up(one.streams), fn, base, scale, w, 1e-5f, 1e-6f, 20);
      EXPECT_TRUE(same_bits(row_of(got[0], 1), down(out))) << "T=" << t;
      EXPECT_TRUE(same_bits(row_of(got[1], 1), down(comb))) << "T=" << t;
    }
  }
}

// fn in BF16 (as the checkpoint stores it; the loader keeps it so for a device backend)
// gives the bits of the same values in f32 at decode rows; past exact_rows (where an
// f32 fn takes the default sequence) a bf16 fn stays fused: rows independent of the
// others, within the tolerance of the CPU and of the f32 default sequence. Also
// mhc_expand_pre and a graph replay.
TEST_F(MhcPre, Bf16FnGivesTheBitsOfItsValuesInF32) {
  for (int64_t d : {4096, 260}) {
    for (int64_t t : {1, 8, 13, 65}) {
      Site s = make_site(t, 4, d, 900 + static_cast<uint32_t>(t + d));
      s.fn = s.fn.to_dtype(DType::kBF16).to_dtype(DType::kF32);  // values exact in bf16
      const std::string tag = "T=" + std::to_string(t) + " D=" + std::to_string(d);
      const Outs f32 = gpu(s), bf16 = gpu(s, false, DType::kBF16), ref = cpu(s);
      expect_close(ref, bf16, 2e-5, tag + " bf16 fn vs CPU");
      if (t <= 64) {
        EXPECT_TRUE(same_bits(f32.post, bf16.post)) << tag;
        EXPECT_TRUE(same_bits(f32.comb, bf16.comb)) << tag;
        EXPECT_TRUE(same_bits(f32.out, bf16.out)) << tag;
      } else {
        expect_close(f32, bf16, 2e-5, tag + " bf16 fn (fused) vs f32 fn (default sequence)");
        // The row's bits in another call of prefill rows (at another place in its block).
        const Site other = with_row_at(make_site(72, 4, d, 990), s, t - 1, 69);
        const Outs there = gpu(other, false, DType::kBF16);
        EXPECT_TRUE(same_bits(row_of(bf16.comb, t - 1), row_of(there.comb, 69))) << tag;
        EXPECT_TRUE(same_bits(row_of(bf16.out, t - 1), row_of(there.out, 69))) << tag;
      }
    }
  }
  const int64_t t = 3, m = 4, d = 4096;
  Site s = make_site(t, m, d, 950);
  s.fn = s.fn.to_dtype(DType::kBF16).to_dtype(DType::kF32);
  const Tensor y = up(randn({t, d}, 951)), residual = up(s.streams), pp = up(randn({t, m}, 952, 0.3f, 1.0f));
  const Tensor pc = up(randn({t, m, m}, 953, 0.2f, 0.25f)), base = up(s.base), scale = up(s.scale);
  const Tensor w = up(s.weight), fn32 = up(s.fn), fn16 = up(s.fn.to_dtype(DType::kBF16));
  Tensor st[3], po[3], co[3], ou[3];
  for (int v = 0; v < 3; ++v) {
    st[v] = gpu_->zeros({t, m, d});
    po[v] = gpu_->zeros({t, m});
    co[v] = gpu_->zeros({t, m, m});
    ou[v] = gpu_->zeros({t, d});
  }
  auto call = [&](int v) {
    gpu_->mhc_expand_pre(st[v], po[v], co[v], ou[v], y, pp, pc, residual, v == 0 ? fn32 : fn16, base, scale, w,
                         1e-5f, 1e-6f, 20);
  };
  call(0);
  call(1);
  auto graph = gpu_->capture([&]() { call(2); });
  ASSERT_TRUE(graph) << graph.status().to_string();
  ASSERT_TRUE(gpu_->replay(**graph).is_ok());
  for (int v = 1; v < 3; ++v) {
    const std::string tag = v == 1 ? "expand_pre bf16 fn" : "expand_pre bf16 fn, graph";
    EXPECT_TRUE(same_bits(down(st[0]), down(st[v]))) << tag;
    EXPECT_TRUE(same_bits(down(po[0]), down(po[v]))) << tag;
    EXPECT_TRUE(same_bits(down(co[0]), down(co[v]))) << tag;
    EXPECT_TRUE(same_bits(down(ou[0]), down(ou[v]))) << tag;
  }
}

// Prefill rows (past exact_rows, bf16 fn as the checkpoint has it) take the rows pass:
// within 2e-5 of the decode pass (TF_MHC_ROWS_PASS=0's path) and of the CPU, for
// mhc_pre and mhc_expand_pre (whose streams keep mhc_expand's bits); widths whose
// streams are not a multiple of 256 columns keep the decode pass (the same bits as with
// it off); repeated calls give the same bits; a row's bits do not depend on the rows
// around it; a captured graph replays the eager bits.
TEST_F(MhcPre, RowsPassAtPrefillRows) {
  const int64_t m = 4;
  int ran = 0;  // cases whose bits differ from the decode pass's: the rows pass ran
  for (int64_t d : {4096, 1024, 260}) {
    for (int64_t t : {65, 203}) {
      Site s = make_site(t, m, d, 1000 + static_cast<uint32_t>(t + d));
      s.fn = s.fn.to_dtype(DType::kBF16).to_dtype(DType::kF32);
      const std::string tag = "T=" + std::to_string(t) + " D=" + std::to_string(d);
      const Outs rows = gpu(s, false, DType::kBF16), again = gpu(s, false, DType::kBF16);
      cuda::mhc_pre_rows_pass() = false;
      const Outs decode = gpu(s, false, DType::kBF16);
      cuda::mhc_pre_rows_pass() = true;
      expect_close(decode, rows, 2e-5, tag + " rows pass vs decode pass");
      expect_close(cpu(s), rows, 2e-5, tag + " rows pass vs CPU");
      EXPECT_TRUE(same_bits(rows.out, again.out) && same_bits(rows.comb, again.comb)) << tag << " repeated";
      const bool differs = !same_bits(rows.out, decode.out) || !same_bits(rows.comb, decode.comb);
      if (d % 256 != 0) {
        EXPECT_FALSE(differs) << tag << ": this width keeps the decode pass";
      }
      ran += differs;
      const Site other = with_row_at(make_site(72, m, d, 1090), s, 17, 66);
      const Outs there = gpu(other, false, DType::kBF16);
      EXPECT_TRUE(same_bits(row_of(rows.post, 17), row_of(there.post, 66))) << tag;
      EXPECT_TRUE(same_bits(row_of(rows.comb, 17), row_of(there.comb, 66))) << tag;
      EXPECT_TRUE(same_bits(row_of(rows.out, 17), row_of(there.out, 66))) << tag;

      // mhc_expand_pre: mhc_expand's streams, then mhc_pre's bits over them.
      const Tensor y = up(randn({t, d}, 1001, 2.0f)), residual = up(s.streams);
      const Tensor pp = up(randn({t, m}, 1002, 0.3f, 1.0f)), pc = up(randn({t, m, m}, 1003, 0.2f, 0.25f));
      const Tensor fn = up(s.fn.to_dtype(DType::kBF16)), base = up(s.base), scale = up(s.scale);
      const Tensor w = up(s.weight);
      Tensor streams_a = gpu_->empty({t, m, d});
      gpu_->mhc_expand(streams_a, y, pp, pc, residual);
      Tensor post_a = gpu_->empty({t, m}), comb_a = gpu_->empty({t, m, m}), out_a = gpu_->empty({t, d});
      gpu_->mhc_pre(post_a, comb_a, out_a, streams_a, fn, base, scale, w, 1e-5f, 1e-6f, 20);
      Tensor st[2], po[2], co[2], ou[2];
      for (int v = 0; v < 2; ++v) {
        st[v] = gpu_->zeros({t, m, d});
        po[v] = gpu_->zeros({t, m});
        co[v] = gpu_->zeros({t, m, m});
        ou[v] = gpu_->zeros({t, d});
      }
      auto call = [&](int v) {
        gpu_->mhc_expand_pre(st[v], po[v], co[v], ou[v], y, pp, pc, residual, fn, base, scale, w, 1e-5f, 1e-6f,
                             20);
      };
      call(0);
      auto graph = gpu_->capture([&]() { call(1); });
      ASSERT_TRUE(graph) << graph.status().to_string();
      ASSERT_TRUE(gpu_->replay(**graph).is_ok());
      for (int v = 0; v < 2; ++v) {
        const std::string vt = tag + (v ? " expand_pre, graph" : " expand_pre");
        EXPECT_TRUE(same_bits(down(streams_a), down(st[v]))) << vt;
        EXPECT_TRUE(same_bits(down(post_a), down(po[v]))) << vt;
        EXPECT_TRUE(same_bits(down(comb_a), down(co[v]))) << vt;
        EXPECT_TRUE(same_bits(down(out_a), down(ou[v]))) << vt;
      }
    }
  }
  EXPECT_GT(ran, 0) << "every case has the decode pass's bits: the rows pass never ran";
}

// Today's kernels (mhc_coeff_row_fast, PDL on the pass) against session 7's
// (mhc_pre_v1(): the group Sinkhorn): the same bits, with and without PDL; under
// mhc_pre_v1 a bf16 fn takes the default sequence (the CPU's result within tolerance).
TEST_F(MhcPre, TodaysKernelsGiveSession7sBits) {
  for (int64_t t : {1, 8, 9}) {
    const Site s = make_site(t, 4, 4096, 960 + static_cast<uint32_t>(t));
    const std::string tag = "T=" + std::to_string(t);
    cuda::mhc_pre_v1() = true;
    const Outs old = gpu(s);
    Site s16 = s;
    s16.fn = s.fn.to_dtype(DType::kBF16).to_dtype(DType::kF32);
    const Outs old16 = gpu(s16, false, DType::kBF16);
    cuda::mhc_pre_v1() = false;
    expect_close(cpu(s16), old16, 2e-5, tag + " v1, bf16 fn (default sequence)");
    for (bool pdl : {true, false}) {
      cuda::mhc_pre_pdl() = pdl;
      const Outs now = gpu(s);
      cuda::mhc_pre_pdl() = true;
      EXPECT_TRUE(same_bits(old.post, now.post)) << tag << " pdl " << pdl;
      EXPECT_TRUE(same_bits(old.comb, now.comb)) << tag << " pdl " << pdl;
      EXPECT_TRUE(same_bits(old.out, now.out)) << tag << " pdl " << pdl;
    }
  }
}

// The Sinkhorn chain alone (cuda::mhc_sinkhorn_probe): mhc_coeff_row_fast gives the
// group code's bits on logits from mild to extreme (entries down to ~1e-30 before the
// eps; with eps 0 some leave the fast range: the redo), at 20 (unrolled) and 7 (loop)
// iterations, and so does its checked fallback; its division (mhc_div) equals a / b on
// 2^26 pairs (the chain's range, any normal pair, and arbitrary bits for the fallback).
TEST_F(MhcPre, SinkhornChainKeepsTheBitsAndTheDivisionIsExact) {
  const Tensor base = up(randn({24}, 970, 0.5f)), scale = up(Tensor::from_floats({3}, {0.9f, 1.1f, 1.7f}));
  for (float sd : {0.5f, 4.0f, 40.0f}) {
    const Tensor logits = up(randn({64, 24}, 971, sd));
    for (auto [eps, iters] : {std::pair{1e-6f, 20}, {1e-6f, 7}, {0.0f, 20}}) {
      const cuda::MhcSinkhornProbe p =
          cuda::mhc_sinkhorn_probe(cuda_ops_stream(*gpu_), logits, base, scale, eps, iters);
      const std::string tag = "sd " + std::to_string(sd) + " eps " + std::to_string(eps) + " iters " +
                              std::to_string(iters);
      EXPECT_TRUE(p.bits_equal) << tag;
      // The checked chain is the fast one's fallback (a value out of the fast range).
      EXPECT_TRUE(p.alt_bits_equal[1]) << tag << " (checked per division)";
      EXPECT_EQ(p.div_mismatches, 0) << tag << " of " << p.div_checked;
      EXPECT_GT(p.cycles_new, 0.0) << tag;
      std::printf(
          "[mhc-sinkhorn] %s: cycles per row old %.0f new %.0f (a / b %.0f, checked %.0f, unchecked %.0f), div "
          "mismatches %lld / %lld\n",
          tag.c_str(), p.cycles_old, p.cycles_new, p.cycles_alt[0], p.cycles_alt[1], p.cycles_alt[2],
          static_cast<long long>(p.div_mismatches), static_cast<long long>(p.div_checked));
    }
  }
}

TEST_F(MhcPre, AMisShapedFnIsAnErrorNamingIt) {
  const int64_t t = 2, m = 4, d = 256;
  const Site s = make_site(t, m, d, 600);
  Tensor post = gpu_->empty({t, m}), comb = gpu_->empty({t, m, m}), out = gpu_->empty({t, d});
  const Tensor bad_fn = up(randn({24, m * d - 4}, 601));
  try {
    gpu_->mhc_pre(post, comb, out, up(s.streams), bad_fn, up(s.base), up(s.scale), up(s.weight), 1e-5f, 1e-6f,
                  20);
    FAIL() << "a mis-shaped fn was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().to_string().find("fn"), std::string::npos) << e.status().to_string();
  }
}

}  // namespace
}  // namespace tf
