// GLM-5.3-Flash on the CUDA backend (label gpu; built only with CUDA and run on the
// GPU machine by scripts/device/gpu_tests.sh): the one model definition, loaded on
// make_cuda_ops(), against the CPU backend and transformers 5.17's fixtures
// (tests/data/model/*/reference.safetensors).
//
// Tolerance: both backends hold f32 weights and, for the parity checks, an f32
// latent cache; the GPU only sums in other orders (cuBLAS above 64 rows, warp
// reductions), so logits must agree to max|Δ|/max|ref| ≤ 1e-4 (kTol, the bound the
// CPU model tests hold against transformers). "[cuda-parity]" lines print the
// measured deviations (H200, 2026-11-29: prefill vs CPU ≤ 9.3e-7, vs transformers
// ≤ 1.0e-6; decode ≤ 9.3e-7; chunked vs one-shot ≤ 7.7e-7). Greedy tokens must
// equal the CPU backend's exactly (32 tokens, also equal to transformers' generate).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "cuda_test_ops.h"
#include "glm5_fixture.h"
#include "kernels/cuda/cuda_ops.h"

namespace tf::test {
namespace {

constexpr double kTol = 1e-4;

Glm5Options cache_opts(DType latent, TopkTies ties) {
  Glm5Options c;
  c.latent_dtype = latent;
  c.page_size = 16;
  c.num_pages = 256;
  c.indexer_ties = ties;
  return c;
}
// transformers' tie order, exact cache: the reference-parity configuration.
Glm5Options exact_cache() { return cache_opts(DType::kF32, TopkTies::kTorchCpu); }

std::unique_ptr<Glm5Model> load_on(const Fixture& f, Ops& ops, Communicator& comm, const Glm5Options& o) {
  auto ws = open_weights(f);
  if (!ws) return nullptr;
  auto m = Glm5Model::load(f.config, *ws, ops, comm, o);
  EXPECT_TRUE(m.has_value()) << f.name << ": " << m.status().to_string();
  return m.has_value() ? std::move(*m) : nullptr;
}

int32_t argmax(const Tensor& row) {
  const float* p = row.data<float>();
  return static_cast<int32_t>(std::max_element(p, p + row.numel()) - p);
}

// One prefill of `ids` (every position's logits), on a fresh sequence.
Tensor prefill(Glm5Model& m, const std::vector<int32_t>& ids) {
  auto seq = m.new_sequence();
  StepEntry e{seq.get(), ids, true};
  auto r = m.step({&e, 1});
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  return r.has_value() ? (*r)[0].logits : Tensor();
}

// Greedy decoding: prompt, then `steps` argmax tokens, one step each.
std::vector<int32_t> greedy(Glm5Model& m, const std::vector<int32_t>& prompt, int steps,
                            std::vector<Tensor>* logits = nullptr) {
  auto seq = m.new_sequence();
  StepEntry e{seq.get(), prompt, false};
  auto r = m.step({&e, 1});
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  if (!r) return {};
  Tensor last = (*r)[0].logits;
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    const int32_t tok = argmax(last);
    out.push_back(tok);
    StepEntry d{seq.get(), std::span<const int32_t>(&tok, 1), false};
    auto rd = m.step({&d, 1});
    EXPECT_TRUE(rd.has_value()) << rd.status().to_string();
    if (!rd) return out;
    last = (*rd)[0].logits;
    if (logits) logits->push_back(last);
  }
  return out;
}

TEST(Glm5Cuda, BackendIsCuda) {
  ASSERT_NE(gpu_ops(), nullptr);
  EXPECT_STREQ(gpu_ops()->name(), "cuda");
  EXPECT_GE(fixture_dirs().size(), 2u);
}

TEST(Glm5Cuda, PrefillMatchesCpuAndTransformers) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    auto gpu = load_on(f, *gpu_ops(), *comm, exact_cache());
    auto cpu = load_on(f, cpu_ops(), *comm, exact_cache());
    ASSERT_TRUE(gpu && cpu) << f.name;
    const Tensor g = prefill(*gpu, f.prompt_ids), c = prefill(*cpu, f.prompt_ids);
    ASSERT_FALSE(g.is_null() || c.is_null()) << f.name;
    EXPECT_TRUE(g.device().is_cpu());
    const double vs_cpu = rel_err(g, c), vs_ref = rel_err(g, f.prompt_logits);
    std::printf("[cuda-parity] %s prefill %zu tokens (all positions): vs cpu %.3g, vs transformers %.3g\n",
                f.name.c_str(), f.prompt_ids.size(), vs_cpu, vs_ref);
    EXPECT_LE(vs_cpu, kTol) << f.name;
    EXPECT_LE(vs_ref, kTol) << f.name;
    const Tensor gs = prefill(*gpu, f.short_ids);
    const double short_ref = rel_err(gs, f.short_logits);
    std::printf("[cuda-parity] %s short prompt %zu tokens: vs transformers %.3g\n", f.name.c_str(),
                f.short_ids.size(), short_ref);
    EXPECT_LE(short_ref, kTol) << f.name;
  }
}

