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
// The kernel's row walks (TF_SAMPLE_ROWS=v1|strided|vec4|cluster2|4|8, cuda_sampling.cu,
// and grid, cuda_sampling_grid.cu, the default for few rows without logprobs) are
// compared with v1 on rows of widths 1..9 and others, odd widths (every 16-byte
// misalignment of the row start), ties across 4-element groups and NaN/+inf in the
// scalar head and tail: bit for bit, but vec4 and grid in tokens (their double sums
// run in another order).
// Lines "[sampling] ..." and "[sampling-bench] ..." summarise for the GPU log.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "cpu_cuda_test.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_memory.h"
#include "sample_rows_cases.h"
#include "sampling/batch_sampler.h"
#include "sampling/sequence_sampler.h"

namespace tf {
namespace {

using namespace sample_rows_cases;
using Clock = std::chrono::steady_clock;

constexpr int64_t kModelVocab = 154880;
constexpr int32_t kModelTextVocab = 154820;
// The kernel's row walks (TF_SAMPLE_ROWS); all but vec4 and grid give v1's bits.
constexpr const char* kWalks[] = {"v1", "strided", "vec4", "cluster2", "cluster4", "cluster8", "grid"};
bool sums_in_another_order(const char* walk) {
  return std::string(walk) == "vec4" || std::string(walk) == "grid";
}

// TF_SAMPLE_ROWS for one scope (the op reads it at every call); restores the caller's.
class ScopedWalk {
 public:
  explicit ScopedWalk(const char* walk) {
    if (const char* e = std::getenv("TF_SAMPLE_ROWS")) saved_ = e;
    setenv("TF_SAMPLE_ROWS", walk, 1);
  }
  ~ScopedWalk() {
    if (saved_) {
      setenv("TF_SAMPLE_ROWS", saved_->c_str(), 1);
    } else {
      unsetenv("TF_SAMPLE_ROWS");
    }
  }
  ScopedWalk(const ScopedWalk&) = delete;
  ScopedWalk& operator=(const ScopedWalk&) = delete;

 private:
  std::optional<std::string> saved_;
};

bool same_result(const SampleRowResult& a, const SampleRowResult& b) {
  if (a.status != b.status || a.token != b.token || !same_float(a.logprob, b.logprob) || a.top_count != b.top_count)
    return false;
  for (int j = 0; j < a.top_count; ++j)
    if (a.top_tokens[j] != b.top_tokens[j] || !same_float(a.top_values[j], b.top_values[j])) return false;
  return true;
}

// Same tokens and statuses; logprobs within the rounding of a double sum in another order.
bool same_tokens(const SampleRowResult& a, const SampleRowResult& b) {
  auto close = [](float x, float y) {
    return x == y ||
           std::fabs(static_cast<double>(x) - y) <= 2e-7 * std::max(1.0, std::fabs(static_cast<double>(y)));
  };
  if (a.status != b.status || a.token != b.token || !close(a.logprob, b.logprob) || a.top_count != b.top_count)
    return false;
  for (int j = 0; j < a.top_count; ++j)
    if (a.top_tokens[j] != b.top_tokens[j] || !close(a.top_values[j], b.top_values[j])) return false;
  return true;
}

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

