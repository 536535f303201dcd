// Speculative verify steps on the CUDA backend (label gpu): every verified row equals
// serial decoding (graph-replayed decode steps) bit for bit, whatever rows each commit
// keeps, with f32 and bf16 weights, DENSE=q4 and an fp8 latent cache, alone and beside
// a decoding batch-mate. The CPU side is glm5_speculation_test.cc.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_test_ops.h"
#include "glm5_fixture.h"
#include "glm5_speculation_check.h"

namespace tf::test {
namespace {

TEST(Glm5SpeculationCuda, VerifiedRowsEqualSerialDecoding) {
  struct Variant {
    const char* name;
    DType weights, latent;
    MatrixFormat dense;
  };
  const Variant variants[] = {{"f32 weights, bf16 cache", DType::kF32, DType::kBF16, MatrixFormat::kDense},
                              {"bf16 weights, DENSE=q4, fp8 cache", DType::kBF16, DType::kF8E4M3, MatrixFormat::kQ4}};
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    auto comm = make_single_rank_communicator();
    for (const Variant& v : variants) {
      Glm5Options o;
      o.page_size = 16;
      o.num_pages = 512;
      o.latent_dtype = v.latent;
      o.weight_dtype = v.weights;
      o.dense_quant = v.dense;
      auto ws = open_weights(f);
      ASSERT_TRUE(ws);
      auto model = Glm5Model::load(f.config, *ws, *gpu_ops(), *comm, o);
      ASSERT_TRUE(model.has_value()) << model.status().to_string();
      for (bool busy : {false, true}) {
        const SpeculationCheck c =
            check_speculation(**model, f.prompt_ids, 9, {4, 7, 2, 5, 1, 3, 6}, {1, 3, 0, 2, 0, 1, 4}, busy);
        std::printf("[cuda-spec] [%s, %s%s] %lld verify steps (%lld partial commits): %lld of %lld rows differ, "
                    "max |d| %.3g\n",
                    f.name.c_str(), v.name, busy ? ", beside a decoding sequence" : "",
                    static_cast<long long>(c.verify_steps), static_cast<long long>(c.partial_commits),
                    static_cast<long long>(c.rows_differing), static_cast<long long>(c.rows_compared), c.max_abs_diff);
        ASSERT_EQ(c.error, "") << f.name;
        EXPECT_EQ(c.rows_differing, 0) << f.name << " " << v.name;
      }
    }
  }
}

}  // namespace
}  // namespace tf::test