TEST(Glm5Cuda, DecodeStepsMatchTransformers) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    auto gpu = load_on(f, *gpu_ops(), *comm, exact_cache());
    ASSERT_TRUE(gpu) << f.name;
    auto seq = gpu->new_sequence();
    StepEntry e{seq.get(), f.prompt_ids, false};
    ASSERT_TRUE(gpu->step({&e, 1}).has_value());
    double worst = 0;
    // Teacher-forced: the reference's tokens, its logits after each.
    for (size_t i = 0; i < f.greedy_ids.size(); ++i) {
      const int32_t tok = f.greedy_ids[i];
      StepEntry d{seq.get(), std::span<const int32_t>(&tok, 1), false};
      auto r = gpu->step({&d, 1});
      ASSERT_TRUE(r.has_value()) << r.status().to_string();
      const double err = rel_err((*r)[0].logits, rows_of(f.greedy_step_logits, i, i + 1));
      worst = std::max(worst, err);
      EXPECT_LE(err, kTol) << f.name << " decode step " << i;
    }
    std::printf("[cuda-parity] %s %zu decode steps vs transformers: worst %.3g\n", f.name.c_str(),
                f.greedy_ids.size(), worst);
  }
}

TEST(Glm5Cuda, GreedyContinuationEqualsCpu) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    auto gpu = load_on(f, *gpu_ops(), *comm, exact_cache());
    auto cpu = load_on(f, cpu_ops(), *comm, exact_cache());
    ASSERT_TRUE(gpu && cpu) << f.name;
    const int steps = f.generate_ids.empty() ? 16 : static_cast<int>(f.generate_ids.size());
    std::vector<Tensor> gl, cl;
    const std::vector<int32_t> g = greedy(*gpu, f.prompt_ids, steps, &gl);
    const std::vector<int32_t> c = greedy(*cpu, f.prompt_ids, steps, &cl);
    EXPECT_EQ(g, c) << f.name;
    double worst = 0;
    for (size_t i = 0; i < std::min(gl.size(), cl.size()); ++i) worst = std::max(worst, rel_err(gl[i], cl[i]));
    EXPECT_LE(worst, kTol) << f.name;
    int same_as_generate = 0;
    for (size_t i = 0; i < std::min(g.size(), f.generate_ids.size()) && g[i] == f.generate_ids[i]; ++i)
      ++same_as_generate;
    std::printf("[cuda-parity] %s greedy %d tokens: equal to cpu %s, decode logits vs cpu worst %.3g, "
                "first %d equal to transformers generate (%zu there)\n",
                f.name.c_str(), steps, g == c ? "yes" : "NO", worst, same_as_generate, f.generate_ids.size());
  }
}

TEST(Glm5Cuda, ChunkedPrefillEqualsOneShot) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    // Lower-index ties: the indexer's choice does not depend on the chunking.
    auto gpu = load_on(f, *gpu_ops(), *comm, cache_opts(DType::kF32, TopkTies::kLowerIndex));
    ASSERT_TRUE(gpu) << f.name;
    const Tensor one = prefill(*gpu, f.prompt_ids);
    ASSERT_FALSE(one.is_null());
    const int64_t n = static_cast<int64_t>(f.prompt_ids.size()), vocab = one.size(1);
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      auto seq = gpu->new_sequence();
      Tensor all = Tensor::empty({n, vocab}, DType::kF32);
      for (int64_t p = 0; p < n; p += chunk) {
        const int64_t len = std::min(chunk, n - p);
        StepEntry e{seq.get(), std::span<const int32_t>(f.prompt_ids.data() + p, len), true};
        auto r = gpu->step({&e, 1});
        ASSERT_TRUE(r.has_value()) << r.status().to_string();
        std::copy_n((*r)[0].logits.data<float>(), len * vocab, all.data<float>() + p * vocab);
      }
      const double err = rel_err(all, one);
      std::printf("[cuda-parity] %s chunked prefill (chunk %lld) vs one-shot: %.3g\n", f.name.c_str(),
                  static_cast<long long>(chunk), err);
      EXPECT_LE(err, kTol) << f.name << " chunk " << chunk;
    }
  }
}

