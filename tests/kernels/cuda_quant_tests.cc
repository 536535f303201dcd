// Quantized dense matrices on the GPU (kernels/cuda/quant_gemv.cu) against the CPU
// reference (kernels/cpu/cpu_quant_linear.cc), and their speed. Part `quant` of
// scripts/device/gpu_tests.sh; label gpu (CI compiles it only).
//
// Parity: fp8 and q4 matrices over awkward shapes (K not a multiple of 64/128 or
// of 4, N not of 8, 1 output row, K = 1) and model-sized K (K split over a cluster of
// blocks, or over the warps of one block when N is large), every GEMV row count 1..8 (EXACT_ROWS 8), the prefill path
// (bf16 dequantize + cuBLAS) at 9 and 70 rows, accumulate, and over a matrix larger than its
// scratch budget (dequantized in chunks of rows); the GEMV's multi-pass case
// (9..64 rows with EXACT_ROWS 64) against the CPU too. GEMV tolerance vs the CPU: 2e-5
// of the largest reference magnitude (x split into two bf16 terms carries 16 significant
// bits, <= 2^-17 relative per element, and the errors of a K-long sum partly cancel:
// a few 1e-6 of the largest output; sums in a different order); prefill 2e-2 (x rounded to bf16, as for BF16 weights).
// FP8 prefill on FP8 tensor cores (x quantized per 1x128 block to e4m3): ours
// (fp8_block_gemm.h) must be within 5e-2 of the CPU; cuBLASLt's (fp8_gemm.h, opt-in, known
// wrong) is printed per scale layout for the investigation.
// Row independence: a row alone and inside 2..8-row calls gives the same bits (with and
// without a cluster splitting K). The slice kernel (QuantGemvArgs::legacy, the default):
// its fused, cluster and second-kernel slice sums, every chunks-in-flight setting and
// both warp layouts of the shared-memory weight ring (QuantGemvArgs::slice_warps) give
// the same bits and match the CPU; quant_gemv_many (several matrices in one launch) gives
// each matrix the bits of a call on it alone.
// Bench ("[quant-bench]" lines): GEMV us/call and % of the measured HBM copy bandwidth
// on the model's shapes at m = 1, 2, 4, 8 (and 64), the slice kernel ("legacy", the
// default) and the streaming one (eager and replayed from a CUDA graph) side by side; the
// slice kernel's knobs swept (graph); quant_gemv_many vs separate calls; matrices
// rotated through > 4x the L2 so every call streams from HBM; probes of the streaming
// kernel (loads only, compute only); prefill TFLOP/s at m = 1024 / 8192.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/matrix.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_probe.h"
#include "kernels/cuda/fp8_block_gemm.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/quant_gemv.h"
#include "model/dense_quant.h"
#include "cuda_q4_gemv_test_util.h"
#include "test_tensors.h"

namespace tf {
namespace {

// Timing helpers shared with the q4 GEMV tests (graph-replayed, warm-up calls first).
using q4test::graph_seconds;
using q4test::seconds_per_call;

class CudaQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    ASSERT_GT(count, 0) << "these tests need a CUDA GPU";
    auto g = make_cuda_ops(0, 8);
    ASSERT_TRUE(g) << g.status().to_string();
    gpu_ = std::move(*g);
    cpu_ = make_cpu_ops();
  }
  Matrix quantize(const Tensor& w, MatrixFormat f) {
    Expected<Matrix> m = quantize_matrix(w, f, "w");
    EXPECT_TRUE(m.has_value()) << m.status().to_string();
    return *m;
  }
  Matrix up(const Matrix& m) { return m.with_storage(gpu_->to_device(m.codes()), gpu_->to_device(m.scales())); }
  std::unique_ptr<Ops> cpu_, gpu_;
};

TEST_F(CudaQuant, MatchesTheCpuOverAwkwardShapes) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},     {7, 63},    {33, 65},    {129, 130},
                                                           {64, 256},  {45, 300},  {13, 1030},  {200, 2050},
                                                           {300, 4096}, {136, 12288}, {5000, 1100}, {12300, 300}};
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    double worst_gemv = 0, worst_prefill = 0;
    for (auto [n, k] : shapes) {
      const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n + 31 * k), 0.05f), f);
      const Matrix dq = up(q);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 70}) {
        const bool acc = m % 3 == 0;
        const Tensor x = randn({m, k}, static_cast<uint32_t>(m * 7 + k));
        const Tensor init = randn({m, n}, static_cast<uint32_t>(m + 5));
        Tensor ref = init.contiguous();
        cpu_->matmul(ref, x, q, acc);
        Tensor out = gpu_->to_device(init);
        gpu_->matmul(out, gpu_->to_device(x), dq, acc);
        const double e = rel_err_to_max_ref(ref, gpu_->to_host(out));
        const double tol = m > 8 ? 2e-2 : 2e-5;  // EXACT_ROWS 8: 9 and 70 rows take the prefill path
        double& worst = m > 8 ? worst_prefill : worst_gemv;
        worst = std::max(worst, e);
        EXPECT_LE(e, tol) << matrix_format_name(f) << " M=" << m << " N=" << n << " K=" << k << (acc ? " acc" : "");
      }
    }
    std::printf("[quant] parity %-3s gemv (M 1..8) max rel err %.3g (tol 2e-05), prefill (M 9, 70) %.3g (tol 2e-02)\n",
                matrix_format_name(f), worst_gemv, worst_prefill);
  }
}

