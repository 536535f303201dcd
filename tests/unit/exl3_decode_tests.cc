// EXL3 decoding on the CPU against exllamav3's own CUDA decoder (tests/data/exl3):
// codebook tables, trellis states and W_hat bit for bit for every codebook and
// K = 1..8, and the full layer x · W within float rounding of the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "core/dtype.h"
#include "exl3_test_util.h"
#include "kernels/api/exl3_decode.h"
#include "kernels/cpu/exl3_linear.h"

namespace tf {
namespace {

using test::Exl3Case;

TEST(Exl3Codebook, EveryStateMatchesExllamav3) {
  for (Exl3Codebook cb : {Exl3Codebook::k3Inst, Exl3Codebook::kMcg, Exl3Codebook::kMul1}) {
    const Tensor ref = test::exl3_fixture_tensor(std::string("codebook.") + exl3_codebook_name(cb));
    ASSERT_EQ(ref.shape(), (Shape{65536}));
    const uint16_t* want = ref.data<uint16_t>();
    const uint16_t* table = exl3_codebook_table(cb);
    int mismatches = 0;
    for (uint32_t s = 0; s < 65536; ++s) {
      if (table[s] != want[s] && mismatches++ < 5) {
        ADD_FAILURE() << exl3_codebook_name(cb) << " state " << s << ": got 0x" << std::hex << table[s]
                      << ", exllamav3 0x" << want[s];
      }
      EXPECT_EQ(exl3_state_value(static_cast<uint16_t>(s), cb), table[s]);
    }
    EXPECT_EQ(mismatches, 0) << exl3_codebook_name(cb);
  }
}

// The spec's statistics (exl3.md §2.2) as a sanity check of the tables themselves.
TEST(Exl3Codebook, Mul1RangeAndScale) {
  const uint16_t* t = exl3_codebook_table(Exl3Codebook::kMul1);
  double sum2 = 0, lo = 1e9, hi = -1e9;
  for (uint32_t s = 0; s < 65536; ++s) {
    const double v = f16_to_float(t[s]);
    sum2 += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_NEAR(std::sqrt(sum2 / 65536), 1.0003, 2e-3);
  EXPECT_GT(lo, -3.5);
  EXPECT_LT(hi, 3.4);
}

TEST(Exl3Tile, PositionsCoverTheTileOnce) {
  std::set<int> seen;
  for (int p = 0; p < 256; ++p) {
    const Exl3TilePos at = exl3_tile_position(p);
    ASSERT_GE(at.row, 0);
    ASSERT_LT(at.row, 16);
    ASSERT_GE(at.col, 0);
    ASSERT_LT(at.col, 16);
    seen.insert(at.row * 16 + at.col);
  }
  EXPECT_EQ(seen.size(), 256u);
  // Lane 0 holds rows 0,1,8,9 of columns 0 and 8 (the mma B fragment).
  EXPECT_EQ(exl3_tile_position(3).row, 9);
  EXPECT_EQ(exl3_tile_position(3).col, 0);
  EXPECT_EQ(exl3_tile_position(4).col, 8);
  EXPECT_EQ(exl3_tile_position(8).row, 2);  // lane 1
}

// State recurrence on a hand-made stream: all-ones words give state 0xFFFF
// everywhere, and a single set bit walks through the states it belongs to.
TEST(Exl3Tile, StatesFollowTheBitstream) {
  for (int bits = 1; bits <= 8; ++bits) {
    std::vector<int16_t> words(16 * bits, -1);
    uint16_t states[256];
    exl3_tile_states(words.data(), bits, states);
    for (int p = 0; p < 256; ++p) ASSERT_EQ(states[p], 0xFFFF) << "K=" << bits;
    // Only stream bit 0 set: the MSB of u32 word 0 = bit 15 of int16 word 1.
    std::fill(words.begin(), words.end(), 0);
    words[1] = static_cast<int16_t>(0x8000);
    exl3_tile_states(words.data(), bits, states);
    for (int p = 0; p < 256; ++p) {
      // State p covers stream bits [(p+1)K-16, (p+1)K); bit 0 sits at offset (p+1)K-1 from its MSB end.
      const int shift = (p + 1) * bits - 1;
      const uint16_t want = shift < 16 ? static_cast<uint16_t>(1u << shift) : 0;
      ASSERT_EQ(states[p], want) << "K=" << bits << " p=" << p;
    }
  }
}

class Exl3CaseTest : public ::testing::TestWithParam<Exl3Case> {};

TEST_P(Exl3CaseTest, StatesBitExact) {
  const Exl3Case& c = GetParam();
  const Tensor states = exl3_unpack_states(test::exl3_case_weight(c), c.key);
  ASSERT_EQ(states.shape(), (Shape{c.k / 16, c.n / 16, 256}));
  const Tensor row0 = test::exl3_fixture_tensor(c.key + ".states_row0");
  ASSERT_EQ(row0.numel(), c.n / 16 * 256);
  for (int64_t i = 0; i < row0.numel(); ++i) {
    ASSERT_EQ(states.data<uint16_t>()[i], row0.data<uint16_t>()[i]) << c.key << " state " << i;
  }
  EXPECT_EQ(test::fnv1a64_hex(states.raw(), states.nbytes()), c.states_hash) << c.key << ": some state differs";
}

TEST_P(Exl3CaseTest, WHatBitExact) {
  const Exl3Case& c = GetParam();
  const Tensor w_hat = exl3_decode_w_hat(test::exl3_case_weight(c), c.key);
  ASSERT_EQ(w_hat.shape(), (Shape{c.k, c.n}));
  ASSERT_EQ(w_hat.dtype(), DType::kF16);
  const Tensor rows16 = test::exl3_fixture_tensor(c.key + ".w_hat_rows16");
  for (int64_t i = 0; i < 16 * c.n; ++i) {
    ASSERT_EQ(w_hat.data<uint16_t>()[i], rows16.data<uint16_t>()[i])
        << c.key << " W_hat[" << i / c.n << ", " << i % c.n << "]";
  }
  EXPECT_EQ(test::fnv1a64_hex(w_hat.raw(), w_hat.nbytes()), c.w_hat_hash) << c.key << ": some W_hat element differs";
}

// max |got - y| / max |y| over the case's 8 reference rows.
double relative_error(const Tensor& got, const Tensor& y) {
  double err = 0, scale = 0;
  const std::vector<float> a = got.to_vector(), b = y.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return err / scale;
}

// f32 arithmetic over k <= 512 terms: a few ulps of the largest partial sums.
constexpr double kLayerTolerance = 2e-6;

TEST_P(Exl3CaseTest, MatmulMatchesReference) {
  const Exl3Case& c = GetParam();
  const Tensor x = test::exl3_fixture_tensor(c.key + ".x").to_f32();
  const Tensor y = test::exl3_fixture_tensor(c.key + ".y");
  ASSERT_EQ(x.shape(), (Shape{8, c.k}));
  Tensor out = Tensor::empty({8, c.n}, DType::kF32);
  cpu::exl3_matmul(out, x, test::exl3_case_weight(c), c.key);
  const double rel = relative_error(out, y);
  EXPECT_LT(rel, kLayerTolerance) << c.key;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", rel);
  RecordProperty("rel_err", buf);
}

TEST_P(Exl3CaseTest, DequantizedWeightMatchesReference) {
  const Exl3Case& c = GetParam();
  const Tensor w = exl3_dequantize(test::exl3_case_weight(c), c.key);
  ASSERT_EQ(w.shape(), (Shape{c.k, c.n}));
  const Tensor x = test::exl3_fixture_tensor(c.key + ".x").to_f32();
  const Tensor y = test::exl3_fixture_tensor(c.key + ".y");
  // y = x · W in double over our f32 W: only W's own rounding remains.
  Tensor got = Tensor::empty({8, c.n}, DType::kF32);
  for (int64_t t = 0; t < 8; ++t) {
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < c.k; ++i) s += double(x.data<float>()[t * c.k + i]) * w.data<float>()[i * c.n + j];
      got.data<float>()[t * c.n + j] = static_cast<float>(s);
    }
  }
  const double rel = relative_error(got, y);
  EXPECT_LT(rel, kLayerTolerance) << c.key;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", rel);
  RecordProperty("rel_err", buf);
}

std::string case_name(const ::testing::TestParamInfo<Exl3Case>& info) { return info.param.key; }

INSTANTIATE_TEST_SUITE_P(Exllamav3, Exl3CaseTest, ::testing::ValuesIn(test::exl3_cases()), case_name);

TEST(Exl3Fixture, CoversEveryCodebookAndBitWidth) {
  std::set<std::pair<int, int>> seen;
  for (const Exl3Case& c : test::exl3_cases()) seen.insert({c.bits, static_cast<int>(c.codebook)});
  for (int bits = 1; bits <= 8; ++bits)
    for (int cb = 0; cb < 3; ++cb) EXPECT_TRUE(seen.count({bits, cb})) << "K=" << bits << " codebook " << cb;
}

TEST(Exl3Hadamard, EqualsTheSylvesterMatrix) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(256);
  for (float& v : x) v = nd(rng);
  std::vector<float> y = x;
  fwht128(y.data(), 256);
  for (int blk = 0; blk < 2; ++blk) {
    for (int a = 0; a < 128; ++a) {
      double s = 0;
      for (int b = 0; b < 128; ++b) s += (__builtin_popcount(a & b) % 2 ? -1.0 : 1.0) * x[blk * 128 + b];
      EXPECT_NEAR(y[blk * 128 + a], s / std::sqrt(128.0), 1e-5);
    }
  }
  // Strided form over the same data gives the same numbers.
  std::vector<float> z(512, 0.0f);
  for (int i = 0; i < 256; ++i) z[2 * i] = x[i];
  fwht128(z.data(), 256, 2);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(z[2 * i], y[i]);
}