// A sequence holding the fixture prompt's first `at` tokens goes on: the rest of the prompt
// (every row's logits), then six decode steps; all those logits in order.
std::vector<float> prefill_rest_then_decode(Glm5Model& gpu, const Fixture& f, Glm5Sequence* seq, int64_t at) {
  const int64_t n = static_cast<int64_t>(f.prompt_ids.size());
  std::vector<float> out;
  StepEntry rest{seq, std::span<const int32_t>(f.prompt_ids.data() + at, n - at), true};
  auto r = gpu.step({&rest, 1});
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  if (!r) return out;
  out = (*r)[0].logits.to_vector();
  for (int i = 0; i < 6; ++i) {
    const int32_t tok = f.greedy_ids[static_cast<size_t>(i) % f.greedy_ids.size()];
    StepEntry d{seq, std::span<const int32_t>(&tok, 1), false};
    auto s = gpu.step({&d, 1});
    EXPECT_TRUE(s.has_value()) << s.status().to_string();
    if (!s) return out;
    const std::vector<float> v = (*s)[0].logits.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Prompt reuse on the GPU: a fork after 64 prompt tokens (FP8 cache, decode steps through
// the captured graphs) gives the source's logits bit for bit, prefill and decode, also once
// the source is gone (its shared pages stay with the fork).
TEST(Glm5Cuda, ForkGoesOnBitForBit) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    Glm5Options o = cache_opts(DType::kF8E4M3, TopkTies::kLowerIndex);
    o.graphs = Glm5Options::Graphs::kOn;
    auto gpu = load_on(f, *gpu_ops(), *comm, o);
    ASSERT_TRUE(gpu) << f.name;
    const int64_t n = static_cast<int64_t>(f.prompt_ids.size()), at = 64;
    ASSERT_GT(n, at + 1);
    auto source = gpu->new_sequence();
    StepEntry head{source.get(), std::span<const int32_t>(f.prompt_ids.data(), at), false};
    ASSERT_TRUE(gpu->step({&head, 1}).has_value());
    auto fork = gpu->fork(*source);
    ASSERT_TRUE(fork.has_value()) << fork.status().to_string();
    auto go_on = [&](Glm5Sequence* seq) { return prefill_rest_then_decode(*gpu, f, seq, at); };
    const std::vector<float> from_source = go_on(source.get());
    source.reset();
    const std::vector<float> from_fork = go_on(fork->get());
    ASSERT_EQ(from_fork.size(), from_source.size());
    EXPECT_EQ(std::memcmp(from_fork.data(), from_source.data(), from_fork.size() * sizeof(float)), 0) << f.name;
    std::printf("[cuda-parity] %s fork at %lld: %zu logits equal to the source's: %s\n", f.name.c_str(),
                static_cast<long long>(at), from_fork.size(),
                std::memcmp(from_fork.data(), from_source.data(), from_fork.size() * sizeof(float)) == 0 ? "yes" : "NO");
  }
}

// Prompt states on disk (Glm5Model::snapshot / restore): a sequence restored from the
// host copy of another's state after 64 prompt tokens (FP8 cache, graph decode steps)
// gives the source's logits bit for bit, and its own snapshot equals the source's.
TEST(Glm5Cuda, RestoredSnapshotGoesOnBitForBit) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    Glm5Options o = cache_opts(DType::kF8E4M3, TopkTies::kLowerIndex);
    o.graphs = Glm5Options::Graphs::kOn;
    auto gpu = load_on(f, *gpu_ops(), *comm, o);
    ASSERT_TRUE(gpu) << f.name;
    const int64_t n = static_cast<int64_t>(f.prompt_ids.size()), at = 64;
    ASSERT_GT(n, at + 1);
    auto source = gpu->new_sequence();
    StepEntry head{source.get(), std::span<const int32_t>(f.prompt_ids.data(), at), false};
    ASSERT_TRUE(gpu->step({&head, 1}).has_value());
    auto snap = gpu->snapshot(*source);
    ASSERT_TRUE(snap.has_value()) << snap.status().to_string();
    std::map<std::string, Tensor> by_name;
    for (const auto& [name, t] : snap->tensors) by_name.emplace(name, t);
    auto restored = gpu->restore(snap->length, snap->mtp_length, by_name);
    ASSERT_TRUE(restored.has_value()) << restored.status().to_string();
    auto again = gpu->snapshot(**restored);
    ASSERT_TRUE(again.has_value());
    ASSERT_EQ(again->tensors.size(), snap->tensors.size());
    for (size_t i = 0; i < snap->tensors.size(); ++i) {
      const Tensor& a = again->tensors[i].second;
      const Tensor& b = snap->tensors[i].second;
      EXPECT_TRUE(a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0)
          << snap->tensors[i].first;
    }
    auto go_on = [&](Glm5Sequence* seq) { return prefill_rest_then_decode(*gpu, f, seq, at); };
    const std::vector<float> from_source = go_on(source.get());
    source.reset();
    const std::vector<float> from_restored = go_on(restored->get());
    ASSERT_EQ(from_restored.size(), from_source.size());
    const bool equal =
        std::memcmp(from_restored.data(), from_source.data(), from_restored.size() * sizeof(float)) == 0;
    EXPECT_TRUE(equal) << f.name;
    std::printf(
        "[cuda-parity] %s restored at %lld (%zu bytes of state): %zu logits equal to the source's: %s\n",
        f.name.c_str(), static_cast<long long>(at), snap->bytes(), from_restored.size(),
        equal ? "yes" : "NO");
  }
}