// The prefill path dequantizes a matrix larger than its scratch budget in chunks of
// rows (an lm_head would otherwise take 1.27 GB of BF16 scratch): every chunk's output
// columns, the partial last one included, match the CPU.
TEST_F(CudaQuant, PrefillPathDequantizesLargeMatricesInChunks) {
  const int64_t n = 20000, k = 2048, m = 12;
  const int64_t chunk = cuda::quant_dequant_chunk_rows(n, k, cuda::kQuantDequantBudget);
  ASSERT_LT(chunk, n) << "the matrix must span more than one chunk";
  EXPECT_EQ(chunk % kFp8BlockSize, 0);
  EXPECT_EQ(cuda::quant_dequant_chunk_rows(100, k, cuda::kQuantDequantBudget), 100);
  EXPECT_EQ(cuda::quant_dequant_chunk_rows(n, int64_t{1} << 30, 1), kFp8BlockSize);  // at least one block
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    const Matrix q = quantize(randn({n, k}, 77, 0.05f), f);
    const Matrix dq = up(q);
    for (bool acc : {false, true}) {
      const Tensor x = randn({m, k}, 78);
      const Tensor init = randn({m, n}, 79);
      Tensor ref = init.contiguous();
      cpu_->matmul(ref, x, q, acc);
      Tensor out = gpu_->to_device(init);
      gpu_->matmul(out, gpu_->to_device(x), dq, acc);
      const Tensor got = gpu_->to_host(out);
      EXPECT_LE(rel_err_to_max_ref(ref, got), 2e-2) << matrix_format_name(f) << (acc ? " acc" : "");
      // The last chunk's columns on their own (an offset error would leave them wrong or unwritten).
      const Tensor ref_tail = ref.slice(1, chunk, n).contiguous(), got_tail = got.slice(1, chunk, n).contiguous();
      EXPECT_LE(rel_err_to_max_ref(ref_tail, got_tail), 2e-2) << matrix_format_name(f) << " last chunk";
    }
  }
}

TEST_F(CudaQuant, RowBitsDoNotDependOnTheBatch) {
  // K = 390: one block per 32 rows; K = 2050: a cluster of blocks splits K.
  for (auto [f, k] : std::vector<std::pair<MatrixFormat, int64_t>>{
           {MatrixFormat::kQ4, 390}, {MatrixFormat::kFp8Block, 390}, {MatrixFormat::kQ4, 2050}, {MatrixFormat::kFp8Block, 2050}}) {
    const int64_t n = 97;
    const Matrix dq = up(quantize(randn({n, k}, 9, 0.05f), f));
    const Tensor row = randn({1, k}, 10);
    Tensor alone = gpu_->empty({1, n});
    gpu_->matmul(alone, gpu_->to_device(row), dq);
    const Tensor want = gpu_->to_host(alone);
    for (int64_t m = 2; m <= 8; ++m) {
      Tensor x = randn({m, k}, static_cast<uint32_t>(20 + m));
      const int64_t at = m / 2;
      std::copy_n(row.data<float>(), k, x.data<float>() + at * k);
      Tensor out = gpu_->empty({m, n});
      gpu_->matmul(out, gpu_->to_device(x), dq);
      const Tensor got = gpu_->to_host(out).slice(0, at, at + 1).contiguous();
      EXPECT_TRUE(same_bits(got, want)) << matrix_format_name(f) << " K=" << k << " row at " << at << " of " << m;
    }
  }
}

TEST_F(CudaQuant, ManyRowsPassesMatchTheCpu) {
  auto g64 = make_cuda_ops(0, 64);
  ASSERT_TRUE(g64) << g64.status().to_string();
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    const int64_t n = 260, k = 1500;
    const Matrix q = quantize(randn({n, k}, 77, 0.05f), f);
    const Matrix dq = q.with_storage((*g64)->to_device(q.codes()), (*g64)->to_device(q.scales()));
    for (int64_t m : {9, 17, 64}) {
      const Tensor x = randn({m, k}, static_cast<uint32_t>(m + 3));
      Tensor ref = Tensor::empty({m, n}, DType::kF32);
      cpu_->matmul(ref, x, q);
      Tensor out = (*g64)->empty({m, n});
      (*g64)->matmul(out, (*g64)->to_device(x), dq);
      EXPECT_LE(rel_err_to_max_ref(ref, (*g64)->to_host(out)), 2e-5) << matrix_format_name(f) << " M=" << m;
    }
  }
}