// Narrow inputs are zero-extended to the padded k and padded outputs dropped;
// each row's result is the same alone or in a batch, bit for bit.
TEST(Exl3Matmul, PaddingAndRowIndependence) {
  const Exl3Case c = test::exl3_cases().at(0);
  const Exl3Weight w = test::exl3_case_weight(c);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const int64_t k_in = c.k - 37, n_out = c.n - 100;
  Tensor x = Tensor::empty({5, k_in}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = nd(rng);
  Tensor padded = Tensor::zeros({5, c.k}, DType::kF32);
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t i = 0; i < k_in; ++i) padded.data<float>()[t * c.k + i] = x.data<float>()[t * k_in + i];
  Tensor narrow = Tensor::empty({5, n_out}, DType::kF32), full = Tensor::empty({5, c.n}, DType::kF32);
  cpu::exl3_matmul(narrow, x, w);
  cpu::exl3_matmul(full, padded, w);
  for (int64_t t = 0; t < 5; ++t) {
    for (int64_t j = 0; j < n_out; ++j) ASSERT_EQ(narrow.data<float>()[t * n_out + j], full.data<float>()[t * c.n + j]);
    Tensor one = Tensor::empty({1, n_out}, DType::kF32);
    cpu::exl3_matmul(one, x.slice(0, t, t + 1).contiguous(), w);
    for (int64_t j = 0; j < n_out; ++j) ASSERT_EQ(one.data<float>()[j], narrow.data<float>()[t * n_out + j]);
  }
}

