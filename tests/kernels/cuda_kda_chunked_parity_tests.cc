// The CUDA chunked KDA kernel (tensor cores, WY form: kernels/cuda/cuda_kda_chunked.cu)
// against the CPU backend's kda_chunked (f32, the reference), over awkward lengths
// (1, 63, 64, 65, 1000 tokens: empty, partial and several chunks), several heads, a
// non-zero initial state, head dims below 128 (zero-padded inside the kernel) and
// gates strong enough that a factored e^G_i * e^-G_j would overflow.
//
// Tolerance: 1e-4 of the largest reference magnitude for outputs and the final state.
// The kernel splits each tensor-core operand into two TF32 parts (3xTF32), which keeps
// about f32 accuracy; what remains is summation order and expf, compounded over the
// chunks (the state is carried through up to 16 chunks here). "[parity]" lines print
// the measured errors (H200, 2026-11-29: outputs <= 9.3e-7, states <= 4.8e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_kda_chunked.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_memory.h"
#include "cpu_cuda_test.h"
#include "test_tensors.h"

namespace tf {
namespace {

constexpr double kTol = 1e-4;

struct KdaCase {
  int64_t h, dk, dv;
  float g_mean, g_sd, g_min;  // gates: N(mean, sd) clamped to [g_min, 0]
};

class CudaKdaChunked : public CpuCudaTest {
 protected:
  // Runs both backends over the given lengths, one call per length in order, the
  // state carried from call to call; compares every output and the final state.
  void run(const KdaCase& c, std::initializer_list<int64_t> lengths, uint32_t seed, const std::string& name) {
    Tensor st = randn({c.h, c.dk, c.dv}, seed, 0.1f);
    Tensor gst = gpu_->to_device(st);
    int call = 0;
    for (int64_t t : lengths) {
      const uint32_t s = seed + 10 * static_cast<uint32_t>(++call);
      const Tensor q = randn({t, c.h, c.dk}, s + 1), k = randn({t, c.h, c.dk}, s + 2), v = randn({t, c.h, c.dv}, s + 3);
      Tensor g = randn({t, c.h, c.dk}, s + 4, c.g_sd, c.g_mean);
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::clamp(g.data<float>()[i], c.g_min, 0.0f);
      Tensor beta = randn({t, c.h}, s + 5);
      for (int64_t i = 0; i < beta.numel(); ++i) beta.data<float>()[i] = 1.0f / (1.0f + std::exp(-beta.data<float>()[i]));
      Tensor ref = Tensor::empty({t, c.h, c.dv}, DType::kF32);
      Tensor out = gpu_->empty({t, c.h, c.dv});
      cpu_->kda_chunked(ref, q, k, v, g, beta, st, 64);
      gpu_->kda_chunked(out, gpu_->to_device(q), gpu_->to_device(k), gpu_->to_device(v), gpu_->to_device(g),
                        gpu_->to_device(beta), gst, 64);
      const std::string tag = name + " H=" + std::to_string(c.h) + " Dk=" + std::to_string(c.dk) +
                              " Dv=" + std::to_string(c.dv) + " T=" + std::to_string(t);
      const double e = parity_rel_err(ref, gpu_->to_host(out));
      const double es = parity_rel_err(st, gpu_->to_host(gst));
      std::printf("[parity] kda_chunked %-40s out %.3g state %.3g (tol %.0e)\n", tag.c_str(), e, es, kTol);
      EXPECT_LE(e, kTol) << tag;
      EXPECT_LE(es, kTol) << tag << " state";
    }
  }

};

TEST_F(CudaKdaChunked, ModelHeadDimsAwkwardLengths) {
  ASSERT_TRUE(cuda::kda_chunked_supported(128, 128, 64));
  const KdaCase c{3, 128, 128, -0.2f, 0.3f, -5.0f};
  for (int64_t t : {1, 63, 64, 65, 1000}) run(c, {t}, 100 + static_cast<uint32_t>(t), "one call");
}

TEST_F(CudaKdaChunked, StateCarriesAcrossCalls) {
  // Prefill chunks of a long prompt: the state after one call starts the next.
  run({2, 128, 128, -0.2f, 0.3f, -5.0f}, {100, 64, 1, 250}, 300, "carried");
}

TEST_F(CudaKdaChunked, SmallAndOddHeadDimsArePadded) {
  // The test checkpoints' Dk = Dv = 16; odd widths below 128 (zero padding inside).
  for (auto [dk, dv] : {std::pair<int64_t, int64_t>{16, 16}, {100, 72}, {128, 40}, {8, 128}})
    run({4, dk, dv, -0.2f, 0.3f, -5.0f}, {65, 130}, 400 + static_cast<uint32_t>(dk + dv), "padded");
}

TEST_F(CudaKdaChunked, StrongDecayDoesNotOverflow) {
  // Gates near -20 per token: over a chunk G falls by ~1000, far past f32's e^88.
  run({2, 128, 128, -12.0f, 6.0f, -20.0f}, {200}, 500, "strong decay");
  // No decay at all (g = 0): the state only accumulates.
  run({2, 128, 128, 0.0f, 1e-3f, 0.0f}, {129}, 510, "no decay");
}

TEST_F(CudaKdaChunked, ManyHeadsSpanSeveralLaunchGroups) {
  // 64 heads (the model's): scratch is capped, so 1000 tokens take several groups of chunks.
  ASSERT_LT(cuda::kda_chunks_per_group(64), (1000 + 63) / 64);
  run({64, 128, 128, -0.2f, 0.3f, -5.0f}, {1000}, 600, "64 heads");
}

TEST_F(CudaKdaChunked, UnsupportedHeadDimsFallBackToTheRecurrence) {
  // Dk = 192 > 128: the token-by-token kernel, still the same function.
  EXPECT_FALSE(cuda::kda_chunked_supported(192, 64, 64));
  run({2, 192, 64, -0.2f, 0.3f, -5.0f}, {70}, 700, "fallback");
}

TEST_F(CudaKdaChunked, EveryKernelCombinationMatches) {
  // The intra-chunk part on tensor cores (factored exponents below the diagonal blocks),
  // in its q-less 80 KB form, or as the scalar kernel (exact pairwise exponents
  // everywhere); the state pass split (outputs from a parallel kernel) or in one kernel.
  // (With less shared memory than a form needs, the next form that fits runs.)
  const bool saved_intra = cuda::kda_intra_mma().load(), saved_split = cuda::kda_state_split().load();
  for (int combo = 0; combo < 6; ++combo) {
    const bool mma = combo % 3 != 0, small = combo % 3 == 2, split = combo >= 3;
    cuda::kda_intra_mma() = mma;
    cuda::kda_intra_small() = small;
    cuda::kda_state_split() = split;
    const std::string name = std::string(small ? "mma 80 KB" : mma ? "mma" : "scalar") + " intra, " +
                             (split ? "split" : "one") + " state";
    run({3, 128, 128, -0.2f, 0.3f, -5.0f}, {200, 65}, 800, name);
    run({2, 128, 128, -12.0f, 6.0f, -20.0f}, {130}, 810, name + " strong decay");
    run({2, 100, 72, -0.2f, 0.3f, -5.0f}, {70}, 820, name + " padded");
    run({2, 16, 16, -0.2f, 0.3f, -5.0f}, {129}, 830, name + " small");
  }
  cuda::kda_intra_mma() = saved_intra;
  cuda::kda_intra_small() = false;
  cuda::kda_state_split() = saved_split;
}

// The intra part's two tensor-core forms (q as a shared-memory tile, or read from global
// memory where 112 KB per block do not fit) give the same bits: whole calls compared,
// state included, over partial chunks, padding and strong decay.
TEST_F(CudaKdaChunked, SmallIntraFormGivesTheSameBits) {
  const bool saved_intra = cuda::kda_intra_mma().load();
  cuda::kda_intra_mma() = true;
  for (const KdaCase& c : {KdaCase{3, 128, 128, -0.2f, 0.3f, -5.0f}, KdaCase{2, 100, 72, -0.2f, 0.3f, -5.0f},
                           KdaCase{2, 128, 128, -12.0f, 6.0f, -20.0f}}) {
    const int64_t t = 150;
    const Tensor q = randn({t, c.h, c.dk}, 901), k = randn({t, c.h, c.dk}, 902), v = randn({t, c.h, c.dv}, 903);
    Tensor g = randn({t, c.h, c.dk}, 904, c.g_sd, c.g_mean);
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::clamp(g.data<float>()[i], c.g_min, 0.0f);
    Tensor beta = randn({t, c.h}, 905);
    for (int64_t i = 0; i < beta.numel(); ++i) beta.data<float>()[i] = 1.0f / (1.0f + std::exp(-beta.data<float>()[i]));
    const Tensor st = randn({c.h, c.dk, c.dv}, 906, 0.1f);
    std::vector<Tensor> outs, states;
    for (bool small : {false, true}) {
      cuda::kda_intra_small() = small;
      Tensor gst = gpu_->to_device(st), out = gpu_->empty({t, c.h, c.dv});
      gpu_->kda_chunked(out, gpu_->to_device(q), gpu_->to_device(k), gpu_->to_device(v), gpu_->to_device(g),
                        gpu_->to_device(beta), gst, 64);
      outs.push_back(gpu_->to_host(out));
      states.push_back(gpu_->to_host(gst));
    }
    const std::string tag = "Dk=" + std::to_string(c.dk) + " Dv=" + std::to_string(c.dv) + " g_min=" +
                            std::to_string(c.g_min);
    EXPECT_EQ(0, std::memcmp(outs[0].raw(), outs[1].raw(), static_cast<size_t>(outs[0].numel()) * sizeof(float)))
        << tag << ": max rel diff " << parity_rel_err(outs[0], outs[1]);
    EXPECT_EQ(0, std::memcmp(states[0].raw(), states[1].raw(), static_cast<size_t>(states[0].numel()) * sizeof(float)))
        << tag << " state";
  }
  cuda::kda_intra_small() = false;
  cuda::kda_intra_mma() = saved_intra;
}

// Which kernels run on this GPU: on an H100 / H200 (227 KB per block) the 112 KB tensor-core
// intra form and the split state pass; with a DGX Spark's 99 KB (or TF_SMEM_PER_BLOCK) the
// 80 KB intra form and the one-kernel state pass, still chunked.
TEST_F(CudaKdaChunked, FormsForThisGpu) {
  const size_t limit = cuda::device_limits().smem_per_block;
  const cuda::KdaForms f = cuda::kda_forms();
  std::printf("[kda-forms] %zu bytes per block: chunked %d, intra %d, split state %d\n", limit, f.chunked,
              static_cast<int>(f.intra), f.split_state);
  if (limit >= 227 * 1024) {
    EXPECT_TRUE(f.chunked);
    EXPECT_EQ(f.intra, cuda::KdaForms::kMma);
    EXPECT_TRUE(f.split_state);
  } else if (limit >= 99 * 1024) {
    EXPECT_TRUE(f.chunked);
    EXPECT_EQ(f.intra, cuda::KdaForms::kMmaSmall);
    EXPECT_FALSE(f.split_state);
  }
}

TEST_F(CudaKdaChunked, BadArgumentsAreErrorsNamingTheOp) {
  Tensor st = gpu_->zeros({2, 128, 128});
  Tensor q = gpu_->zeros({10, 2, 128}), v = gpu_->zeros({9, 2, 128}), beta = gpu_->zeros({10, 2});
  Tensor out = gpu_->empty({10, 2, 128});
  try {
    gpu_->kda_chunked(out, q, q, v, q, beta, st, 64);
    FAIL() << "a short v was accepted";
  } catch (const StatusError& e) {
    EXPECT_NE(e.status().to_string().find("kda_chunked"), std::string::npos) << e.status().to_string();
  }
  EXPECT_THROW(gpu_->kda_chunked(out, q, q, q, q, beta, st, 0), StatusError);
}

}  // namespace
}  // namespace tf