  // Rows of one width as one batched device tensor (row r starts r * width floats in:
  // odd widths give every 16-byte misalignment), each sampled with every parameter
  // set of the grid under every walk. Checks: the CPU op's status and token (the
  // device may only add kUndecided), logprobs within 2e-6, and the walks against v1.
  void check_walks(const std::vector<std::vector<float>>& host_rows, int32_t limit, const char* what) {
    const auto width = static_cast<int64_t>(host_rows.front().size());
    const auto b = static_cast<int64_t>(host_rows.size());
    std::vector<float> flat;
    for (const auto& r : host_rows) flat.insert(flat.end(), r.begin(), r.end());
    const Tensor batch = gpu_->to_device(Tensor::from_floats({b, width}, flat));
    std::vector<Tensor> dev_rows, cpu_rows;
    for (int64_t r = 0; r < b; ++r) {
      dev_rows.push_back(batch.select(0, r));
      cpu_rows.push_back(Tensor::from_floats({width}, host_rows[static_cast<size_t>(r)]));
    }
    int compared = 0;
    for (const ParamCase& pc : param_grid()) {
      std::vector<SampleRowParams> params;
      for (int64_t r = 0; r < b; ++r) {
        auto d = device_row_params(pc.p, 0x5EEDull + static_cast<uint64_t>(r), 40 + r, {}, limit);
        ASSERT_TRUE(d.has_value());
        params.push_back(*d);
      }
      std::vector<SampleRowResult> ref(static_cast<size_t>(b));
      cpu_->sample_rows(ref, cpu_rows, params);
      std::vector<std::vector<SampleRowResult>> dev;
      for (const char* walk : kWalks) {
        ScopedWalk scoped(walk);
        dev.emplace_back(static_cast<size_t>(b));
        gpu_->sample_rows(dev.back(), dev_rows, params);
      }
      for (size_t r = 0; r < static_cast<size_t>(b); ++r) {
        SCOPED_TRACE(std::string(what) + " " + pc.name + " width " + std::to_string(width) + " row " +
                     std::to_string(r));
        const SampleRowResult& v1 = dev[0][r];
        for (size_t w = 1; w < std::size(kWalks); ++w) {
          if (sums_in_another_order(kWalks[w])) {
            EXPECT_TRUE(same_tokens(dev[w][r], v1)) << kWalks[w] << " differs from v1";
          } else {
            EXPECT_TRUE(same_result(dev[w][r], v1)) << kWalks[w] << " differs from v1";
          }
        }
        ++compared;
        // Either side may leave a row within its margins undecided.
        if (v1.status == SampleRowStatus::kUndecided || ref[r].status == SampleRowStatus::kUndecided) continue;
        EXPECT_EQ(v1.status, ref[r].status);
        if (v1.status != SampleRowStatus::kOk || ref[r].status != SampleRowStatus::kOk) continue;
        EXPECT_EQ(v1.token, ref[r].token);
        if (params[r].logprob) {
          EXPECT_NEAR(v1.logprob, ref[r].logprob, 2e-6 * std::max(1.0f, std::fabs(ref[r].logprob)));
        }
        ASSERT_EQ(v1.top_count, ref[r].top_count);
        for (int j = 0; j < v1.top_count; ++j) {
          EXPECT_EQ(v1.top_tokens[j], ref[r].top_tokens[j]) << j;
          EXPECT_NEAR(v1.top_values[j], ref[r].top_values[j], 2e-6 * std::max(1.0f, std::fabs(ref[r].top_values[j])));
        }
      }
    }
    std::printf("[sampling] walks agree with v1: %-34s %d rows x parameter sets\n", what, compared);
    std::fflush(stdout);
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

// Prompt scoring (scored_token) on a chunk's worth of rows: the CPU op's scores, up to the
// order of the double sum.
TEST_F(CudaSampleRows, ScoredTokensMatchTheCpuOp) {
  for (const auto& [vocab, limit, per_kind] :
       {std::tuple<int64_t, int32_t, int>{kModelVocab, kModelTextVocab, 205}, {3001, 2900, 8}, {33, 0, 4}}) {
    const ScoredRows cases = scored_rows(vocab, limit, per_kind, 5);
    const auto b = static_cast<int64_t>(cases.rows.size());
    std::vector<float> flat;
    for (const auto& r : cases.rows) flat.insert(flat.end(), r.begin(), r.end());
    const Tensor batch = gpu_->to_device(Tensor::from_floats({b, vocab}, flat));
    std::vector<Tensor> dev_rows, cpu_rows;
    for (int64_t r = 0; r < b; ++r) {
      dev_rows.push_back(batch.select(0, r));
      cpu_rows.push_back(Tensor::from_floats({vocab}, cases.rows[static_cast<size_t>(r)]));
    }
    std::vector<SampleRowResult> dev(static_cast<size_t>(b)), ref(static_cast<size_t>(b));
    gpu_->sample_rows(dev, dev_rows, cases.params);
    cpu_->sample_rows(ref, cpu_rows, cases.params);
    for (size_t r = 0; r < static_cast<size_t>(b); ++r) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " row " + std::to_string(r));
      EXPECT_TRUE(same_tokens(dev[r], ref[r])) << dev[r].logprob << " vs " << ref[r].logprob;
      if (cases.params[r].rank) {
        EXPECT_EQ(dev[r].rank, ref[r].rank);  // a count: exact
      }
    }
  }
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

TEST_F(CudaSampleRows, WalksAgreeOnRandomRows) {
  // Widths below the thread count, not multiples of 4, and the model's; 4 rows each
  // (starts misaligned by 0, 4, 8, 12 bytes for odd widths).
  for (int64_t width : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{6}, int64_t{7},
                        int64_t{9}, int64_t{33}, int64_t{1027}, int64_t{4099}}) {
    std::vector<std::vector<float>> rows;
    for (int r = 0; r < 4; ++r)
      rows.push_back(make_row(width, kKinds[static_cast<size_t>(r) % std::size(kKinds)], 17u * static_cast<uint32_t>(width) + static_cast<uint32_t>(r)));
    check_walks(rows, 0, ("random width " + std::to_string(width)).c_str());
  }
  std::vector<std::vector<float>> model;
  for (RowKind kind : kKinds) model.push_back(make_row(kModelVocab + 1, kind, 99u));  // odd: misaligned rows
  check_walks(model, kModelTextVocab, "model width + 1, text limit");
}

TEST_F(CudaSampleRows, WalksAgreeOnEdgeRows) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Width 11 (rows start 0/4/8/12 bytes off a 16-byte boundary): the maximum tied
  // across a 4-element group (3 and 4, then 7 and 8), at the first and last element.
  std::vector<std::vector<float>> ties;
  for (int r = 0; r < 4; ++r) {
    std::vector<float> row(11, 0.25f);
    row[3] = row[4] = 2.0f;
    if (r == 1) row[7] = row[8] = 3.0f;
    if (r == 2) row[0] = row[10] = 3.0f;
    if (r == 3) row.assign(11, 1.0f);  // all tied
    ties.push_back(row);
  }
  check_walks(ties, 0, "ties across groups of 4");
  // NaN / +inf in the scalar head (first elements) and tail (last elements).
  std::vector<std::vector<float>> bad;
  for (int r = 0; r < 8; ++r) {
    std::vector<float> row(4099, 0.5f);
    const size_t at = r < 4 ? static_cast<size_t>(r) : row.size() - 1 - static_cast<size_t>(r - 4);
    row[at] = r % 2 == 0 ? nan : inf;
    bad.push_back(row);
  }
  check_walks(bad, 0, "NaN/+inf in head and tail");
  // NaN only beyond the vocabulary limit: ignored.
  std::vector<std::vector<float>> padded;
  for (int r = 0; r < 4; ++r) {
    std::vector<float> row = make_row(4099, RowKind::kNormal, 5u + static_cast<uint32_t>(r));
    row[4098] = nan;
    row[4097] = inf;
    padded.push_back(row);
  }
  check_walks(padded, 4097, "NaN/+inf beyond the limit");
  // Many equal values: more top-logprob candidates than the kernel ranks in shared
  // memory (the block-argmax loop), and fewer finite values than top_logprobs.
  std::vector<std::vector<float>> flat_rows;
  for (int r = 0; r < 4; ++r) {
    std::vector<float> row(3001, r < 2 ? 0.5f : -inf);
    if (r >= 2)
      for (int j = 0; j < 7; ++j) row[static_cast<size_t>(400 * j + r)] = static_cast<float>(j % 3);
    flat_rows.push_back(row);
  }
  check_walks(flat_rows, 0, "flat rows, few finite values");
}

