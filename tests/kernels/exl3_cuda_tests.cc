// EXL3 on CUDA against the CPU reference and exllamav3's ground truth (GPU machine).
//   - W_hat decode: bit for bit equal to the CPU decoder for every codebook and
//     K = 1..8 (random trellis words, awkward shapes), and to exllamav3's own decode
//     (the FNV-1a hash of the whole reference W_hat in tests/data/exl3, first rows byte
//     for byte);
//   - exl3_matmul (GEMV, passes of 8 rows): within 1e-4 (relative to the largest
//     output) of the CPU layer for every K and codebook, narrower inputs/outputs,
//     bias, a row-strided output; rows bit-identical alone or in a batch; and the
//     float64 reference y of the fixture within 1e-4 (the CPU reaches 2e-6; fp16 hi/lo
//     activations and tensor-core f32 accumulation add a little);
//   - moe_experts_exl3 (grouped on the device; prefill also through W_hat + cuBLAS): CPU
//     backend parity and row independence.
// "[exl3] ..." lines print the largest errors seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/api/exl3_decode.h"
#include "kernels/cpu/exl3_linear.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/exl3_cuda.h"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/exl3_moe_prefill.h"
#include "model/exl3_synthetic.h"
#include "model/safetensors.h"

namespace tf {
namespace {

// The W_hat + cuBLAS prefill ran (grouped, or one GEMM per expert where cuBLAS refuses the
// grouped call), not a fallback to the tiles.
bool is_cublas_path(const std::string& path) { return path == "cublas-grouped" || path == "cublas-per-expert"; }


constexpr Exl3Codebook kCodebooks[] = {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1};

Ops& gpu() {
  static std::unique_ptr<Ops> ops = [] {
    auto o = make_cuda_ops(0);
    if (!o.has_value()) throw StatusError(o.status());
    return std::move(*o);
  }();
  return *ops;
}

Ops& cpu_ops() {
  static std::unique_ptr<Ops> ops = make_cpu_ops();
  return *ops;
}

// The fixture: TF_TEST_DATA_DIR from the environment wins (binaries packed for the GPU machine).
const SafetensorsFile& fixture() {
  static std::unique_ptr<SafetensorsFile> file = [] {
    const char* env = std::getenv("TF_TEST_DATA_DIR");
    const std::string root = env && *env ? env : TF_TEST_DATA_DIR;
    auto f = SafetensorsFile::open(root + "/exl3/exl3_cases.safetensors");
    if (!f.has_value()) throw StatusError(f.status());
    return std::move(*f);
  }();
  return *file;
}

Tensor fixture_tensor(const std::string& name) {
  auto t = fixture().tensor(name);
  if (!t.has_value()) throw StatusError(t.status());
  return *t;
}

std::string fnv1a64_hex(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Exl3Weight upload(const Exl3Weight& w) {
  Exl3Weight d = w;
  d.trellis = gpu().to_device(w.trellis);
  d.suh = gpu().to_device(w.suh);
  d.svh = gpu().to_device(w.svh);
  if (!w.bias.is_null()) d.bias = gpu().to_device(w.bias);
  return d;
}

Tensor randn(const Shape& shape, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

double rel_err(const Tensor& ref, const Tensor& got) {
  const std::vector<float> a = ref.to_vector(), b = got.to_vector();
  double worst = 0, scale = 1e-30;
  for (float x : a) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / scale;
}

Exl3Weight synthetic(int64_t k, int64_t n, int bits, Exl3Codebook cb, uint64_t salt, bool bias = false) {
  Exl3SyntheticOptions o;
  o.bits = bits;
  o.codebook = cb;
  o.seed = 1234;
  o.bias = bias;
  return make_synthetic_exl3_linear(k, n, o, salt);
}

// ---- decode ---------------------------------------------------------------------

TEST(Exl3CudaDecode, MatchesExllamav3ReferenceCases) {
  const auto& meta = fixture().metadata();
  auto it = meta.find("meta");
  ASSERT_NE(it, meta.end());
  const nlohmann::json cases = nlohmann::json::parse(it->second).at("cases");
  int checked = 0;
  for (const auto& c : cases) {
    const std::string key = c.at("key").get<std::string>();
    Exl3Weight w;
    w.trellis = fixture_tensor(key + ".trellis");
    w.suh = fixture_tensor(key + ".suh");
    w.svh = fixture_tensor(key + ".svh");
    w.bits = c.at("K").get<int>();
    w.codebook = *exl3_codebook_from_name(c.at("codebook").get<std::string>());
    const Tensor got = gpu().to_host(cuda_exl3_decode_w_hat(gpu(), upload(w)));
    const Tensor cpu = exl3_decode_w_hat(w, key);
    ASSERT_EQ(got.shape(), cpu.shape()) << key;
    EXPECT_EQ(std::memcmp(got.raw(), cpu.raw(), cpu.nbytes()), 0) << key << ": GPU W_hat differs from the CPU's";
    EXPECT_EQ(fnv1a64_hex(got.raw(), got.nbytes()), c.at("w_hat_fnv1a64").get<std::string>())
        << key << ": GPU W_hat differs from exllamav3's";
    const Tensor rows = fixture_tensor(key + ".w_hat_rows16");
    EXPECT_EQ(std::memcmp(got.raw(), rows.raw(), rows.nbytes()), 0) << key << ": first 16 rows";
    ++checked;
  }
  EXPECT_EQ(checked, 27);
  std::printf("[exl3] decode: %d exllamav3 reference cases bit-exact on the GPU\n", checked);
}

TEST(Exl3CudaDecode, RandomTrellisEveryBitWidthAndCodebook) {
  int checked = 0;
  for (int bits = 1; bits <= 8; ++bits)
    for (Exl3Codebook cb : kCodebooks) {
      const Exl3Weight w = synthetic(384, 640, bits, cb, 100 + bits);
      const Tensor got = gpu().to_host(cuda_exl3_decode_w_hat(gpu(), upload(w)));
      const Tensor cpu = exl3_decode_w_hat(w);
      ASSERT_EQ(got.shape(), cpu.shape());
      EXPECT_EQ(std::memcmp(got.raw(), cpu.raw(), cpu.nbytes()), 0)
          << "K=" << bits << " " << exl3_codebook_name(cb);
      ++checked;
    }
  std::printf("[exl3] decode: %d random 384x640 weights (K 1-8 x 3 codebooks) GPU == CPU bit for bit\n", checked);
}

// ---- GEMV -------------------------------------------------------------------------

TEST(Exl3CudaGemv, MatchesCpuEveryBitWidthAndCodebook) {
  double worst = 0;
  for (int bits = 1; bits <= 8; ++bits)
    for (Exl3Codebook cb : kCodebooks) {
      const bool bias = bits % 2 == 1;
      const Exl3Weight w = synthetic(512, 384, bits, cb, 200 + bits, bias);
      const Exl3Weight dw = upload(w);
      for (int64_t rows : {1, 3, 8, 13}) {
        // Narrower than the padded dims: zero-extended input, dropped output columns.
        const int64_t k_in = bits == 3 ? 500 : 512, n_out = bits == 5 ? 300 : 384;
        const Tensor x = randn({rows, k_in}, static_cast<uint32_t>(bits * 100 + rows));
        Tensor want = Tensor::empty({rows, n_out}, DType::kF32);
        cpu::exl3_matmul(want, x, w);
        Tensor out = gpu().empty({rows, n_out});
        gpu().exl3_matmul(out, gpu().to_device(x), dw);
        const double e = rel_err(want, gpu().to_host(out));
        worst = std::max(worst, e);
        EXPECT_LT(e, 1e-4) << "K=" << bits << " " << exl3_codebook_name(cb) << " rows=" << rows;
      }
    }
  std::printf("[exl3] gemv vs CPU (K 1-8 x 3 codebooks, rows 1/3/8/13): max rel err %.3g\n", worst);
}

TEST(Exl3CudaGemv, RowsAreIndependentOfTheBatch) {
  const Exl3Weight dw = upload(synthetic(1024, 512, 4, Exl3Codebook::kMcg, 7));
  const int64_t rows = 11;
  const Tensor x = randn({rows, 1024}, 5);
  const Tensor xd = gpu().to_device(x);
  Tensor all = gpu().empty({rows, 512});
  gpu().exl3_matmul(all, xd, dw);
  const Tensor all_h = gpu().to_host(all);
  for (int64_t r = 0; r < rows; ++r) {
    Tensor one = gpu().empty({1, 512});
    gpu().exl3_matmul(one, xd.slice(0, r, r + 1), dw);
    const Tensor one_h = gpu().to_host(one);
    EXPECT_EQ(std::memcmp(one_h.raw(), all_h.data<float>() + r * 512, 512 * 4), 0) << "row " << r;
  }
}

// The fused one-launch kernel (<= 8 rows) and the three-launch path sum the same
// partials in the same order: equal bits, for every K, with and without PDL, at
// shapes where the k-splits are uneven or some are empty.
TEST(Exl3CudaGemv, FusedEqualsLegacyBitForBit) {
  struct Case {
    int64_t k, n, k_in;
    int bits;
    Exl3Codebook cb;
  };
  const Case cases[] = {{4096, 2048, 4096, 4, Exl3Codebook::kMcg}, {2048, 4096, 2000, 4, Exl3Codebook::kMcg},
                        {1152, 256, 1152, 3, Exl3Codebook::kMul1}, {384, 640, 384, 8, Exl3Codebook::kMcg},
                        {128, 128, 100, 2, Exl3Codebook::k3Inst},   {2304, 384, 2304, 5, Exl3Codebook::kMcg},
                        {1024, 512, 1024, 6, Exl3Codebook::kMul1},  {512, 256, 512, 1, Exl3Codebook::kMcg},
                        {640, 128, 640, 7, Exl3Codebook::k3Inst}};
  int checked = 0;
  for (const Case& c : cases) {
    const Exl3Weight dw = upload(synthetic(c.k, c.n, c.bits, c.cb, 300 + c.bits, c.bits % 2 == 1));
    for (int64_t rows : {1, 2, 7, 8}) {
      const Tensor xd = gpu().to_device(randn({rows, c.k_in}, static_cast<uint32_t>(rows * 31 + c.bits)));
      Tensor legacy = gpu().empty({rows, c.n});
      cuda::exl3_set_gemv_variant(cuda::kExl3GemvLegacy);
      gpu().exl3_matmul(legacy, xd, dw);
      const Tensor want = gpu().to_host(legacy);
      for (bool pdl : {true, false}) {
        cuda::exl3_set_gemv_variant(cuda::kExl3GemvFused);
        cuda::exl3_set_pdl(pdl ? 1 : 0);
        Tensor fused = gpu().empty({rows, c.n});
        gpu().exl3_matmul(fused, xd, dw);
        const Tensor got = gpu().to_host(fused);
        EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0)
            << c.k << "x" << c.n << " K=" << c.bits << " " << exl3_codebook_name(c.cb) << " rows=" << rows
            << " pdl=" << pdl << ": rel err " << rel_err(want, got);
        ++checked;
      }
    }
  }
  cuda::exl3_set_gemv_variant(cuda::kExl3GemvAuto);
  cuda::exl3_set_pdl(-1);
  EXPECT_EQ(cuda::exl3_fused_gemv_refusals(), 0) << "the fused GEMV did not run (launch refused)";
  std::printf("[exl3] gemv fused == legacy bit for bit: %d cases (K 1-8, rows 1-8, PDL on/off)\n", checked);
}

TEST(Exl3CudaGemv, WritesIntoAColumnBlock) {
  const Exl3Weight w = synthetic(256, 256, 4, Exl3Codebook::kMcg, 9);
  const Tensor x = randn({3, 256}, 11);
  Tensor want = Tensor::empty({3, 200}, DType::kF32);
  cpu::exl3_matmul(want, x, w);
  Tensor wide = gpu().zeros({3, 500});
  Tensor block = wide.slice(1, 100, 300);
  gpu().exl3_matmul(block, gpu().to_device(x), upload(w));
  const Tensor got = gpu().to_host(wide);
  double worst = 0;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 500; ++c) {
      const float g = got.data<float>()[r * 500 + c];
      if (c < 100 || c >= 300) {
        EXPECT_EQ(g, 0.0f) << "outside the block at " << r << "," << c;
      } else {
        worst = std::max(worst, std::fabs(static_cast<double>(g) - want.data<float>()[r * 200 + c - 100]));
      }
    }
  EXPECT_LT(worst, 1e-4 * 3);
}

// The fixture's float64 y = x · W (the CPU test allows 2e-6; here 1e-4, the value is printed).
TEST(Exl3CudaGemv, MatchesTheFloat64Reference) {
  const auto& meta = fixture().metadata();
  const nlohmann::json cases = nlohmann::json::parse(meta.at("meta")).at("cases");
  double worst = 0;
  for (const auto& c : cases) {
    const std::string key = c.at("key").get<std::string>();
    Exl3Weight w;
    w.trellis = fixture_tensor(key + ".trellis");
    w.suh = fixture_tensor(key + ".suh");
    w.svh = fixture_tensor(key + ".svh");
    w.bits = c.at("K").get<int>();
    w.codebook = *exl3_codebook_from_name(c.at("codebook").get<std::string>());
    const Tensor x = fixture_tensor(key + ".x").to_f32();
    const Tensor y = fixture_tensor(key + ".y");
    Tensor out = gpu().empty(y.shape());
    gpu().exl3_matmul(out, gpu().to_device(x), upload(w));
    const double e = rel_err(y, gpu().to_host(out));
    worst = std::max(worst, e);
    EXPECT_LT(e, 1e-4) << key;
  }
  std::printf("[exl3] gemv vs exllamav3 float64 y (27 cases): max rel err %.3g\n", worst);
}

// ---- grouped MoE --------------------------------------------------------------------

Exl3ExpertTable expert_table(int64_t experts, int64_t hidden, int64_t inter, int bits, Exl3Codebook cb) {
  Exl3ExpertTable t;
  t.hidden = hidden;
  t.intermediate = inter;
  for (int64_t e = 0; e < experts; ++e) {
    t.gate.push_back(synthetic(hidden, inter, bits, cb, 1000 + 3 * e));
    t.up.push_back(synthetic(hidden, inter, bits, cb, 1001 + 3 * e));
    t.down.push_back(synthetic(inter, hidden, bits, cb, 1002 + 3 * e));
  }
  return t;
}

// Routing as moe_route gives it: k distinct ascending experts per token, weights > 0.
void random_routing(int64_t tokens, int64_t k, int64_t experts, uint32_t seed, Tensor& ids, Tensor& wts) {
  std::mt19937 rng(seed);
  ids = Tensor::empty({tokens, k}, DType::kI32);
  wts = Tensor::empty({tokens, k}, DType::kF32);
  std::vector<int32_t> all(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) all[e] = static_cast<int32_t>(e);
    std::shuffle(all.begin(), all.end(), rng);
    std::sort(all.begin(), all.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      ids.data<int32_t>()[t * k + j] = all[j];
      wts.data<float>()[t * k + j] = 0.1f + 0.2f * static_cast<float>(rng() % 1000) / 1000.0f;
    }
  }
}

TEST(Exl3CudaMoe, MatchesTheCpuBackend) {
  const int64_t experts = 16, hidden = 384, inter = 320, k = 4;  // intermediate padded to 384
  for (Exl3Codebook cb : {Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    Exl3ExpertTable host = expert_table(experts, hidden, inter, cb == Exl3Codebook::kMcg ? 4 : 3, cb);
    Exl3ExpertTable dev = host;
    ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
    double worst[3] = {0, 0, 0};
    // Prefill (more than 64 tokens) through the wide GEMV with x as the hi/lo pair and through
    // the grouped body, in pieces (bits equal to a token's decode-sized call), and through
    // W_hat + cuBLAS (within f32 rounding of it). The wide GEMV's default (x in fp16):
    // WideGemvTakesXInHalfPrecision.
    cuda::exl3_set_wide_x(cuda::kExl3WideXSplit);
    for (int path : {cuda::kExl3PrefillWide, cuda::kExl3PrefillPieces, cuda::kExl3PrefillCublas}) {
      cuda::exl3_set_prefill_path(path);
      const bool pieces = path != cuda::kExl3PrefillCublas;
      const int wi = path == cuda::kExl3PrefillWide ? 0 : path == cuda::kExl3PrefillPieces ? 1 : 2;
      // 1,100 tokens: two wide pieces (1,024 + 76); 1,030: a last piece of 6 (decode-sized kernels).
      for (int64_t tokens : {1, 5, 8, 33, 64, 80, 300, 516, 1030, 1100}) {
        if (path != cuda::kExl3PrefillWide && tokens <= 64) continue;  // the same kernels as the first pass
        Tensor ids, wts;
        random_routing(tokens, k, experts, static_cast<uint32_t>(tokens), ids, wts);
        const Tensor x = randn({tokens, hidden}, static_cast<uint32_t>(tokens + 77));
        Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
        cpu_ops().moe_experts_exl3(want, x, ids, wts, host, 7.0f);
        Tensor out = gpu().empty({tokens, hidden});
        gpu().moe_experts_exl3(out, gpu().to_device(x), gpu().to_device(ids), gpu().to_device(wts), dev, 7.0f);
        const Tensor got = gpu().to_host(out);
        const double e = rel_err(want, got);
        worst[wi] = std::max(worst[wi], e);
        EXPECT_LT(e, 1e-4) << exl3_codebook_name(cb) << " tokens=" << tokens << " path " << path;
        if (!pieces) {
          // The H200's cuBLAS 13 refuses the grouped GEMM for f16 inputs with f32 outputs
          // (run4s18): the per-expert GEMMs then run, with the same products.
          EXPECT_TRUE(is_cublas_path(cuda::exl3_moe_prefill_last_path())) << "tokens=" << tokens;
        }
        // Row independence: the first and the last token alone (516 tokens: pieces of 512, the
        // last token in a second piece of 4) give the same bits, or with W_hat + cuBLAS the
        // same values within f32 rounding.
        for (int64_t t : {int64_t{0}, tokens - 1}) {
          Tensor one = gpu().empty({1, hidden});
          gpu().moe_experts_exl3(one, gpu().to_device(x.slice(0, t, t + 1)), gpu().to_device(ids.slice(0, t, t + 1)),
                                 gpu().to_device(wts.slice(0, t, t + 1)), dev, 7.0f);
          const Tensor one_h = gpu().to_host(one);
          if (pieces) {
            EXPECT_EQ(std::memcmp(one_h.raw(), got.data<float>() + t * hidden, hidden * 4), 0)
                << exl3_codebook_name(cb) << " tokens=" << tokens << ": token " << t << " differs alone";
          } else {
            EXPECT_LT(rel_err(one_h, got.slice(0, t, t + 1).contiguous()), 1e-5)
                << exl3_codebook_name(cb) << " tokens=" << tokens << ": token " << t << " alone";
          }
        }
      }
    }
    cuda::exl3_set_prefill_path(cuda::kExl3PrefillWide);
    cuda::exl3_set_wide_x(-1);
    std::printf("[exl3] moe_experts_exl3 vs CPU (%s, 1-1100 tokens, 16 experts top-4): max rel err %.3g wide, "
                "%.3g grouped pieces, %.3g W_hat + cuBLAS\n",
                exl3_codebook_name(cb), worst[0], worst[1], worst[2]);
  }
}

// Rows in reverse order (ids, weights and x reversed together): every token then sits at
// another place of its experts' passes, beside other rows.
Tensor reversed_rows(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), t.dtype());
  const int64_t rows = t.size(0), row_bytes = static_cast<int64_t>(t.nbytes()) / rows;
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(static_cast<char*>(r.raw()) + i * row_bytes, static_cast<const char*>(t.raw()) + (rows - 1 - i) * row_bytes,
                row_bytes);
  return r;
}