TEST(Exl3Matmul, BiasIsAddedPerOutputColumn) {
  const Exl3Case c = test::exl3_cases().at(0);
  Exl3Weight w = test::exl3_case_weight(c);
  Tensor x = Tensor::empty({2, c.k}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i % 13) - 6) * 0.25f;
  Tensor plain = Tensor::empty({2, c.n}, DType::kF32), biased = Tensor::empty({2, c.n}, DType::kF32);
  cpu::exl3_matmul(plain, x, w);
  w.bias = Tensor::empty({c.n}, DType::kF16);
  for (int64_t j = 0; j < c.n; ++j) w.bias.data<uint16_t>()[j] = float_to_f16(static_cast<float>(j) * 0.5f);
  cpu::exl3_matmul(biased, x, w);
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t j = 0; j < c.n; ++j)
      EXPECT_EQ(biased.data<float>()[t * c.n + j], plain.data<float>()[t * c.n + j] + static_cast<float>(j) * 0.5f);
}

TEST(Exl3Matmul, RejectsBadShapesWithTheWeightName) {
  const Exl3Case c = test::exl3_cases().at(0);
  const Exl3Weight w = test::exl3_case_weight(c);
  Tensor wide = Tensor::zeros({1, c.k + 1}, DType::kF32), out = Tensor::empty({1, c.n}, DType::kF32);
  try {
    cpu::exl3_matmul(out, wide, w, "layers.3.experts.7.up_proj");
    FAIL() << "no error";
  } catch (const StatusError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.3.experts.7.up_proj"), std::string::npos) << e.what();
  }
  Exl3Weight bad = w;
  bad.bits = w.bits + 1;
  Tensor x = Tensor::zeros({1, c.k}, DType::kF32);
  EXPECT_THROW(cpu::exl3_matmul(out, x, bad, "w"), StatusError);
  EXPECT_THROW(exl3_decode_w_hat(bad, "w"), StatusError);
}

}  // namespace
}  // namespace tf