// K slices summed by the last block of each row block or by a second kernel: the same
// bits, the CPU's result, and the counters left ready for the next call (run twice).
TEST_F(CudaQuant, FusedSliceSumEqualsTheSecondKernel) {
  cudaStream_t stream = cuda_ops_stream(*gpu_);
  const int sms = cuda::current_sm_count();
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{200, 2050}, {300, 4096}, {1000, 1100}}) {
      const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n * 3 + k), 0.05f), f);
      const Matrix dq = up(q);
      ASSERT_GT(cuda::quant_gemv_plan(n, k, sms).slices, 1) << "N=" << n << " K=" << k;
      for (int64_t m : {1, 5, 8}) {
        const Tensor x = randn({m, k}, static_cast<uint32_t>(m + 11));
        Tensor ref = Tensor::empty({m, n}, DType::kF32);
        cpu_->matmul(ref, x, q);
        const Tensor xd = gpu_->to_device(x);
        Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, n, k, sms) / 4)});
        std::vector<Tensor> got;
        for (int run = 0; run < 4; ++run) {
          Tensor out = gpu_->empty({m, n});
          cuda::QuantGemvArgs a;
          a.out = out.data<float>();
          a.ldo = n;
          a.x = xd.data<float>();
          a.ldx = k;
          a.format = f;
          a.codes = dq.codes().raw();
          a.scales = dq.scales().raw();
          a.m = m;
          a.n = n;
          a.k = k;
          a.sm_count = sms;
          a.workspace = ws.data<float>();
          a.fused_sum = run >= 2;
          a.legacy = true;
          cuda::quant_gemv(stream, a);
          got.push_back(gpu_->to_host(out));
        }
        EXPECT_LE(rel_err_to_max_ref(ref, got[0]), 2e-5) << matrix_format_name(f) << " N=" << n << " K=" << k << " M=" << m;
        for (int run = 1; run < 4; ++run)
          EXPECT_TRUE(same_bits(got[run], got[0])) << matrix_format_name(f) << " N=" << n << " K=" << k << " M=" << m
                                                   << " run " << run;
      }
    }
  }
}

// quant_gemv_many: random segment sets (1..8 matrices of one format and k, different n,
// some with a row stride) give, per segment, the bits of a quant_gemv call on it alone,
// for both kernels, m = 1..8, with and without accumulate.
TEST_F(CudaQuant, ManySegmentsEqualSeparateCalls) {
  cudaStream_t stream = cuda_ops_stream(*gpu_);
  const int sms = cuda::current_sm_count();
  uint32_t seed = 1234;
  auto next = [&] { seed = seed * 1664525u + 1013904223u; return seed >> 8; };
  int cases = 0;
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (int64_t k : {int64_t{300}, int64_t{2048}, int64_t{4100}}) {
      for (int trial = 0; trial < 3; ++trial) {
        const int count = 1 + static_cast<int>(next() % cuda::kQuantGemvMaxSegments);
        std::vector<Matrix> mats;
        std::vector<int64_t> ns;
        for (int i = 0; i < count; ++i) {
          const int64_t n = 1 + static_cast<int64_t>(next() % 1500);
          ns.push_back(n);
          mats.push_back(up(quantize(randn({n, k}, next(), 0.05f), f)));
        }
        for (int64_t m = 1; m <= 8; ++m) {
          const bool acc = (m + trial) % 2 == 1;
          const Tensor xd = gpu_->to_device(randn({m, k}, next()));
          for (int mode : {0, 1, 2}) {  // slice kernel, its shared-memory weight ring, streaming kernel
            const bool legacy = mode < 2;
            cuda::QuantGemvArgs common;
            common.smem_weights = mode == 1 ? 1 : 0;
            common.x = xd.data<float>();
            common.ldx = k;
            common.format = f;
            common.m = m;
            common.k = k;
            common.accumulate = acc;
            common.sm_count = sms;
            common.legacy = legacy;
            std::vector<cuda::QuantGemvSegment> segs(static_cast<size_t>(count));
            int64_t ws_alone = 0;
            for (int i = 0; i < count; ++i)
              ws_alone = std::max(ws_alone, cuda::quant_gemv_workspace_bytes(m, ns[i], k, sms));
            const int64_t ws_bytes = cuda::quant_gemv_many_workspace_bytes(m, segs.data(), 0, k, sms);
            EXPECT_EQ(ws_bytes, 0);
            std::vector<Tensor> together, alone;
            for (int i = 0; i < count; ++i) {
              const int64_t ldo = ns[i] + (i % 2) * 3;
              const Tensor init = randn({m, ldo}, next());
              together.push_back(gpu_->to_device(init));
              alone.push_back(gpu_->to_device(init));
              segs[i].out = together.back().data<float>();
              segs[i].ldo = ldo;
              segs[i].codes = mats[i].codes().raw();
              segs[i].scales = mats[i].scales().raw();
              segs[i].n = ns[i];
            }
            const int64_t many_ws = cuda::quant_gemv_many_workspace_bytes(m, segs.data(), count, k, sms);
            EXPECT_GE(many_ws, ws_alone) << "the workspace also serves each segment alone";
            Tensor ws = gpu_->empty({std::max<int64_t>(1, many_ws / 4)});
            common.workspace = ws.data<float>();
            cuda::quant_gemv_many(stream, common, segs.data(), count);
            for (int i = 0; i < count; ++i) {
              cuda::QuantGemvArgs a = common;
              a.out = alone[i].data<float>();
              a.ldo = segs[i].ldo;
              a.codes = segs[i].codes;
              a.scales = segs[i].scales;
              a.n = ns[i];
              cuda::quant_gemv(stream, a);
            }
            for (int i = 0; i < count; ++i)
              EXPECT_TRUE(same_bits(gpu_->to_host(together[i]), gpu_->to_host(alone[i])))
                  << matrix_format_name(f) << " K=" << k << " M=" << m << " segment " << i << " of " << count
                  << " N=" << ns[i] << (mode == 0 ? " slice" : mode == 1 ? " slice smem" : " stream")
                  << (acc ? " acc" : "");
            ++cases;
          }
        }
      }
    }
  }
  std::printf("[quant] quant_gemv_many: %d segment sets equal separate calls bit for bit\n", cases);
  // Bad counts are refused.
  cuda::QuantGemvArgs common;
  cuda::QuantGemvSegment seg;
  EXPECT_THROW(cuda::quant_gemv_many(stream, common, &seg, cuda::kQuantGemvMaxSegments + 1), StatusError);
  EXPECT_THROW(cuda::quant_gemv_many(stream, common, &seg, -1), StatusError);
}