// BF16 and FP8 latent caches: the same storage on both backends, so only rounding
// flips of near-midpoint latents separate them. Bound 1e-3 (measured on an H200:
// bf16 ≤ 2.1e-5, fp8 ≤ 9.1e-7; a quantization error itself is 4e-4..2e-2).
TEST(Glm5Cuda, QuantizedLatentCacheMatchesCpu) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    for (auto [dtype, tol] : {std::pair{DType::kBF16, 1e-3}, {DType::kF8E4M3, 1e-3}}) {
      auto gpu = load_on(f, *gpu_ops(), *comm, cache_opts(dtype, TopkTies::kLowerIndex));
      auto cpu = load_on(f, cpu_ops(), *comm, cache_opts(dtype, TopkTies::kLowerIndex));
      ASSERT_TRUE(gpu && cpu) << f.name;
      std::vector<Tensor> gl, cl;
      greedy(*gpu, f.prompt_ids, 4, &gl);
      greedy(*cpu, f.prompt_ids, 4, &cl);
      ASSERT_EQ(gl.size(), cl.size());
      double worst = rel_err(prefill(*gpu, f.prompt_ids), prefill(*cpu, f.prompt_ids));
      for (size_t i = 0; i < gl.size(); ++i) worst = std::max(worst, rel_err(gl[i], cl[i]));
      std::printf("[cuda-parity] %s %s latent cache: cuda vs cpu worst %.3g\n", f.name.c_str(), dtype_name(dtype),
                  worst);
      EXPECT_LE(worst, tol) << f.name << " " << dtype_name(dtype);
    }
  }
}

// DENSE=q4 / fp8 with LM_HEAD likewise (the serving formats): the same quantized matrices on
// both backends, the GPU's GEMVs (x in two bf16 terms, <= 2^-17 relative per element)
// against the CPU's f32 products. A short prompt (at most 64 rows: the exact kernels), then
// decode steps fed the fixture's greedy tokens on both, so nothing diverges. Bound 1e-3.
TEST(Glm5Cuda, QuantizedMatricesMatchCpu) {
  ASSERT_NE(gpu_ops(), nullptr);
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    ASSERT_LE(f.short_ids.size(), 64u) << f.name;
    auto comm = make_single_rank_communicator();
    for (MatrixFormat fmt : {MatrixFormat::kQ4, MatrixFormat::kFp8Block}) {
      Glm5Options o = exact_cache();
      o.dense_quant = fmt;
      o.head_quant = fmt;
      auto gpu = load_on(f, *gpu_ops(), *comm, o);
      auto cpu = load_on(f, cpu_ops(), *comm, o);
      ASSERT_TRUE(gpu && cpu) << f.name;
      auto gs = gpu->new_sequence(), cs = cpu->new_sequence();
      StepEntry ge{gs.get(), f.short_ids, false}, ce{cs.get(), f.short_ids, false};
      auto gr = gpu->step({&ge, 1});
      auto cr = cpu->step({&ce, 1});
      ASSERT_TRUE(gr.has_value() && cr.has_value()) << f.name;
      double worst = rel_err((*gr)[0].logits, (*cr)[0].logits);
      for (size_t i = 0; i < f.greedy_ids.size() && i < 8; ++i) {
        const int32_t tok = f.greedy_ids[i];
        StepEntry gd{gs.get(), std::span<const int32_t>(&tok, 1), false};
        StepEntry cd{cs.get(), std::span<const int32_t>(&tok, 1), false};
        auto g = gpu->step({&gd, 1});
        auto c = cpu->step({&cd, 1});
        ASSERT_TRUE(g.has_value() && c.has_value()) << f.name;
        worst = std::max(worst, rel_err((*g)[0].logits, (*c)[0].logits));
      }
      std::printf("[cuda-parity] %s DENSE=%s LM_HEAD=%s: cuda vs cpu worst %.3g (short prefill + 8 decode steps)\n",
                  f.name.c_str(), matrix_format_name(fmt), matrix_format_name(fmt), worst);
      EXPECT_LE(worst, 1e-3) << f.name << " " << matrix_format_name(fmt);
    }
  }
}

