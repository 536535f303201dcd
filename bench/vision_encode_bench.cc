// vision_encode_bench: the GLM-5.3-Flash vision tower (release geometry: 24 blocks of width
// 1024, 16 heads of 64, MLP 4096, merger 4096 -> 10240 -> 4096) on CUDA with random bf16
// weights, timing encode() for one image of several sizes, and Ops::segment_attention alone
// at the same rows (16 heads of 64), beside the roofline of the image's matmul FLOPs at
// the bf16 tensor-core peak (what the time would be if the matmuls alone ran at peak).
//   vision_encode_bench [PEAK_TFLOPS=790] [CASE]   (CASE: only the sizes whose name contains it)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "model/config.h"
#include "model/glm5/glm5_vision.h"
#include "model/weight_source.h"

namespace {

using tf::Expected;
using tf::Shape;
using tf::Tensor;

// Every tensor the tower asks for, random at the shape it asks for (norm weights 1).
class RandomWeights : public tf::WeightSource {
 public:
  Expected<Tensor> get_f32(const std::string& name, const Shape& shape) const override {
    Tensor t = Tensor::empty(shape, tf::DType::kF32);
    float* p = t.data<float>();
    const bool norm = name.find("norm") != std::string::npos && name.ends_with(".weight");
    std::normal_distribution<float> d(0.0f, 0.02f);
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = norm ? 1.0f : d(rng_);
    return t;
  }
  bool has(const std::string&) const override { return true; }
  std::vector<std::string> unknown_tensors() const override { return {}; }

 private:
  mutable std::mt19937 rng_{7};
};

double seconds_of(tf::Ops& ops, const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  cudaDeviceSynchronize();
  (void)ops;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const double peak = argc > 1 ? std::atof(argv[1]) * 1e12 : 790e12;
  const std::string only = argc > 2 ? argv[2] : "";
  auto ops_or = tf::make_cuda_ops(0);
  if (!ops_or) {
    std::fprintf(stderr, "%s\n", ops_or.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **ops_or;
  tf::Glm5Config cfg;
  tf::Glm5VisionConfig& v = cfg.vision;
  v.present = true;
  v.out_hidden_size = 4096;  // the release's
  RandomWeights weights;
  auto tower = tf::Glm5VisionTower::load(cfg, weights, ops, tf::DType::kBF16);
  if (!tower) {
    std::fprintf(stderr, "load: %s\n", tower.status().to_string().c_str());
    return 1;
  }
  const int64_t c = v.hidden_size, inter = v.intermediate_size, o = v.out_hidden_size;
  const int64_t ip = v.projection_intermediate_size, width = (*tower)->patch_width();
  std::printf("vision tower: depth %d, width %lld, %d heads, MLP %lld, merger %lld -> %lld; bf16 weights; peak %.0f TFLOP/s\n",
              v.depth, static_cast<long long>(c), v.num_heads, static_cast<long long>(inter),
              static_cast<long long>(o), static_cast<long long>(ip), peak / 1e12);
  std::printf("%-22s %8s %8s %11s %12s %14s %9s %11s\n", "image (grid h x w)", "patches", "tokens",
              "encode ms", "attention ms", "matmul roofline", "% of it", "work MiB");
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  struct Case {
    const char* what;
    int64_t h, w;
  };
  for (const Case& k : {Case{"448x448", 32, 32}, Case{"1024x1024", 74, 74}, Case{"1080x1920", 78, 138},
                        Case{"2156x2884 (8000 tok)", 154, 206},
                        // One temporal group as large as MediaLimits::max_pixel_bytes lets a video's be
                        // (512 MiB of f32 patches: ~114k), e.g. two 4K-class frames.
                        Case{"video group 3332x6692", 238, 478}}) {
    if (!only.empty() && std::string(k.what).find(only) == std::string::npos) continue;
    const int64_t n = k.h * k.w;
    Tensor patches = Tensor::empty({n, width}, tf::DType::kF32);
    for (int64_t i = 0; i < patches.numel(); ++i) patches.data<float>()[i] = d(rng);
    const Tensor dev = ops.to_device(patches);
    const tf::VisionGrid grid{1, k.h, k.w};
    bool ok = true;
    // Working memory: the encode's peak of live device tensors above what was alive before it.
    ops.reset_memory_peak();
    const int64_t alive = ops.memory_use().in_use_bytes;
    const double enc = seconds_of(ops, [&] { ok = ok && (*tower)->encode(dev, {&grid, 1}).has_value(); }, 3);
    const double work_mib = static_cast<double>(ops.memory_use().peak_in_use_bytes - alive) / 1048576.0;
    Tensor q = ops.to_device(Tensor::zeros({n, v.num_heads, c / v.num_heads}, tf::DType::kF32));
    Tensor out = ops.empty({n, v.num_heads, c / v.num_heads});
    const std::vector<int32_t> off = {0, static_cast<int32_t>(n)};
    Tensor offsets = ops.to_device(Tensor::view_of(const_cast<int32_t*>(off.data()), {2}, tf::DType::kI32));
    const double att = seconds_of(ops, [&] { ops.segment_attention(out, q, q, q, offsets, 0.125f); }, 3) * v.depth;
    // Matmul FLOPs: patch embed, per block qkv + proj + MLP (gate, up, down), downsample, merger.
    const double flops = 2.0 * n * width * c +
                         v.depth * 2.0 * n * (3 * c * c + c * c + 3 * c * inter) +
                         2.0 * (n / 4) * (4 * c * o + o * o + 3 * o * ip);
    const double roof = flops / peak;
    std::printf("%-22s %8lld %8lld %11.1f %12.1f %12.2f ms %8.1f%% %11.1f%s\n", k.what,
                static_cast<long long>(n), static_cast<long long>(n / 4), enc * 1e3, att * 1e3, roof * 1e3,
                100.0 * roof / enc, work_mib, ok ? "" : "  (encode FAILED)");
  }
  return 0;
}