// The slice kernel's knobs that must not change the bits: chunks in flight per lane
// (QuantGemvArgs::inflight) and, with the same plan, the fused or cluster slice sum; x with a row
// stride (ldx > k) and out with one (ldo > n).
TEST_F(CudaQuant, InflightDoesNotChangeTheBits) {
  cudaStream_t stream = cuda_ops_stream(*gpu_);
  const int sms = cuda::current_sm_count();
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    // K = 1040: a last chunk of 16 (fp8: a 16-byte piece past K is zero-filled).
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{200, 2050}, {1000, 4096}, {77, 390}, {130, 1040}}) {
      const Matrix q = quantize(randn({n, k}, static_cast<uint32_t>(n + 5 * k), 0.05f), f);
      const Matrix dq = up(q);
      for (int64_t m : {1, 3, 8}) {
        const int64_t ldx = k + 4, ldo = n + 2;
        Tensor xs = randn({m, ldx}, static_cast<uint32_t>(m + 17));
        Tensor x = Tensor::empty({m, k}, DType::kF32);
        for (int64_t r = 0; r < m; ++r) std::copy_n(xs.data<float>() + r * ldx, k, x.data<float>() + r * k);
        Tensor ref = Tensor::empty({m, n}, DType::kF32);
        cpu_->matmul(ref, x, q);
        const Tensor xd = gpu_->to_device(xs);
        Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, n, k, sms) / 4)});
        std::vector<Tensor> got;
        // -1: the shared-memory weight ring, 8 warps of one MMA tile; -2: the ring, 4 warps of two.
        for (int inflight : {0, 2, 4, 8, -1, -2}) {
          for (int sum_mode : {0, 1, 2}) {  // second kernel, fused, cluster
            Tensor out = gpu_->empty({m, ldo});
            cuda::QuantGemvArgs a;
            a.out = out.data<float>();
            a.ldo = ldo;
            a.x = xd.data<float>();
            a.ldx = ldx;
            a.format = f;
            a.codes = dq.codes().raw();
            a.scales = dq.scales().raw();
            a.m = m;
            a.n = n;
            a.k = k;
            a.sm_count = sms;
            a.workspace = ws.data<float>();
            a.legacy = true;
            a.inflight = std::max(inflight, 0);
            a.smem_weights = inflight < 0 ? 1 : 0;
            a.slice_warps = inflight == -2 ? 4 : 8;
            a.fused_sum = sum_mode == 1;
            a.cluster_sum = sum_mode == 2 ? 1 : 0;
            a.slice_pdl = inflight == 4 ? 1 : 0;
            cuda::quant_gemv(stream, a);
            got.push_back(gpu_->to_host(out).slice(1, 0, n).contiguous());
          }
        }
        EXPECT_LE(rel_err_to_max_ref(ref, got[0]), 2e-5) << matrix_format_name(f) << " N=" << n << " K=" << k << " M=" << m;
        for (size_t i = 1; i < got.size(); ++i)
          EXPECT_TRUE(same_bits(got[i], got[0])) << matrix_format_name(f) << " N=" << n << " K=" << k << " M=" << m
                                                 << " variant " << i;
      }
    }
  }
}

TEST_F(CudaQuant, GemvPlanSplitsKAndCoversIt) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {4096, 12288}, {12288, 4096}, {24576, 4096}, {1536, 4096}, {4096, 8192}, {154880, 4096}, {7, 63}}) {
    const cuda::QuantGemvPlan p = cuda::quant_gemv_plan(n, k, 132);
    EXPECT_EQ(p.chunks, (k + 63) / 64);
    EXPECT_LE(p.chunks_per_slice, cuda::kQuantMaxSliceChunks);
    EXPECT_GE(p.slices * p.chunks_per_slice, p.chunks);
    EXPECT_LT((p.slices - 1) * p.chunks_per_slice, p.chunks) << "an empty slice";
    std::printf("[quant] plan N=%-6lld K=%-5lld: %lld row blocks x %lld K slices of %lld chunks\n",
                static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(p.row_blocks),
                static_cast<long long>(p.slices), static_cast<long long>(p.chunks_per_slice));
  }
}