// Two sequences in one step equal each run alone (decode rows: the own GEMM kernel,
// whose per-row arithmetic does not depend on the batch).
TEST(Glm5Cuda, BatchedDecodeEqualsAlone) {
  ASSERT_NE(gpu_ops(), nullptr);
  Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  auto gpu = load_on(f, *gpu_ops(), *comm, cache_opts(DType::kF32, TopkTies::kLowerIndex));
  ASSERT_TRUE(gpu);
  const std::vector<int32_t> a(f.prompt_ids.begin(), f.prompt_ids.begin() + 20);
  const std::vector<int32_t> b(f.prompt_ids.begin() + 5, f.prompt_ids.begin() + 37);
  auto sa = gpu->new_sequence(), sb = gpu->new_sequence(), solo_a = gpu->new_sequence(),
       solo_b = gpu->new_sequence();
  for (auto [s, ids] : {std::pair{sa.get(), &a}, {sb.get(), &b}, {solo_a.get(), &a}, {solo_b.get(), &b}}) {
    StepEntry e{s, *ids, false};
    ASSERT_TRUE(gpu->step({&e, 1}).has_value());
  }
  const int32_t ta = 3, tb = 11;
  StepEntry both[2] = {{sa.get(), std::span<const int32_t>(&ta, 1), false},
                       {sb.get(), std::span<const int32_t>(&tb, 1), false}};
  auto rb = gpu->step(both);
  StepEntry ea{solo_a.get(), std::span<const int32_t>(&ta, 1), false};
  StepEntry eb{solo_b.get(), std::span<const int32_t>(&tb, 1), false};
  auto ra = gpu->step({&ea, 1}), rbb = gpu->step({&eb, 1});
  ASSERT_TRUE(rb.has_value() && ra.has_value() && rbb.has_value());
  EXPECT_EQ(rel_err((*rb)[0].logits, (*ra)[0].logits), 0.0);
  EXPECT_EQ(rel_err((*rb)[1].logits, (*rbb)[0].logits), 0.0);
}

// Bad input still comes back as a Status on the GPU (the token check runs on the host).
TEST(Glm5Cuda, BadTokenIsAnError) {
  ASSERT_NE(gpu_ops(), nullptr);
  Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  auto gpu = load_on(f, *gpu_ops(), *comm, exact_cache());
  ASSERT_TRUE(gpu);
  auto seq = gpu->new_sequence();
  const int32_t bad = static_cast<int32_t>(f.config.text.vocab_size);
  StepEntry e{seq.get(), std::span<const int32_t>(&bad, 1), false};
  auto r = gpu->step({&e, 1});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(seq->length(), 0);
}

// Informative: the eager decode step time on the tiny fixtures (not a benchmark).
TEST(Glm5Cuda, DecodeStepTiming) {
  ASSERT_NE(gpu_ops(), nullptr);
  Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  auto gpu = load_on(f, *gpu_ops(), *comm, cache_opts(DType::kBF16, TopkTies::kLowerIndex));
  ASSERT_TRUE(gpu);
  greedy(*gpu, f.prompt_ids, 4);  // warm-up (allocator, cuBLAS)
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> toks = greedy(*gpu, f.prompt_ids, 32);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(toks.size(), 32u);
  std::printf("[cuda-timing] %s: prefill %zu + 32 decode steps in %.1f ms (%.2f ms/step incl. prefill)\n",
              f.name.c_str(), f.prompt_ids.size(), s * 1e3, s * 1e3 / 33);
}

}  // namespace
}  // namespace tf::test
