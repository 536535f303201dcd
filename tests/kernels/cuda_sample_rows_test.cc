// Ops::sample_rows on CUDA against the CPU op and the host sampler (src/sampling),
// plus a micro-benchmark: device sampling vs downloading the logits and sampling
// on the host (what the engine did before), at B = 1 and B = 64 rows of the model's
// 154,880-token vocabulary.
//
// Parity contract (kernels/api/sample_rows.h): every row the device decides gives
// the host's token exactly; a row within the rounding margins comes back
// kUndecided (random rows: essentially never; the counts are printed). Raw
// logprobs: the device sums exp() in another order, so they may differ from the
// host's in the last float bits: tolerance 2e-6 * max(1, |logprob|).
// Lines "[sampling] ..." and "[sampling-bench] ..." summarise for the GPU log.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "sample_rows_cases.h"
#include "sampling/batch_sampler.h"
#include "sampling/sequence_sampler.h"
#include "cpu_cuda_test.h"

namespace tf {
namespace {

using namespace sample_rows_cases;
using Clock = std::chrono::steady_clock;

constexpr int64_t kModelVocab = 154880;
constexpr int32_t kModelTextVocab = 154820;

class CudaSampleRows : public CpuCudaTest {
 protected:
  struct Tally {
    int rows = 0, decided = 0, undecided_gpu = 0, undecided_cpu = 0, token_mismatch = 0, status_mismatch = 0;
    double worst_logprob = 0.0;
  };

  // All rows of one parameter set in one batched [B, vocab] device tensor; each
  // row a view of it (as the model's StepResult::device_logits).
  void run_grid(int64_t vocab, int32_t limit, int rows_per_kind, Tally& t) {
    for (const ParamCase& pc : param_grid()) {
      std::vector<std::vector<float>> host_rows;
      std::vector<SampleRowParams> params;
      uint32_t s = 1;
      for (RowKind kind : kKinds)
        for (int i = 0; i < rows_per_kind; ++i, ++s) {
          host_rows.push_back(make_row(vocab, kind, s * 104729u + static_cast<uint32_t>(vocab)));
          auto d = device_row_params(pc.p, 0xABCDEFull * s + 11, 1000 + s, {}, limit);
          ASSERT_TRUE(d.has_value());
          params.push_back(*d);
        }
      const auto b = static_cast<int64_t>(host_rows.size());
      std::vector<float> flat;
      for (const auto& r : host_rows) flat.insert(flat.end(), r.begin(), r.end());
      const Tensor batch = gpu_->to_device(Tensor::from_floats({b, vocab}, flat));
      std::vector<Tensor> dev_rows, cpu_rows;
      for (int64_t r = 0; r < b; ++r) {
        dev_rows.push_back(batch.select(0, r));
        cpu_rows.push_back(Tensor::from_floats({vocab}, host_rows[static_cast<size_t>(r)]));
      }
      std::vector<SampleRowResult> dev(static_cast<size_t>(b)), ref(static_cast<size_t>(b));
      gpu_->sample_rows(dev, dev_rows, params);
      cpu_->sample_rows(ref, cpu_rows, params);
      for (size_t r = 0; r < static_cast<size_t>(b); ++r) {
        SCOPED_TRACE(pc.name + " vocab " + std::to_string(vocab) + " row " + std::to_string(r));
        ++t.rows;
        auto host = host_sample(host_rows[r], limit, pc.p, params[r].seed, params[r].position);
        ASSERT_TRUE(host.has_value());
        t.undecided_cpu += ref[r].status == SampleRowStatus::kUndecided;
        if (dev[r].status == SampleRowStatus::kUndecided) {
          ++t.undecided_gpu;
          continue;
        }
        EXPECT_EQ(dev[r].status, SampleRowStatus::kOk);
        if (dev[r].status != SampleRowStatus::kOk) {
          ++t.status_mismatch;
          continue;
        }
        ++t.decided;
        EXPECT_EQ(dev[r].token, host->token);
        t.token_mismatch += dev[r].token != host->token;
        const SampledToken got = sampled_token_of(dev[r], pc.p);
        auto check_lp = [&](float a, float h) {
          const double d = std::fabs(static_cast<double>(a) - h);
          t.worst_logprob = std::max(t.worst_logprob, d);
          EXPECT_LE(d, 2e-6 * std::max(1.0, std::fabs(static_cast<double>(h))));
        };
        check_lp(got.logprob, host->logprob);
        ASSERT_EQ(got.top.size(), host->top.size());
        for (size_t j = 0; j < got.top.size(); ++j) {
          EXPECT_EQ(got.top[j].token, host->top[j].token) << j;
          check_lp(got.top[j].logprob, host->top[j].logprob);
        }
      }
    }
  }