// One call whose rows each take other passes (greedy, temperature, top_k, top_p,
// min_p, all of them, a NaN row, a fully masked row): the grid kernel runs the passes
// any row needs for every row, and each row must still give the CPU op's status and
// the host's token; then the same rows 96 times over (one call of 672 rows: too many
// for the grid, the one-block kernel takes it) must give the same results.
TEST_F(CudaSampleRows, GridCallsMixRowKinds) {
  const std::vector<ParamCase> grid = param_grid();
  std::vector<SamplingParams> kinds;
  for (const ParamCase& pc : grid)
    if (!pc.p.logprobs) kinds.push_back(pc.p);
  ASSERT_GE(kinds.size(), 7u);
  for (int copies : {1, 96}) {
    std::vector<std::vector<float>> host_rows;
    std::vector<SampleRowParams> params;
    std::vector<SamplingParams> used;
    uint32_t s = 7;
    for (int c = 0; c < copies; ++c)
      for (size_t k = 0; k < 7; ++k, ++s) {
        const SamplingParams& sp = kinds[(k * 3 + static_cast<size_t>(c)) % kinds.size()];
        std::vector<float> row = make_row(kModelVocab, kKinds[s % std::size(kKinds)], s * 7919u);
        if (k == 5) row[1234] = NAN;
        if (k == 6) std::fill(row.begin(), row.end(), -INFINITY);
        host_rows.push_back(std::move(row));
        auto d = device_row_params(sp, 0xC0FFEEull + s, 300 + s, {}, kModelTextVocab);
        ASSERT_TRUE(d.has_value());
        params.push_back(*d);
        used.push_back(sp);
      }
    const auto b = static_cast<int64_t>(host_rows.size());
    std::vector<float> flat;
    for (const auto& r : host_rows) flat.insert(flat.end(), r.begin(), r.end());
    const Tensor batch = gpu_->to_device(Tensor::from_floats({b, kModelVocab}, flat));
    std::vector<Tensor> dev_rows, cpu_rows;
    for (int64_t r = 0; r < b; ++r) {
      dev_rows.push_back(batch.select(0, r));
      cpu_rows.push_back(Tensor::from_floats({kModelVocab}, host_rows[static_cast<size_t>(r)]));
    }
    std::vector<SampleRowResult> dev(static_cast<size_t>(b)), ref(static_cast<size_t>(b));
    gpu_->sample_rows(dev, dev_rows, params);
    cpu_->sample_rows(ref, cpu_rows, params);
    int decided = 0;
    for (size_t r = 0; r < static_cast<size_t>(b); ++r) {
      SCOPED_TRACE("copies " + std::to_string(copies) + " row " + std::to_string(r));
      if (dev[r].status == SampleRowStatus::kUndecided || ref[r].status == SampleRowStatus::kUndecided) continue;
      EXPECT_EQ(dev[r].status, ref[r].status);
      if (dev[r].status != SampleRowStatus::kOk) continue;
      auto host = host_sample(host_rows[r], kModelTextVocab, used[r], params[r].seed, params[r].position);
      ASSERT_TRUE(host.has_value());
      EXPECT_EQ(dev[r].token, host->token);
      EXPECT_EQ(dev[r].token, ref[r].token);
      ++decided;
    }
    EXPECT_GE(decided, 5 * copies);  // every row but the NaN and the masked one
    std::printf("[sampling] mixed rows in one call: %lld rows, %d decided\n", static_cast<long long>(b), decided);
  }
}