// moe_experts_exl3 on the GPU of host rows x / ids / wts (SwiGLU limit 7), back on the host.
Tensor moe_on_gpu(const Exl3ExpertTable& dev, const Tensor& x, const Tensor& ids, const Tensor& wts) {
  Tensor out = gpu().empty({x.size(0), x.size(1)});
  gpu().moe_experts_exl3(out, gpu().to_device(x), gpu().to_device(ids), gpu().to_device(wts), dev, 7.0f);
  return gpu().to_host(out);
}

// The wide GEMV's default precision: x rounded to fp16, one MMA per tile (as exllamav3's own
// kernels; prefill rows of the dense projections are bf16 already). Within fp16 rounding of the
// CPU backend, not the hi/lo pair's bits (so the knob took), and a token's bits still depend on
// its own row alone: the same in the call reversed (other pass places and neighbours) and, for
// 1,100 tokens, in the two pieces of 1,024 + 76 either way round.
TEST(Exl3CudaMoe, WideGemvTakesXInHalfPrecision) {
  const int64_t experts = 16, hidden = 384, inter = 320, k = 4;
  for (Exl3Codebook cb : {Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    Exl3ExpertTable host = expert_table(experts, hidden, inter, cb == Exl3Codebook::kMcg ? 4 : 3, cb);
    Exl3ExpertTable dev = host;
    ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
    cuda::exl3_set_prefill_path(cuda::kExl3PrefillWide);
    double worst = 0, split_worst = 0;
    for (int64_t tokens : {80, 300, 516, 1100}) {
      Tensor ids, wts;
      random_routing(tokens, k, experts, static_cast<uint32_t>(tokens + 5), ids, wts);
      const Tensor x = randn({tokens, hidden}, static_cast<uint32_t>(tokens + 78));
      Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
      cpu_ops().moe_experts_exl3(want, x, ids, wts, host, 7.0f);
      cuda::exl3_set_wide_x(cuda::kExl3WideXSplit);
      const Tensor split = moe_on_gpu(dev, x, ids, wts);
      cuda::exl3_set_wide_x(cuda::kExl3WideXHalf);
      const Tensor half = moe_on_gpu(dev, x, ids, wts);
      const Tensor half_rev = moe_on_gpu(dev, reversed_rows(x), reversed_rows(ids), reversed_rows(wts));
      const double e = rel_err(want, half);
      worst = std::max(worst, e);
      split_worst = std::max(split_worst, rel_err(want, split));
      // fp16 x: 2^-11 relative per input at most, summed over 384 inputs of random sign.
      EXPECT_LT(e, 2e-3) << exl3_codebook_name(cb) << " tokens=" << tokens;
      EXPECT_NE(std::memcmp(half.raw(), split.raw(), half.nbytes()), 0)
          << exl3_codebook_name(cb) << " tokens=" << tokens << ": the fp16 path gave the hi/lo bits";
      EXPECT_EQ(std::memcmp(reversed_rows(half_rev).raw(), half.raw(), half.nbytes()), 0)
          << exl3_codebook_name(cb) << " tokens=" << tokens << ": a token's bits depend on the rows beside it";
    }
    cuda::exl3_set_wide_x(-1);
    std::printf("[exl3] wide GEMV, x in fp16 (%s, 80-1100 tokens): max rel err %.3g vs CPU (hi/lo pair: %.3g)\n",
                exl3_codebook_name(cb), worst, split_worst);
  }
}

// The wide GEMV at every K and codebook, in both pass shapes (48-row passes streaming stages
// of 8 tiles, 128-row passes stages of 4) and both precisions: each K's weight copies take its
// own path (a lane's piece of every (32 / 2K)-th tile at K = 1, 2, 4, 8, where at K = 1, 2 a
// warp's pieces reach past a stage; load_stage at K = 3, 5, 6, 7).
TEST(Exl3CudaMoe, WideGemvEveryBitWidthAndCodebook) {
  const int64_t experts = 8, hidden = 256, inter = 256, k = 2;
  cuda::exl3_set_prefill_path(cuda::kExl3PrefillWide);
  double worst[2] = {0, 0};
  for (int bits = 1; bits <= 8; ++bits) {
    for (Exl3Codebook cb : {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
      Exl3ExpertTable host = expert_table(experts, hidden, inter, bits, cb);
      Exl3ExpertTable dev = host;
      ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
      // 100 tokens: 25 rows per expert (48-row passes); 400: 100 (128-row passes).
      for (int64_t tokens : {100, 400}) {
        Tensor ids, wts;
        random_routing(tokens, k, experts, static_cast<uint32_t>(tokens + bits), ids, wts);
        const Tensor x = randn({tokens, hidden}, static_cast<uint32_t>(tokens + 10 * bits));
        Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
        cpu_ops().moe_experts_exl3(want, x, ids, wts, host, 7.0f);
        for (int half = 0; half < 2; ++half) {
          cuda::exl3_set_wide_x(half ? cuda::kExl3WideXHalf : cuda::kExl3WideXSplit);
          const double e = rel_err(want, moe_on_gpu(dev, x, ids, wts));
          worst[half] = std::max(worst[half], e);
          EXPECT_LT(e, half ? 2e-3 : 1e-4) << "K=" << bits << " " << exl3_codebook_name(cb)
                                           << " tokens=" << tokens << (half ? " x in fp16" : " hi/lo pair");
        }
      }
    }
  }
  cuda::exl3_set_wide_x(-1);
  std::printf(
      "[exl3] wide GEMV (K 1-8 x 3 codebooks, 100 / 400 tokens): max rel err %.3g hi/lo pair, %.3g x in "
      "fp16\n",
      worst[0], worst[1]);
}

// The wide and the W_hat + cuBLAS prefill paths with what routing may hold: a token naming
// an expert twice, skewed routing (one expert in every token: more rows than the rest
// together, several wide passes and batches of experts), a bias, gate and up in different
// formats, and an id outside [0, E) (the pair adds nothing, the context's error word is set:
// the op fails). The wide path's tokens keep their decode-sized bits.
TEST(Exl3CudaMoe, PrefillPathsHandleRepeatsSkewAndFormats) {
  const int64_t experts = 20, hidden = 256, inter = 200, i_pad = 256, k = 3;
  Exl3ExpertTable host = expert_table(experts, hidden, inter, 4, Exl3Codebook::kMcg);
  for (int64_t e = 0; e < experts; ++e) {
    host.gate[e] = synthetic(hidden, i_pad, 4, Exl3Codebook::kMcg, 7000 + 3 * e, true);
    host.up[e] = synthetic(hidden, i_pad, 3, Exl3Codebook::kMul1, 7001 + 3 * e, true);
    host.down[e] = synthetic(i_pad, hidden, 4, Exl3Codebook::kMcg, 7002 + 3 * e, true);
  }
  Exl3ExpertTable dev = host;
  ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
  // 200 tokens: 30 rows per expert on average (the wide GEMV's 48-row passes), 300: 45 (128-row
  // passes); expert 3 has a row in every token either way (several passes).
  // The wide path with x as the hi/lo pair (its tokens keep their decode-sized bits) and in
  // fp16 (the default: within fp16 rounding, and the same bits with the rows reversed).
  struct Case {
    int path;
    int64_t tokens;
    int wide_x;
  };
  for (const Case c : {Case{cuda::kExl3PrefillWide, 200, cuda::kExl3WideXSplit},
                       Case{cuda::kExl3PrefillWide, 300, cuda::kExl3WideXSplit},
                       Case{cuda::kExl3PrefillWide, 200, cuda::kExl3WideXHalf},
                       Case{cuda::kExl3PrefillWide, 300, cuda::kExl3WideXHalf},
                       Case{cuda::kExl3PrefillCublas, 300, cuda::kExl3WideXSplit}}) {
    const int path = c.path;
    const int64_t tokens = c.tokens;
    const bool wide = path == cuda::kExl3PrefillWide, half = wide && c.wide_x == cuda::kExl3WideXHalf;
    cuda::exl3_set_prefill_path(path);
    cuda::exl3_set_wide_x(c.wide_x);
    Tensor ids, wts;
    random_routing(tokens, k, experts, 4242, ids, wts);
    for (int64_t t = 0; t < tokens; ++t) ids.data<int32_t>()[t * k] = 3;  // expert 3 in every token
    ids.data<int32_t>()[1] = 3;                                           // token 0 names it twice
    const Tensor x = randn({tokens, hidden}, 99);
    Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
    cpu_ops().moe_experts_exl3(want, x, ids, wts, host, 7.0f);
    Tensor out = gpu().empty({tokens, hidden});
    gpu().moe_experts_exl3(out, gpu().to_device(x), gpu().to_device(ids), gpu().to_device(wts), dev, 7.0f);
    if (!wide) {
      EXPECT_TRUE(is_cublas_path(cuda::exl3_moe_prefill_last_path())) << cuda::exl3_moe_prefill_last_path();
    }
    const Tensor got = gpu().to_host(out);
    const double e = rel_err(want, got);
    EXPECT_LT(e, half ? 2e-3 : 1e-4) << (wide ? "wide" : "cublas") << " tokens=" << tokens << " half " << half;
    std::printf("[exl3] %s prefill, %lld tokens, repeats + skew + bias + mixed formats: rel err %.3g\n",
                half ? "wide (x in fp16)" : wide ? "wide" : "W_hat + cuBLAS", static_cast<long long>(tokens), e);
    if (half) {
      const Tensor rev = moe_on_gpu(dev, reversed_rows(x), reversed_rows(ids), reversed_rows(wts));
      EXPECT_EQ(std::memcmp(reversed_rows(rev).raw(), got.raw(), got.nbytes()), 0)
          << "tokens=" << tokens << ": a token's bits depend on the rows beside it";
    } else if (wide) {
      for (int64_t t : {int64_t{0}, int64_t{1}, tokens - 1}) {  // token 0 names expert 3 twice
        Tensor one = gpu().empty({1, hidden});
        gpu().moe_experts_exl3(one, gpu().to_device(x.slice(0, t, t + 1)), gpu().to_device(ids.slice(0, t, t + 1)),
                               gpu().to_device(wts.slice(0, t, t + 1)), dev, 7.0f);
        EXPECT_EQ(std::memcmp(gpu().to_host(one).raw(), got.data<float>() + t * hidden, hidden * 4), 0)
            << "token " << t << " of " << tokens << " differs alone";
      }
    }
    ids.data<int32_t>()[5 * k + 1] = static_cast<int32_t>(experts);  // out of range
    Tensor bad = gpu().empty({tokens, hidden});
    EXPECT_THROW(
        {
          gpu().moe_experts_exl3(bad, gpu().to_device(x), gpu().to_device(ids), gpu().to_device(wts), dev, 7.0f);
          (void)gpu().to_host(bad);
        },
        StatusError);
  }
  cuda::exl3_set_prefill_path(cuda::kExl3PrefillWide);
  cuda::exl3_set_wide_x(-1);
}

// The flat body (up to 8 tokens, exl3_moe_flat.cuh) against the grouped one: the same
// bits for every token count 1-8, with an expert named twice by one token and by several
// tokens (the flat body's leader pair serves them all), biases, a padded intermediate and
// gate/up in different formats (two gate/up launches). Every flat variant that claims the
// same bits: the default, the previous streaming loop, 2 and 4 columns per warp (case 2 is
// wide enough for 4; its k-splits of 2 stages make the ring's prologue cross columns) and
// the kernels compiled without the register cap, 1 column, and the issue-8 levers: the pair
// pack on the FMA pipe, 8-tile ring stages (case 2: one stage per k-split, the prologue
// crosses three columns; cases 0/1: 4-tile k-splits, so 1 column and a partial stage), both,
// and the doubled-state extraction with the FMA pack (with and without 8-tile stages), the
// flat body without the default's levers (flat-prev) and 16-tile stages; session 10: the
// interleaved columns (2 and 4 at a time, and 2 with 2 columns per warp), the word hashes,
// their combinations with the FMA pack, and the finish scales loaded before the waits.
TEST(Exl3CudaMoe, FlatEqualsGroupedBitForBit) {
  const int64_t experts = 12, k = 8;
  const int flat_variants[] = {cuda::kExl3MoeFlat,          cuda::kExl3MoeFlatOldLoop,  cuda::kExl3MoeFlatCols2,
                               cuda::kExl3MoeFlatCols4,     cuda::kExl3MoeFlatNoRegCap, cuda::kExl3MoeFlatCols1,
                               cuda::kExl3MoeFlatFmaPack,   cuda::kExl3MoeFlatStage8,   cuda::kExl3MoeFlatFmaStage8,
                               cuda::kExl3MoeFlatFmaDup,    cuda::kExl3MoeFlatFmaDupStage8, cuda::kExl3MoeFlatPrev,
                               cuda::kExl3MoeFlatStage16,   cuda::kExl3MoeFlatIlp2,     cuda::kExl3MoeFlatIlp4,
                               cuda::kExl3MoeFlatWordHash,  cuda::kExl3MoeFlatIlp2WordHash,
                               cuda::kExl3MoeFlatIlp2WordHashFma, cuda::kExl3MoeFlatIlp4WordHashFma,
                               cuda::kExl3MoeFlatIlp2Cols2, cuda::kExl3MoeFlatWordHashPrefetch,
                               cuda::kExl3MoeFlatIlp4WordHash, cuda::kExl3MoeFlatIlp2WordHashUncapped};
  constexpr int kVariants = static_cast<int>(sizeof(flat_variants) / sizeof(flat_variants[0]));
  for (int variant_case = 0; variant_case < 5; ++variant_case) {
    // Case 3: k-splits of 16 tiles, so the 16-tile stages stream 4 whole columns per warp (the
    // interleaved loops: 2 column groups, the prologue's stages cross into the second); up at
    // K = 4 3INST (case 4: K = 4 MUL1, case 2's shapes) runs the default kernel whatever the
    // variant: the word hashes of the other codebooks against the grouped path's states.
    const int64_t hidden = variant_case == 3 ? 1024 : variant_case >= 2 ? 512 : 256;
    const int64_t inter = variant_case == 3 ? 1000 : variant_case >= 2 ? 500 : 200;
    const int64_t i_pad = variant_case == 3 ? 1024 : variant_case >= 2 ? 512 : 256;  // intermediate padded to 128s
    Exl3ExpertTable host = expert_table(experts, hidden, inter, 4, Exl3Codebook::kMcg);
    for (int64_t e = 0; e < experts; ++e) {
      host.gate[e] = synthetic(hidden, i_pad, 4, Exl3Codebook::kMcg, 5000 + 3 * e, true);
      host.down[e] = synthetic(i_pad, hidden, 4, Exl3Codebook::kMcg, 5002 + 3 * e, true);
      if (variant_case == 1) host.up[e] = synthetic(hidden, i_pad, 3, Exl3Codebook::kMul1, 5001 + 3 * e, true);
      if (variant_case == 2) host.up[e] = synthetic(hidden, i_pad, 4, Exl3Codebook::kMcg, 5001 + 3 * e, true);
      if (variant_case == 3) host.up[e] = synthetic(hidden, i_pad, 4, Exl3Codebook::k3Inst, 5001 + 3 * e, true);
      if (variant_case == 4) host.up[e] = synthetic(hidden, i_pad, 4, Exl3Codebook::kMul1, 5001 + 3 * e, true);
    }
    Exl3ExpertTable dev = host;
    ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
    for (int64_t tokens : {1, 2, 3, 8}) {
      Tensor ids, wts;
      random_routing(tokens, k, experts, static_cast<uint32_t>(100 + tokens), ids, wts);
      ids.data<int32_t>()[1] = ids.data<int32_t>()[0];  // token 0 names one expert twice
      if (tokens > 1) ids.data<int32_t>()[k + 2] = ids.data<int32_t>()[0];  // and token 1 names it too
      const Tensor x = randn({tokens, hidden}, static_cast<uint32_t>(tokens + 300));
      const Tensor xd = gpu().to_device(x), idd = gpu().to_device(ids), wd = gpu().to_device(wts);
      Tensor grouped = gpu().empty({tokens, hidden});
      cuda::exl3_set_moe_variant(cuda::kExl3MoeGrouped);
      gpu().moe_experts_exl3(grouped, xd, idd, wd, dev, 7.0f);
      const Tensor b = gpu().to_host(grouped);
      Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
      cpu_ops().moe_experts_exl3(want, x, ids, wts, host, 7.0f);
      EXPECT_LT(rel_err(want, b), 1e-4) << "case " << variant_case << " tokens=" << tokens;
      for (int fv : flat_variants) {
        Tensor flat = gpu().empty({tokens, hidden});
        cuda::exl3_set_moe_variant(fv);
        gpu().moe_experts_exl3(flat, xd, idd, wd, dev, 7.0f);
        const Tensor a = gpu().to_host(flat);
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<size_t>(tokens * hidden * 4)), 0)
            << "case " << variant_case << " tokens=" << tokens << " flat variant " << fv
            << ": flat and grouped bodies differ";
      }
      cuda::exl3_set_moe_variant(cuda::kExl3MoeAuto);
    }
  }
  std::printf("[exl3] moe_experts_exl3 flat body (%d variants) == grouped body bit for bit (1-8 tokens, repeated "
              "experts)\n",
              kVariants);
}

}  // namespace
// The flat variants at GLM-5.3-Flash's expert shapes (4096 <-> 2048, k-splits of 64 and 32
// tiles): the shared-memory sizes the small cases above never reach (ring + 1-8 rows of
// x fragments; 6 rows of gate/up made exactly 48 KB of dynamic shared memory, which failed to
// launch before the opt-in threshold counted the static part), and every lever's ring shape
// over whole columns. Each must launch and give the grouped body's bits.
TEST(Exl3CudaMoe, FlatVariantsAtExpertShapes) {
  const int64_t experts = 3, hidden = 4096, inter = 2048, k = 2;
  Exl3ExpertTable host = expert_table(experts, hidden, inter, 4, Exl3Codebook::kMcg);
  Exl3ExpertTable dev = host;
  ASSERT_TRUE(gpu().upload_exl3_experts(dev).is_ok());
  const int flat_variants[] = {cuda::kExl3MoeAuto,         cuda::kExl3MoeFlatPrev,    cuda::kExl3MoeFlatStage8,
                               cuda::kExl3MoeFlatStage16,  cuda::kExl3MoeFlatFmaPack, cuda::kExl3MoeFlatFmaDupStage8,
                               cuda::kExl3MoeFlatCols2,    cuda::kExl3MoeFlatCols1,
                               cuda::kExl3MoeFlatIlp2,     cuda::kExl3MoeFlatIlp4,    cuda::kExl3MoeFlatWordHash,
                               cuda::kExl3MoeFlatIlp2WordHash, cuda::kExl3MoeFlatIlp2WordHashFma,
                               cuda::kExl3MoeFlatIlp4WordHashFma, cuda::kExl3MoeFlatIlp2Cols2,
                               cuda::kExl3MoeFlatWordHashPrefetch, cuda::kExl3MoeFlatIlp4WordHash,
                               cuda::kExl3MoeFlatIlp2WordHashUncapped};
  constexpr int kVariants = static_cast<int>(sizeof(flat_variants) / sizeof(flat_variants[0]));
  int checked = 0;
  for (int64_t tokens : {1, 3, 4, 6, 8}) {
    Tensor ids, wts;
    random_routing(tokens, k, experts, static_cast<uint32_t>(900 + tokens), ids, wts);
    const Tensor x = randn({tokens, hidden}, static_cast<uint32_t>(tokens + 901));
    const Tensor xd = gpu().to_device(x), idd = gpu().to_device(ids), wd = gpu().to_device(wts);
    Tensor grouped = gpu().empty({tokens, hidden});
    cuda::exl3_set_moe_variant(cuda::kExl3MoeGrouped);
    gpu().moe_experts_exl3(grouped, xd, idd, wd, dev, 7.0f);
    const Tensor b = gpu().to_host(grouped);
    for (int fv : flat_variants) {
      Tensor flat = gpu().empty({tokens, hidden});
      cuda::exl3_set_moe_variant(fv);
      gpu().moe_experts_exl3(flat, xd, idd, wd, dev, 7.0f);
      const Tensor a = gpu().to_host(flat);
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), static_cast<size_t>(tokens * hidden * 4)), 0)
          << "tokens=" << tokens << " flat variant " << fv << ": flat and grouped bodies differ";
      ++checked;
    }
    cuda::exl3_set_moe_variant(cuda::kExl3MoeAuto);
  }
  EXPECT_EQ(checked, 5 * kVariants);
  std::printf("[exl3] moe_experts_exl3 at 4096x2048 experts: %d flat variants == grouped bit for bit (1-8 tokens)\n",
              kVariants);
}

}  // namespace tf