  void report(const char* what, const Tally& t) {
    std::printf(
        "[sampling] parity %-22s rows %d decided %d undecided gpu %d cpu %d; token mismatches %d, status "
        "mismatches %d, max |logprob diff| %.3g\n",
        what, t.rows, t.decided, t.undecided_gpu, t.undecided_cpu, t.token_mismatch, t.status_mismatch,
        t.worst_logprob);
    std::fflush(stdout);
    EXPECT_EQ(t.token_mismatch, 0);
    EXPECT_EQ(t.status_mismatch, 0);
    // Random rows fall within the margins with probability ~1e-9.
    EXPECT_EQ(t.undecided_gpu, 0);
  }

};

TEST_F(CudaSampleRows, ParitySmallVocab) {
  Tally t;
  run_grid(1000, 0, 8, t);
  run_grid(3001, 2900, 4, t);  // a width that is no multiple of anything, and padding
  run_grid(33, 0, 4, t);       // fewer tokens than threads
  report("small vocabularies", t);
}

TEST_F(CudaSampleRows, ParityModelVocab) {
  Tally t;
  run_grid(kModelVocab, kModelTextVocab, 2, t);
  report("154880 vocabulary", t);
}

TEST_F(CudaSampleRows, ManyPositions) {
  // One row drawn at 256 positions in one call: each draw equals the host's.
  const std::vector<float> row = make_row(kModelVocab, RowKind::kNormal, 77);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.top_k = 100;
  const Tensor dev_row = gpu_->to_device(Tensor::from_floats({kModelVocab}, row));
  std::vector<Tensor> rows(256, dev_row);
  std::vector<SampleRowParams> params;
  for (int pos = 0; pos < 256; ++pos) params.push_back(*device_row_params(p, 9, pos, {}, kModelTextVocab));
  std::vector<SampleRowResult> out(rows.size());
  gpu_->sample_rows(out, rows, params);
  int mismatches = 0, undecided = 0;
  for (int pos = 0; pos < 256; ++pos) {
    auto host = host_sample(row, kModelTextVocab, p, 9, pos);
    ASSERT_TRUE(host.has_value());
    if (out[static_cast<size_t>(pos)].status == SampleRowStatus::kUndecided) {
      ++undecided;
      continue;
    }
    mismatches += out[static_cast<size_t>(pos)].token != host->token;
  }
  std::printf("[sampling] 256 positions of one row: %d mismatches, %d undecided\n", mismatches, undecided);
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(undecided, 0);
}

TEST_F(CudaSampleRows, BoundaryAndBadRows) {
  // top_p boundary within 1e-12 of the target (see cpu_sample_rows_test.cc).
  std::vector<float> row{0.0f};
  double rest = 1.0;
  for (int v = 1; v <= 40 && rest > 1e-13; ++v) {
    const double m = std::exp(static_cast<double>(-v));
    while (rest >= m) {
      row.push_back(static_cast<float>(-v));
      rest -= m;
    }
  }
  const auto n = static_cast<int64_t>(row.size());
  std::vector<float> nan_row(500, 0.5f), masked(500, -std::numeric_limits<float>::infinity()), padded_nan(500, 0.5f);
  nan_row[321] = std::numeric_limits<float>::quiet_NaN();
  padded_nan[499] = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> rows{gpu_->to_device(Tensor::from_floats({n}, row)),
                           gpu_->to_device(Tensor::from_floats({500}, nan_row)),
                           gpu_->to_device(Tensor::from_floats({500}, masked)),
                           gpu_->to_device(Tensor::from_floats({500}, padded_nan)),
                           gpu_->to_device(Tensor::from_floats({3}, {1e38f, 0.0f, -1.0f}))};
  std::vector<SampleRowParams> params(5);
  params[0].top_p = 0.5f;
  params[3].vocab_limit = 499;
  params[3].greedy = true;
  params[4].temperature = 1e-5f;  // overflows f32: left to the host
  std::vector<SampleRowResult> out(5);
  gpu_->sample_rows(out, rows, params);
  std::vector<SampleRowResult> ref(5);
  std::vector<Tensor> host_rows5;
  for (const Tensor& t : rows) host_rows5.push_back(gpu_->to_host(t));
  cpu_->sample_rows(ref, host_rows5, params);
  EXPECT_EQ(out[0].status, SampleRowStatus::kUndecided);
  EXPECT_EQ(out[1].status, SampleRowStatus::kBadLogit);
  EXPECT_EQ(out[2].status, SampleRowStatus::kNothingLeft);
  EXPECT_EQ(out[3].status, SampleRowStatus::kOk);
  EXPECT_EQ(out[3].token, 0);  // all 0.5: ties to the lowest id
  EXPECT_EQ(out[4].status, SampleRowStatus::kUndecided);
  for (size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].status, ref[r].status) << "row " << r << " vs the CPU op";
  // Host tensors are refused, not read.
  std::vector<Tensor> host_rows{Tensor::from_floats({4}, {1, 2, 3, 4})};
  std::vector<SampleRowResult> one(1);
  std::vector<SampleRowParams> p1(1);
  EXPECT_THROW(gpu_->sample_rows(one, host_rows, p1), StatusError);
}

// Device sampling vs download + host sampling, per step, at B = 1 and 64.
TEST_F(CudaSampleRows, Benchmark) {
  ThreadPool pool(2);  // as the engine's sample_pool
  for (const char* mode : {"greedy", "t0.8+top_p0.95"}) {
    SamplingParams p;
    if (std::string(mode) == "greedy") {
      p.temperature = 0.0f;
    } else {
      p.temperature = 0.8f;
      p.top_p = 0.95f;
    }
    for (int64_t b : {int64_t{1}, int64_t{64}}) {
      std::vector<float> flat;
      for (int64_t r = 0; r < b; ++r) {
        const auto row = make_row(kModelVocab, RowKind::kNormal, static_cast<uint32_t>(r + 1));
        flat.insert(flat.end(), row.begin(), row.end());
      }
      const Tensor batch = gpu_->to_device(Tensor::from_floats({b, kModelVocab}, flat));
      std::vector<Tensor> rows;
      std::vector<SampleRowParams> params;
      std::vector<std::unique_ptr<SequenceSampler>> seqs;
      const std::vector<int32_t> prompt{1, 2, 3};
      SamplingParams sp = p;
      sp.max_tokens = 1 << 20;
      for (int64_t r = 0; r < b; ++r) {
        rows.push_back(batch.select(0, r));
        params.push_back(*device_row_params(p, static_cast<uint64_t>(r), 5, {}, kModelTextVocab));
        seqs.push_back(std::make_unique<SequenceSampler>(sp, prompt, std::vector<int32_t>{}, static_cast<uint32_t>(r)));
      }
      std::vector<SampleRowResult> out(static_cast<size_t>(b));
      gpu_->sample_rows(out, rows, params);  // warm-up
      const int iters = b == 1 ? 200 : 50;
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) gpu_->sample_rows(out, rows, params);
      const double dev_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;

      double down_us = 0, host_us = 0;
      std::vector<SequenceSampler*> ptrs;
      for (auto& s : seqs) ptrs.push_back(s.get());
      const int host_iters = b == 1 ? 50 : 5;
      for (int i = 0; i < host_iters; ++i) {
        auto a = Clock::now();
        Tensor host = gpu_->to_host(batch);
        auto m = Clock::now();
        float* data = host.data<float>();
        for (int64_t r = 0; r < b; ++r)
          for (int64_t t = kModelTextVocab; t < kModelVocab; ++t) data[r * kModelVocab + t] = -INFINITY;
        auto steps = sample_batch(std::span<const float>(data, static_cast<size_t>(b * kModelVocab)), kModelVocab,
                                  ptrs, pool);
        auto e = Clock::now();
        for (auto& st : steps) ASSERT_TRUE(st.has_value());
        down_us += std::chrono::duration<double, std::micro>(m - a).count();
        host_us += std::chrono::duration<double, std::micro>(e - m).count();
      }
      down_us /= host_iters;
      host_us /= host_iters;
      std::printf("[sampling-bench] %-15s B=%-3lld device %9.1f us/step | download %9.1f us + host %9.1f us = %9.1f "
                  "us/step | speedup %.1fx\n",
                  mode, static_cast<long long>(b), dev_us, down_us, host_us, down_us + host_us,
                  (down_us + host_us) / dev_us);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace tf
