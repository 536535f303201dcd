// Side branches on CUDA (Ops::SideBranch; kernels/cuda/side_stream.h): a branch's ops
// give the results of the same ops in order, eagerly and replayed from a graph; a
// block freed on one branch is not handed to the other before the join (the
// allocator holds it, then reuses it); nesting is refused and a capture that fails
// inside a branch leaves the backend usable; TF_BRANCHES=0 and the op profiler run
// branches inline; an accumulating matmul equals the separate product plus add, bit
// for bit (what the MoE layer's shared-expert branch relies on). "[branch]" lines
// time two chains of small kernels in one graph, one after the other vs on two branches.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "test_tensors.h"

namespace tf {
namespace {

// The CUDA ops made with environment variable `var` set to `value` (read at creation).
std::unique_ptr<Ops> ops_with_env(const char* var, const char* value) {
  const char* old = std::getenv(var);
  const std::string saved = old ? old : "";
  setenv(var, value, 1);
  auto o = make_cuda_ops(0);
  if (old) setenv(var, saved.c_str(), 1); else unsetenv(var);
  EXPECT_TRUE(o.has_value()) << o.status().to_string();
  return o.has_value() ? std::move(*o) : nullptr;
}

Ops& gpu() {
  static std::unique_ptr<Ops> ops = ops_with_env("TF_BRANCHES", "1");
  if (!ops) throw StatusError(unavailable("no CUDA ops"));
  return *ops;
}

// d = (2x + x) + (-x): 2x and 2x + x on the side branch, -x on the main one.
Tensor branched_sum(Ops& ops, const Tensor& x) {
  Tensor d = ops.empty(x.shape());
  Tensor b = ops.empty(x.shape()), c = ops.empty(x.shape());
  {
    Ops::SideBranch side(ops);
    Tensor a = ops.empty(x.shape());
    ops.scale(a, x, 2.0f);
    ops.add(b, a, x);
    side.end();
    ops.scale(c, x, -1.0f);
    side.join();
  }
  ops.add(d, b, c);
  return d;
}

Tensor expected_sum(const Tensor& x_host) {
  Tensor d = Tensor::empty(x_host.shape(), DType::kF32);
  const float* x = x_host.data<float>();
  float* o = d.data<float>();
  for (int64_t i = 0; i < x_host.numel(); ++i) {
    const float b = 2.0f * x[i] + x[i];
    o[i] = b + -x[i];
  }
  return d;
}

TEST(CudaBranches, OnUpToExactRowsOffWithTfBranches0) {
  EXPECT_TRUE(gpu().concurrent_branches(1));
  EXPECT_TRUE(gpu().concurrent_branches(64));   // exact rows (64 by default)
  EXPECT_FALSE(gpu().concurrent_branches(65));  // cuBLAS sizes: one op fills the GPU
  auto off = ops_with_env("TF_BRANCHES", "0");
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(off->concurrent_branches(1));
  const Tensor x = randn({3, 1000}, 1);
  EXPECT_TRUE(same_bits(off->to_host(branched_sum(*off, off->to_device(x))), expected_sum(x)));
}

TEST(CudaBranches, EagerBranchGivesTheResultsInOrder) {
  const Tensor x = randn({4, 4096}, 2);
  for (int rep = 0; rep < 3; ++rep)
    EXPECT_TRUE(same_bits(gpu().to_host(branched_sum(gpu(), gpu().to_device(x))), expected_sum(x))) << rep;
}

TEST(CudaBranches, NestingAndMisuseAreRefused) {
  Ops& ops = gpu();
  EXPECT_THROW(ops.branch_join(), StatusError);
  EXPECT_THROW(ops.branch_end(), StatusError);
  {
    Ops::SideBranch outer(ops);
    EXPECT_THROW(Ops::SideBranch inner(ops), StatusError);
    EXPECT_THROW(ops.branch_join(), StatusError);  // not ended yet
    outer.join();
  }
  const Tensor x = randn({2, 256}, 3);
  EXPECT_TRUE(same_bits(ops.to_host(branched_sum(ops, ops.to_device(x))), expected_sum(x)));
}

// A block freed on the side branch must not be handed to the main branch before the
// join (the main branch's kernels are not ordered after the side's): checked by
// address (deterministic: a size no other tensor here has) and by data (the side
// branch copies the freed tensor out after a slow matmul, while the main branch
// writes into what it got).
TEST(CudaBranches, BlocksFreedInABranchAreHeldUntilTheJoin) {
  Ops& ops = gpu();
  const int64_t n = 777 * 256 + 13;  // f32 elements: a block size of its own
  const Tensor x_host = randn({1, n}, 4);
  const Tensor x = ops.to_device(x_host);
  const Tensor w = ops.to_device(randn({4096, 4096}, 5, 0.01f));
  const Tensor xs = ops.to_device(randn({64, 4096}, 6));
  Tensor slow = ops.empty({64, 4096});
  Tensor out = ops.empty({1, n});
  for (int rep = 0; rep < 4; ++rep) {
    const void* freed = nullptr;
    Tensor u;
    {
      Ops::SideBranch side(ops);
      {
        Tensor t = ops.empty({1, n});
        freed = t.raw();
        ops.scale(t, x, 1.0f);
        for (int i = 0; i < 8; ++i) ops.matmul(slow, xs, w);
        ops.copy(out, t);
      }  // t freed on the side branch
      side.end();
      u = ops.empty({1, n});
      EXPECT_NE(u.raw(), freed) << "a block freed on the side branch went to the main branch before the join";
      ops.scale(u, x, -3.0f);
      side.join();
    }
    const Tensor v = ops.empty({1, n});
    EXPECT_EQ(v.raw(), freed) << "the held block was not cached again at the join";
    EXPECT_TRUE(same_bits(ops.to_host(out), x_host)) << "rep " << rep;
  }
}

// Captured: the fork and join become graph edges; the replay equals the eager result,
// and the side and main branches' allocations (capture arena) never share memory.
TEST(CudaBranches, CapturedBranchReplaysTheEagerResult) {
  Ops& ops = gpu();
  const Tensor x_host = randn({8, 2048}, 7);
  const Tensor x = ops.to_device(x_host);
  Tensor d = ops.empty(x.shape());
  const void* side_block = nullptr;
  const void* main_block = nullptr;
  auto g = ops.capture([&] {
    Tensor b = ops.empty(x.shape()), c = ops.empty(x.shape());
    {
      Ops::SideBranch side(ops);
      Tensor a = ops.empty(x.shape());
      side_block = a.raw();
      ops.scale(a, x, 2.0f);
      ops.add(b, a, x);
      side.end();
      Tensor m = ops.empty(x.shape());
      main_block = m.raw();
      ops.scale(m, x, -1.0f);
      ops.copy(c, m);
      side.join();
    }
    ops.add(d, b, c);
  });
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  EXPECT_NE(side_block, main_block);
  for (int rep = 0; rep < 3; ++rep) {
    ops.copy(d, ops.to_device(Tensor::from_floats(x.shape(), std::vector<float>(static_cast<size_t>(x.numel()), 0.0f))));
    ASSERT_TRUE(ops.replay(**g).is_ok());
    EXPECT_TRUE(same_bits(ops.to_host(d), expected_sum(x_host))) << rep;
  }
}

// A capture whose function fails inside a branch (a host copy is refused while
// capturing) fails as a whole; the branch is joined, the backend is back on its
// main stream and the next branch and capture work.
TEST(CudaBranches, CaptureFailingInsideABranchLeavesTheOpsUsable) {
  Ops& ops = gpu();
  const Tensor x_host = randn({2, 512}, 8);
  const Tensor x = ops.to_device(x_host);
  auto bad = ops.capture([&] {
    Ops::SideBranch side(ops);
    Tensor a = ops.empty(x.shape());
    ops.scale(a, x, 2.0f);
    (void)ops.to_host(a);  // refused inside a capture
  });
  EXPECT_FALSE(bad.has_value());
  EXPECT_TRUE(same_bits(ops.to_host(branched_sum(ops, x)), expected_sum(x_host)));
  Tensor d = ops.empty(x.shape());
  auto good = ops.capture([&] {
    Tensor s = branched_sum(ops, x);
    ops.copy(d, s);
  });
  ASSERT_TRUE(good.has_value()) << good.status().to_string();
  ASSERT_TRUE(ops.replay(**good).is_ok());
  EXPECT_TRUE(same_bits(ops.to_host(d), expected_sum(x_host)));
}

// TF_PROFILE_OPS=1 times eager ops with events on the main stream: branches run
// inline there (and still fork inside captures).
TEST(CudaBranches, ProfiledOpsRunBranchesInline) {
  auto prof = ops_with_env("TF_PROFILE_OPS", "1");
  ASSERT_NE(prof, nullptr);
  const Tensor x_host = randn({4, 1024}, 9);
  const Tensor x = prof->to_device(x_host);
  prof->begin_step();
  const Tensor d = branched_sum(*prof, x);
  prof->end_step();
  EXPECT_TRUE(same_bits(prof->to_host(d), expected_sum(x_host)));
  Tensor e = prof->empty(x.shape());
  auto g = prof->capture([&] { prof->copy(e, branched_sum(*prof, x)); });
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  prof->begin_step();
  ASSERT_TRUE(prof->replay(**g).is_ok());
  prof->end_step();
  EXPECT_TRUE(same_bits(prof->to_host(e), expected_sum(x_host)));
}

// Random q4 weights (codes and f16 scales 2^-7), on the device.
Matrix q4_on(Ops& ops, int64_t n, int64_t k, uint32_t seed) {
  const int64_t g = (k + 63) / 64;
  Tensor codes = Tensor::empty({n, g * 32}, DType::kU8);
  std::mt19937 rng(seed);
  auto* bytes = static_cast<uint8_t*>(codes.raw());
  for (size_t i = 0; i < codes.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng() >> 24);
  Tensor scales = Tensor::empty({n, g}, DType::kF16);
  for (int64_t i = 0; i < n * g; ++i) scales.data<uint16_t>()[i] = 0x2000;
  return Matrix::q4(ops.to_device(codes), ops.to_device(scales), k);
}

// out += a · W^T rounds once per element: the bits of add(out, out, a · W^T). The MoE
// layer computes its shared expert apart on a side branch and adds it to the routed
// sum after the join, instead of accumulating the down projection into that sum.
TEST(CudaBranches, AccumulatingMatmulEqualsProductPlusAdd) {
  Ops& ops = gpu();
  const int64_t k = 2048, n = 4096;
  const Tensor dense_f32 = ops.to_device(randn({n, k}, 10, 0.02f));
  const Matrix q4 = q4_on(ops, n, k, 11);
  const std::vector<std::pair<const char*, Matrix>> ws{{"f32", Matrix(dense_f32)}, {"q4", q4}};
  for (const auto& [name, w] : ws) {
    for (int64_t rows : {1, 2, 8, 64, 100}) {
      const Tensor a = ops.to_device(randn({rows, k}, 12 + static_cast<uint32_t>(rows)));
      const Tensor routed_host = randn({rows, n}, 30 + static_cast<uint32_t>(rows));
      Tensor acc = ops.to_device(routed_host);
      ops.matmul(acc, a, w, /*accumulate=*/true);
      Tensor sum = ops.to_device(routed_host), s = ops.empty({rows, n});
      ops.matmul(s, a, w);
      ops.add(sum, sum, s);
      const bool same = same_bits(ops.to_host(acc), ops.to_host(sum));
      // Above 64 rows (cuBLAS, beta = 1) the bits are cuBLAS's choice: printed, not required.
      if (rows <= 64) {
        EXPECT_TRUE(same) << name << " at " << rows << " rows";
      }
      std::printf("[branch] accumulate vs product + add, %s [%lld x %lld] at %lld rows: %s\n", name,
                  static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(rows),
                  same ? "same bits" : "differ");
    }
  }
}

// Two chains of small kernels (rms_norm at one row, ~latency-bound) captured one
// after the other and on two branches; prints the replay times.
TEST(CudaBranches, TwoChainsOverlapInAGraph) {
  Ops& ops = gpu();
  const int chain = 40;
  const Tensor x = ops.to_device(randn({1, 4096}, 13));
  const Tensor wgt = ops.to_device(randn({4096}, 14, 0.1f, 1.0f));
  Tensor p = ops.empty({1, 4096}), q = ops.empty({1, 4096});
  Tensor p2 = ops.empty({1, 4096}), q2 = ops.empty({1, 4096});
  auto run_chain = [&](Tensor& out, Tensor& tmp) {  // ends in out (chain is even)
    ops.copy(out, x);
    for (int i = 0; i < chain; i += 2) {
      ops.rms_norm(tmp, out, wgt, 1e-6f);
      ops.rms_norm(out, tmp, wgt, 1e-6f);
    }
  };
  auto serial = ops.capture([&] {
    run_chain(p, p2);
    run_chain(q, q2);
  });
  auto branched = ops.capture([&] {
    Ops::SideBranch side(ops);
    run_chain(p, p2);
    side.end();
    run_chain(q, q2);
  });
  ASSERT_TRUE(serial.has_value()) << serial.status().to_string();
  ASSERT_TRUE(branched.has_value()) << branched.status().to_string();
  auto time_us = [&](Ops::Graph& g) {
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(ops.replay(g).is_ok());
    (void)ops.to_host(p);
    const int reps = 50;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) EXPECT_TRUE(ops.replay(g).is_ok());
    (void)ops.to_host(p);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  const double t_serial = time_us(**serial), t_branched = time_us(**branched);
  const Tensor p_host = ops.to_host(p), q_host = ops.to_host(q);
  EXPECT_TRUE(same_bits(p_host, q_host));
  std::printf("[branch] 2 chains of %d rms_norm [1, 4096] in one graph: %.1f us one after the other, %.1f us on "
              "two branches (%.2fx)\n",
              chain, t_serial, t_branched, t_branched > 0 ? t_serial / t_branched : 0.0);
}

}  // namespace
}  // namespace tf