// cuBLASLt's FP8 block-scaled GEMM: the scale layouts it could mean, each against the CPU.
TEST_F(CudaQuant, Fp8PrefillOnFp8TensorCores) {
  const int64_t n = 384, k = 640, m = 48;
  // Rows of W with very different magnitudes per 128 block, so that a misplaced
  // scale shows.
  Tensor w = randn({n, k}, 41, 0.05f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) w.data<float>()[r * k + c] *= 1.0f + 7.0f * static_cast<float>((r / 128 + 2 * (c / 128)) % 5);
  const Matrix q = quantize(w, MatrixFormat::kFp8Block);
  const Matrix dq = up(q);
  Tensor x = randn({m, k}, 42);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) x.data<float>()[r * k + c] *= 1.0f + static_cast<float>((r + 3 * (c / 128)) % 4);
  Tensor ref = Tensor::empty({m, n}, DType::kF32);
  cpu_->matmul(ref, x, q);
  const Tensor xd = gpu_->to_device(x);
  // Our FP8 tensor-core GEMM (fp8_block_gemm.h; its own tests are cuda_fp8_gemm_tests).
  ::setenv("TF_FP8_PREFILL", "mma", 1);
  const int64_t mma0 = cuda::fp8_block_gemm_mma_count();
  for (bool acc : {false, true}) {
    const Tensor init = randn({m, n}, 43);
    Tensor want = init.contiguous();
    cpu_->matmul(want, x, q, acc);
    Tensor out = gpu_->to_device(init);
    gpu_->matmul(out, xd, dq, acc);
    const double e = rel_err_to_max_ref(want, gpu_->to_host(out));
    std::printf("[quant] fp8 prefill on FP8 tensor cores (ours)%s: max rel err %.3g (tol 5e-2)\n", acc ? " acc" : "", e);
    EXPECT_LE(e, 5e-2) << (acc ? "accumulate" : "");
  }
  EXPECT_EQ(cuda::fp8_block_gemm_mma_count(), mma0 + 2) << "TF_FP8_PREFILL=mma did not take the FP8 GEMM";
  // cuBLASLt's block-scaled FP8 (fp8_gemm.h): opt-in and known wrong on CUDA 13.0 (max rel
  // err 0.8-1.1 under every scale order); each order is printed for the investigation.
  ::setenv("TF_FP8_PREFILL", "lt", 1);
  const int64_t calls0 = cuda::fp8_block_gemm_count();
  for (int layout = 0; layout < 4; ++layout) {
    ::setenv("TF_FP8_SCALE_LAYOUT", std::to_string(layout).c_str(), 1);
    Tensor out = gpu_->empty({m, n});
    gpu_->matmul(out, xd, dq);
    std::printf("[quant] fp8 prefill cuBLASLt scale layout %d (weight k fastest %d, act k fastest %d): max rel err %.3g\n",
                layout, layout & 1, (layout >> 1) & 1, rel_err_to_max_ref(ref, gpu_->to_host(out)));
  }
  ::unsetenv("TF_FP8_SCALE_LAYOUT");
  const bool lt = cuda::fp8_block_gemm_count() > calls0;
  std::printf("[quant] fp8 prefill through cuBLASLt FP8: %s\n",
              lt ? (cuda::fp8_block_gemm_f32_output() ? "yes, f32 output" : "yes, bf16 output") : "no (bf16 fallback)");
  EXPECT_TRUE(lt) << "cuBLASLt took no FP8 block-scaled call";
  // The same with every scale dimension a multiple of 4 (m 64, 4 x 4 weight blocks), in
  // case cuBLASLt wants 16-byte aligned scale rows.
  {
    const Matrix q4 = quantize(randn({512, 512}, 44, 0.05f), MatrixFormat::kFp8Block);
    const Matrix dq4 = up(q4);
    const Tensor x4 = randn({64, 512}, 45);
    Tensor ref4 = Tensor::empty({64, 512}, DType::kF32);
    cpu_->matmul(ref4, x4, q4);
    const Tensor xd4 = gpu_->to_device(x4);
    for (int layout = 0; layout < 4; ++layout) {
      ::setenv("TF_FP8_SCALE_LAYOUT", std::to_string(layout).c_str(), 1);
      Tensor out = gpu_->empty({64, 512});
      gpu_->matmul(out, xd4, dq4);
      std::printf("[quant] fp8 prefill cuBLASLt M=64 N=512 K=512 scale layout %d: max rel err %.3g\n", layout,
                  rel_err_to_max_ref(ref4, gpu_->to_host(out)));
    }
    ::unsetenv("TF_FP8_SCALE_LAYOUT");
  }
  ::unsetenv("TF_FP8_PREFILL");
}

TEST_F(CudaQuant, RefusesHostMatrices) {
  const Matrix q = quantize(randn({8, 64}, 1), MatrixFormat::kQ4);
  Tensor out = gpu_->empty({1, 8});
  EXPECT_THROW(gpu_->matmul(out, gpu_->to_device(randn({1, 64}, 2)), q), StatusError);
}

// A matrix of random codes and small scales of logical shape [n, k] (timing only:
// quantizing a 155K-row matrix on the host would take minutes).
Matrix random_matrix(MatrixFormat f, int64_t n, int64_t k, uint64_t seed) {
  const int64_t g = (k + 63) / 64;
  Tensor codes = f == MatrixFormat::kQ4 ? Tensor::empty({n, g * 32}, DType::kU8) : Tensor::empty({n, k}, DType::kF8E4M3);
  auto* bytes = static_cast<uint8_t*>(codes.raw());
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < codes.nbytes(); ++i) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    bytes[i] = static_cast<uint8_t>(s >> 24);
    if (f == MatrixFormat::kFp8Block && (bytes[i] & 0x7F) == 0x7F) bytes[i] ^= 1;  // no NaN codes
  }
  if (f == MatrixFormat::kQ4) {
    Tensor scales = Tensor::empty({n, g}, DType::kF16);
    auto* h = scales.data<uint16_t>();
    for (int64_t i = 0; i < n * g; ++i) h[i] = 0x2000;  // 2^-7
    return Matrix::q4(codes, scales, k);
  }
  Tensor scales = Tensor::empty({(n + 127) / 128, (k + 127) / 128}, DType::kF32);
  for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] = 1e-3f;
  return Matrix::fp8_block(codes, scales);
}