// Device sampling (each walk: v1 = session 10's loads, strided = one block a row, vec4,
// cluster = a cluster of blocks a row, sized by B, grid = the default: the grid kernel
// where it takes the call, else strided) vs download + host sampling, per step, at
// B = 1, 4, 16 and 64. Wall time of a whole call (upload, kernel, download, sync); the
// "call overhead" line is that of a 33-token greedy row. TF_SAMPLING_BENCH_QUICK=1: 2
// timed calls per walk, no host path (for ncu).
TEST_F(CudaSampleRows, Benchmark) {
  ThreadPool pool(2);  // as the engine's sample_pool
  const bool quick = std::getenv("TF_SAMPLING_BENCH_QUICK") != nullptr;
  struct Mode {
    const char* name;
    float temperature, top_p;
    int top_k, top_logprobs;  // top_logprobs < 0: no logprobs
  };
  const Mode modes[] = {{"greedy", 0.0f, 1.0f, 0, -1},          {"greedy+lp20", 0.0f, 1.0f, 0, 20},
                        {"t0.8", 0.8f, 1.0f, 0, -1},            {"t0.8+top_p0.95", 0.8f, 0.95f, 0, -1},
                        {"t0.8+p0.95+k40", 0.8f, 0.95f, 40, -1}, {"t.8+p.95+k40+lp20", 0.8f, 0.95f, 40, 20}};
  {
    const Tensor tiny = gpu_->to_device(Tensor::from_floats({33}, make_row(33, RowKind::kNormal, 3)));
    std::vector<Tensor> rows{tiny};
    std::vector<SampleRowParams> params(1);
    params[0].greedy = true;
    std::vector<SampleRowResult> out(1);
    gpu_->sample_rows(out, rows, params);
    const int iters = quick ? 2 : 200;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) gpu_->sample_rows(out, rows, params);
    std::printf("[sampling-bench] call overhead (33-token greedy row) %.1f us/call\n",
                std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
  }
  for (const Mode& mode : modes) {
    SamplingParams p;
    p.temperature = mode.temperature;
    p.top_p = mode.top_p;
    p.top_k = mode.top_k;
    if (mode.top_logprobs >= 0) {
      p.logprobs = true;
      p.top_logprobs = mode.top_logprobs;
    }
    for (int64_t b : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{64}}) {
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
      const char* walks[] = {"v1", "strided", "vec4", "cluster", "grid"};
      double dev_us[std::size(walks)] = {};
      std::vector<SampleRowResult> first(static_cast<size_t>(b));
      for (size_t w = 0; w < std::size(walks); ++w) {
        ScopedWalk scoped(walks[w]);
        std::vector<SampleRowResult> out(static_cast<size_t>(b));
        gpu_->sample_rows(out, rows, params);  // warm-up
        if (w == 0) first = out;
        for (size_t r = 0; r < out.size(); ++r) EXPECT_TRUE(same_tokens(out[r], first[r])) << walks[w] << " row " << r;
        const int iters = quick ? 2 : (b == 1 ? 200 : 50);
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) gpu_->sample_rows(out, rows, params);
        dev_us[w] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
      }
      double down_us = 0, host_us = 0;
      std::vector<SequenceSampler*> ptrs;
      for (auto& s : seqs) ptrs.push_back(s.get());
      const int host_iters = quick ? 0 : (b == 1 ? 50 : 5);
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
      down_us /= std::max(1, host_iters);
      host_us /= std::max(1, host_iters);
      std::printf("[sampling-bench] %-18s B=%-3lld device v1 %8.1f | strided %8.1f | vec4 %8.1f | cluster %8.1f "
                  "| grid %8.1f us/step | download %9.1f us + host %9.1f us = %9.1f us/step\n",
                  mode.name, static_cast<long long>(b), dev_us[0], dev_us[1], dev_us[2], dev_us[3], dev_us[4], down_us,
                  host_us, down_us + host_us);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace tf
