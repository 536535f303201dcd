// The GLM-5.3-Flash vision tower on the CUDA backend (part of glm5_cuda_tests, label
// gpu: run on the GPU machine) against transformers 5.17 (tests/data/model/tiny-vision)
// and the CPU backend:
//   f32 weights: the GPU only sums in other orders (cuBLAS SGEMM without TF32 above 64
//     rows, the online softmax of segment_attention), so max|Δ|/max|ref| ≤ 1e-5 (kTol),
//     the CPU tests' bound against transformers;
//   bf16 weights (the serving setup): the tiny weights are bf16-representable, but
//     cuBLAS rounds the activations to bf16 above 64 rows, so ≤ 3e-2 (kTolBf16);
// and an image alone matches its rows of a joint call (to 1e-6: cuBLAS may split a GEMM
// differently for another row count). "[cuda-parity] vision ..." lines print the errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "cuda_test_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "vision_fixture.h"

namespace tf::test {
namespace {

constexpr double kTol = 1e-5, kTolBf16 = 3e-2;

// encode() on `ops`, the result on the host.
Tensor encode_on(Ops& ops, const VisionFixture& f, DType weight_dtype, const Tensor& patches,
                 const std::vector<VisionGrid>& grids) {
  auto tower = Glm5VisionTower::load(f.config, *f.weights, ops, weight_dtype);
  EXPECT_TRUE(tower.has_value()) << tower.status().to_string();
  if (!tower.has_value()) return Tensor();
  auto out = (*tower)->encode(patches, grids);
  EXPECT_TRUE(out.has_value()) << out.status().to_string();
  return out.has_value() ? ops.to_host(*out) : Tensor();
}

void report(const char* what, const Tensor& got, const Tensor& ref, double tol) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const Deviation d = deviation(got, ref);
  std::printf("[cuda-parity] vision %-34s max|d| %.3g, max|d|/max|ref| %.3g (tol %.0e)\n", what, d.max_abs,
              d.rel, tol);
  EXPECT_LE(d.rel, tol) << what;
}

TEST(Glm5VisionCuda, ImagesAndVideoMatchTransformers) {
  Ops* gpu = gpu_ops();
  ASSERT_NE(gpu, nullptr);
  const VisionFixture f = load_vision_fixture();
  const std::vector<VisionGrid> grids = {f.grid("img0_grid"), f.grid("img1_grid")};
  const Tensor images = concat_rows({f.f32("img0_pixels"), f.f32("img1_pixels")});
  const Tensor video = f.f32("video_pixels");
  const Tensor ref_images = f.f32("vision_features"), ref_video = f.f32("video_features");
  std::unique_ptr<Ops> cpu = make_cpu_ops();
  const Tensor cpu_images = encode_on(*cpu, f, DType::kF32, images, grids);

  const Tensor g32 = encode_on(*gpu, f, DType::kF32, images, grids);
  report("images f32 vs transformers", g32, ref_images, kTol);
  report("images f32 vs cpu", g32, cpu_images, kTol);
  report("video f32 vs transformers", encode_on(*gpu, f, DType::kF32, video, {f.grid("video_grid")}),
         ref_video, kTol);
  const Tensor g16 = encode_on(*gpu, f, DType::kBF16, images, grids);
  report("images bf16 vs transformers", g16, ref_images, kTolBf16);
  report("video bf16 vs transformers", encode_on(*gpu, f, DType::kBF16, video, {f.grid("video_grid")}),
         ref_video, kTolBf16);
}

TEST(Glm5VisionCuda, AnImageAloneMatchesItsRowsOfAJointCall) {
  Ops* gpu = gpu_ops();
  ASSERT_NE(gpu, nullptr);
  const VisionFixture f = load_vision_fixture();
  const VisionGrid g0 = f.grid("img0_grid"), g1 = f.grid("img1_grid");
  const Tensor p0 = f.f32("img0_pixels"), p1 = f.f32("img1_pixels");
  const Tensor joint = encode_on(*gpu, f, DType::kF32, concat_rows({p0, p1}), {g0, g1});
  const Tensor alone = encode_on(*gpu, f, DType::kF32, p1, {g1});
  const int64_t n0 = g0.t * g0.h * g0.w / 4;
  ASSERT_EQ(joint.size(0), n0 + alone.size(0));
  report("image 1 alone vs joint", alone, joint.slice(0, n0, joint.size(0)).contiguous(), 1e-6);
}

}  // namespace
}  // namespace tf::test