TEST_F(CudaQuant, Bench) {
  auto g64 = make_cuda_ops(0, 64);  // m = 64 through the GEMV (8 passes of 8 rows)
  ASSERT_TRUE(g64) << g64.status().to_string();
  Ops& gemv_ops = **g64;
  auto probe = cuda::probe_device(0);
  ASSERT_TRUE(probe) << probe.status().to_string();
  const double hbm = probe->hbm_gbps;
  std::printf("[quant-bench] %s: measured HBM copy %.0f GB/s, cuBLAS BF16 %.0f TFLOP/s\n", probe->name.c_str(), hbm,
              probe->bf16_tflops);
  std::printf("[quant-bench] columns: legacy kernel (before) eager us / %% of HBM -> streaming kernel eager us, "
              "GB/s, %% of HBM; graph: the streaming kernel replayed from a CUDA graph (with and without "
              "programmatic dependent launch)\n");
  cudaStream_t stream = cuda_ops_stream(*gpu_);
  const int sms = cuda::current_sm_count();
  struct Shape2 { int64_t n, k; const char* what; };
  const Shape2 shapes[] = {{8192, 4096, "4096->8192"},   {4096, 8192, "8192->4096"},   {4096, 4096, "4096->4096"},
                           {12288, 4096, "4096->12288"}, {4096, 12288, "12288->4096"}, {1536, 4096, "4096->1536"},
                           {24576, 4096, "4096->24576"}, {154880, 4096, "lm_head 4096->154880"}};
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (const Shape2& s : shapes) {
      const Matrix q = random_matrix(f, s.n, s.k, static_cast<uint64_t>(s.n + s.k));
      const int64_t bytes = q.nbytes();
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / bytes + 1));
      std::vector<Matrix> dev;
      for (int i = 0; i < copies; ++i) dev.push_back(up(q));
      const bool big = s.n > 100000;
      for (int64_t m : {1, 2, 4, 8, 64}) {
        const Tensor x = gpu_->to_device(randn({m, s.k}, 4));
        Tensor out = gpu_->empty({m, s.n});
        const double t = seconds_per_call(big ? 10 : 40, [&](int i) { gemv_ops.matmul(out, x, dev[i % copies]); });
        const double gbps = bytes / t / 1e9;
        if (m > 8) {
          std::printf("[quant-bench] gemv %-3s %-22s m=%-3lld %8.1f us  %7.0f GB/s  %5.1f%% of HBM\n",
                      matrix_format_name(f), s.what, static_cast<long long>(m), t * 1e6, gbps, 100 * gbps / hbm);
          continue;
        }
        cuda::QuantGemvArgs a;
        a.out = out.data<float>();
        a.ldo = s.n;
        a.x = x.data<float>();
        a.ldx = s.k;
        a.format = f;
        a.m = m;
        a.n = s.n;
        a.k = s.k;
        auto call = [&](int i) {
          a.codes = dev[i % copies].codes().raw();
          a.scales = dev[i % copies].scales().raw();
          cuda::quant_gemv(stream, a);
        };
        const double tg = graph_seconds(stream, big ? 8 : 40, call);
        a.pdl = 0;
        const double tn = graph_seconds(stream, big ? 8 : 40, call);
        a.legacy = true;
        a.sm_count = sms;
        Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, s.n, s.k, sms) / 4)});
        a.workspace = ws.data<float>();
        const double tl = seconds_per_call(big ? 10 : 40, call);
        std::printf("[quant-bench] gemv %-3s %-22s m=%-3lld legacy %7.1f us %5.1f%% -> %7.1f us  %7.0f GB/s  %5.1f%% of "
                    "HBM; graph %7.1f us %5.1f%% (no PDL %7.1f us %5.1f%%)\n",
                    matrix_format_name(f), s.what, static_cast<long long>(m), tl * 1e6, 100 * bytes / tl / 1e9 / hbm,
                    t * 1e6, gbps, 100 * gbps / hbm, tg * 1e6, 100 * bytes / tg / 1e9 / hbm, tn * 1e6,
                    100 * bytes / tn / 1e9 / hbm);
      }
      // What bounds the streaming kernel: the same launch streaming only (no x, no MMA)
      // and computing only (no HBM traffic), graph-replayed.
      if (s.n == 8192 || s.n == 24576 || (s.n == 4096 && s.k == 12288)) {
        for (int64_t m : {1, 8}) {
          const Tensor x = gpu_->to_device(randn({m, s.k}, 4));
          Tensor out = gpu_->empty({m, s.n});
          double tp[3];
          for (int pr = 0; pr < 3; ++pr) {
            cuda::QuantGemvArgs a;
            a.out = out.data<float>();
            a.ldo = s.n;
            a.x = x.data<float>();
            a.ldx = s.k;
            a.format = f;
            a.m = m;
            a.n = s.n;
            a.k = s.k;
            a.probe = pr;
            tp[pr] = graph_seconds(stream, 40, [&](int i) {
              a.codes = dev[i % copies].codes().raw();
              a.scales = dev[i % copies].scales().raw();
              cuda::quant_gemv(stream, a);
            });
          }
          std::printf("[quant-bench] probe %-3s %-12s m=%lld graph: full %6.1f us (%4.1f%%), loads only %6.1f us "
                      "(%4.1f%%), compute only %6.1f us\n",
                      matrix_format_name(f), s.what, static_cast<long long>(m), tp[0] * 1e6,
                      100 * bytes / tp[0] / 1e9 / hbm, tp[1] * 1e6, 100 * bytes / tp[1] / 1e9 / hbm, tp[2] * 1e6);
        }
      }
    }
  }
  // The slice kernel (the default) swept, graph-replayed: chunks in flight per lane
  // (QuantGemvArgs::inflight), blocks per SM the plan aims at (its K slices), and the
  // cluster sum ("c") instead of the second kernel, no programmatic dependent launch ("n"),
  // the shared-memory weight ring ("s") or the register ring ("r"). "*" marks the defaults.
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{8192, 4096}, {4096, 8192}, {1536, 4096}, {24576, 4096}}) {
      const Matrix q = random_matrix(f, n, k, 11);
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / q.nbytes() + 1));
      std::vector<Matrix> dev;
      for (int i = 0; i < copies; ++i) dev.push_back(up(q));
      for (int64_t m : {1, 4, 8}) {
        const Tensor x = gpu_->to_device(randn({m, k}, 4));
        Tensor out = gpu_->empty({m, n});
        std::string line;
        auto time_it = [&](int inflight, int bpsm, bool fused, int cluster = 0, int pdl = -1, int smem = -1) {
          cuda::QuantGemvArgs a;
          a.out = out.data<float>();
          a.ldo = n;
          a.x = x.data<float>();
          a.ldx = k;
          a.format = f;
          a.m = m;
          a.n = n;
          a.k = k;
          a.legacy = true;
          a.sm_count = sms;
          a.inflight = inflight;
          a.blocks_per_sm = bpsm;
          a.fused_sum = fused;
          a.cluster_sum = cluster;
          a.slice_pdl = pdl;
          a.smem_weights = smem;
          Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, n, k, sms, bpsm) / 4)});
          a.workspace = ws.data<float>();
          const double t = graph_seconds(stream, 40, [&](int i) {
            a.codes = dev[i % copies].codes().raw();
            a.scales = dev[i % copies].scales().raw();
            cuda::quant_gemv(stream, a);
          });
          char buf[96];
          std::snprintf(buf, sizeof buf, " %s%d/%d%s%s%s %.1f us %.0f%%",
                        inflight == 0 && bpsm == 0 && !fused && cluster == 0 && pdl < 0 && smem < 0 ? "*" : "",
                        inflight, bpsm, fused ? "f" : cluster ? "c" : "", pdl == 0 ? "n" : "",
                        smem > 0 ? "s" : smem == 0 ? "r" : "", t * 1e6,
                        100 * q.nbytes() / t / 1e9 / hbm);
          line += buf;
        };
        const std::vector<int> inflights = f == MatrixFormat::kQ4 ? std::vector<int>{0, 2} : std::vector<int>{0, 4};
        for (int inflight : inflights)
          for (int bpsm : {0, 3, 6}) time_it(inflight, bpsm, false, 0, -1, inflight == 0 ? -1 : 0);
        time_it(0, 0, false, 0, -1, 0);  // the register ring
        time_it(0, 0, false, 0, 0);      // no PDL
        time_it(0, 0, false, 1);         // cluster sum
        for (int bpsm : {0, 3, 6}) time_it(0, bpsm, false, 0, -1, 1);
        time_it(0, 0, false, 1, -1, 1);
        std::printf("[quant-bench] slice sweep %-3s N=%-6lld K=%-5lld m=%lld graph (inflight/blocks per SM):%s\n",
                    matrix_format_name(f), static_cast<long long>(n), static_cast<long long>(k),
                    static_cast<long long>(m), line.c_str());
        // The default (shared-memory weight ring) with 4 warps of two MMA tiles (the
        // earlier configuration) vs 8 warps of one (issue #8); best of two interleaved runs.
        double best[2] = {INFINITY, INFINITY};
        for (int rep = 0; rep < 2; ++rep)
          for (int w = 0; w < 2; ++w) {
            cuda::QuantGemvArgs a;
            a.out = out.data<float>();
            a.ldo = n;
            a.x = x.data<float>();
            a.ldx = k;
            a.format = f;
            a.m = m;
            a.n = n;
            a.k = k;
            a.legacy = true;
            a.sm_count = sms;
            a.slice_warps = w == 0 ? 4 : 8;
            Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_workspace_bytes(m, n, k, sms) / 4)});
            a.workspace = ws.data<float>();
            best[w] = std::min(best[w], graph_seconds(stream, 40, [&](int i) {
                                 a.codes = dev[i % copies].codes().raw();
                                 a.scales = dev[i % copies].scales().raw();
                                 cuda::quant_gemv(stream, a);
                               }));
          }
        std::printf("[quant-bench] warps %-3s N=%-6lld K=%-5lld m=%lld graph: 4 warps x 2 tiles %6.1f us %4.1f%% of HBM"
                    " -> 8 warps x 1 tile %6.1f us %4.1f%% (%.2fx)\n",
                    matrix_format_name(f), static_cast<long long>(n), static_cast<long long>(k),
                    static_cast<long long>(m), best[0] * 1e6, 100 * q.nbytes() / best[0] / 1e9 / hbm, best[1] * 1e6,
                    100 * q.nbytes() / best[1] / 1e9 / hbm, best[0] / best[1]);
      }
    }
  }
  // quant_gemv_many: three 4096->8192 matrices (the KDA q/k/v shape) in one launch vs
  // three calls, graph-replayed.
  for (MatrixFormat f : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
    const int64_t n = 8192, k = 4096;
    const Matrix q = random_matrix(f, n, k, 12);
    const int copies = static_cast<int>(std::max<int64_t>(3, 3 * ((int64_t{400} << 20) / (3 * q.nbytes()) + 1)));
    std::vector<Matrix> dev;
    for (int i = 0; i < copies; ++i) dev.push_back(up(q));
    for (int64_t m : {1, 4, 8}) {
      const Tensor x = gpu_->to_device(randn({m, k}, 4));
      std::vector<Tensor> outs;
      for (int i = 0; i < 3; ++i) outs.push_back(gpu_->empty({m, n}));
      cuda::QuantGemvArgs common;
      common.x = x.data<float>();
      common.ldx = k;
      common.format = f;
      common.m = m;
      common.k = k;
      common.legacy = true;
      common.sm_count = sms;
      cuda::QuantGemvSegment segs[3];
      for (int i = 0; i < 3; ++i) {
        segs[i].out = outs[i].data<float>();
        segs[i].ldo = n;
        segs[i].n = n;
      }
      Tensor ws = gpu_->empty({std::max<int64_t>(1, cuda::quant_gemv_many_workspace_bytes(m, segs, 3, k, sms) / 4)});
      common.workspace = ws.data<float>();
      auto set = [&](int i) {
        for (int j = 0; j < 3; ++j) {
          segs[j].codes = dev[(3 * i + j) % copies].codes().raw();
          segs[j].scales = dev[(3 * i + j) % copies].scales().raw();
        }
      };
      const double one = graph_seconds(stream, 20, [&](int i) {
        set(i);
        cuda::quant_gemv_many(stream, common, segs, 3);
      });
      const double three = graph_seconds(stream, 20, [&](int i) {
        set(i);
        for (int j = 0; j < 3; ++j) {
          cuda::QuantGemvArgs a = common;
          a.out = segs[j].out;
          a.ldo = n;
          a.codes = segs[j].codes;
          a.scales = segs[j].scales;
          a.n = n;
          cuda::quant_gemv(stream, a);
        }
      });
      const double bytes = 3.0 * q.nbytes();
      std::printf("[quant-bench] many %-3s 3 x 4096->8192 m=%lld graph: one launch %6.1f us %5.1f%% of HBM, three calls "
                  "%6.1f us %5.1f%%\n",
                  matrix_format_name(f), static_cast<long long>(m), one * 1e6, 100 * bytes / one / 1e9 / hbm,
                  three * 1e6, 100 * bytes / three / 1e9 / hbm);
    }
  }
  // Blocks per cluster splitting K swept on the streaming kernel (graph-replayed, m = 1).
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{8192, 4096}, {4096, 8192}, {1536, 4096}, {24576, 4096}}) {
    const Matrix q = random_matrix(MatrixFormat::kQ4, n, k, 9);
    const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{400} << 20) / q.nbytes() + 1));
    std::vector<Matrix> dev;
    for (int i = 0; i < copies; ++i) dev.push_back(up(q));
    const Tensor x = gpu_->to_device(randn({1, k}, 4));
    Tensor out = gpu_->empty({1, n});
    std::string line;
    for (int splits : {1, 2, 3, 4, 6, 8}) {
      cuda::QuantGemvArgs a;
      a.out = out.data<float>();
      a.ldo = n;
      a.x = x.data<float>();
      a.ldx = k;
      a.m = 1;
      a.n = n;
      a.k = k;
      a.splits = splits;
      const double t = graph_seconds(stream, 40, [&](int i) {
        a.codes = dev[i % copies].codes().raw();
        a.scales = dev[i % copies].scales().raw();
        cuda::quant_gemv(stream, a);
      });
      char buf[64];
      std::snprintf(buf, sizeof buf, "  %d: %.1f us %.1f%%", splits, t * 1e6, 100 * q.nbytes() / t / 1e9 / hbm);
      line += buf;
    }
    std::printf("[quant-bench] splits q4 N=%-6lld K=%-5lld m=1 graph:%s\n", static_cast<long long>(n),
                static_cast<long long>(k), line.c_str());
  }
  // Prefill: fp8 on FP8 tensor cores (cuBLASLt block scales), q4 dequantized to bf16 + cuBLAS.
  for (int variant = 0; variant < 3; ++variant) {
    const MatrixFormat f = variant < 2 ? MatrixFormat::kFp8Block : MatrixFormat::kQ4;
    if (variant == 1) ::setenv("TF_FP8_PREFILL", "lt", 1);  // the opt-in FP8 tensor-core path
    for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{12288, 4096}, {4096, 12288}}) {
      const Matrix dq = up(random_matrix(f, n, k, 5));
      for (int64_t m : {1024, 8192}) {
        const Tensor x = gpu_->to_device(randn({m, k}, 6));
        Tensor out = gpu_->empty({m, n});
        const int64_t c0 = cuda::fp8_block_gemm_count();
        const double t = seconds_per_call(10, [&](int) { gpu_->matmul(out, x, dq); });
        const bool lt = cuda::fp8_block_gemm_count() > c0;
        std::printf("[quant-bench] prefill %-3s M=%-5lld N=%-5lld K=%-5lld %7.3f ms %6.0f TFLOP/s (%s)\n",
                    matrix_format_name(f), static_cast<long long>(m), static_cast<long long>(n),
                    static_cast<long long>(k), t * 1e3, 2.0 * m * n * k / t / 1e12,
                    lt ? "FP8 tensor cores, cuBLASLt block scales (opt-in)" : "dequant bf16 + cuBLAS");
      }
    }
    ::unsetenv("TF_FP8_PREFILL");
  }
}

}  // namespace
}  // namespace tf
