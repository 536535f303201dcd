// glm5_load_bench DIR [bf16|f32] [dense|q4|fp8] [REPEATS]: the host side of a weight
// load (load_glm5_weights, what the CUDA engine does before the upload) of a checkpoint
// folder, timed: the fast route (get_native: mapped views, matrices built in their final
// dtype, layers on TF_LOAD_THREADS threads) and the f32 route (every tensor through an
// f32 copy, as before), in GB/s of checkpoint files. Prints "[load-bench]" lines; exits 1
// when the two routes disagree on any tensor's bytes.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "model/config.h"
#include "model/dense_quant.h"
#include "model/glm5/glm5_weights.h"
#include "f32_route_source.h"

namespace {

using namespace tf;

bool same(const Tensor& a, const Tensor& b) {
  if (a.is_null() || b.is_null()) return a.is_null() == b.is_null();
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}
bool same(const Matrix& a, const Matrix& b) {
  if (a.format() != b.format()) return false;
  return a.is_dense() ? same(a.dense(), b.dense()) : same(a.codes(), b.codes()) && same(a.scales(), b.scales());
}

// The big tensors of two loads agree (the unit test glm5_load_tests compares every one).
bool agree(const Glm5Weights& a, const Glm5Weights& b) {
  bool ok = same(a.embed, b.embed) && same(a.lm_head, b.lm_head) && a.layers.size() == b.layers.size();
  for (size_t i = 0; ok && i < a.layers.size(); ++i) {
    const LayerWeights &x = a.layers[i], &y = b.layers[i];
    ok = same(x.kda.q_proj, y.kda.q_proj) && same(x.kda.o_proj, y.kda.o_proj) && same(x.mla.q_b, y.mla.q_b) &&
         same(x.mla.o_proj, y.mla.o_proj) && same(x.dense.gate_up, y.dense.gate_up) &&
         same(x.moe.experts_gate_up, y.moe.experts_gate_up) && same(x.moe.experts_down, y.moe.experts_down) &&
         same(x.moe.shared.down, y.moe.shared.down);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [bf16|f32] [dense|q4|fp8] [REPEATS]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const DType dt = argc > 2 && std::string(argv[2]) == "f32" ? DType::kF32 : DType::kBF16;
  const std::string dense = argc > 3 ? argv[3] : "dense";
  const MatrixFormat q = dense_quant_format(dense).value_or(MatrixFormat::kDense);
  const int repeats = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  auto cfg = load_glm5_config(dir + "/config.json");
  if (!cfg) return std::fprintf(stderr, "%s\n", cfg.status().to_string().c_str()), 1;
  auto src = open_weight_source(dir, *cfg);
  if (!src) return std::fprintf(stderr, "%s\n", src.status().to_string().c_str()), 1;
  double file_bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") file_bytes += static_cast<double>(e.file_size());
  const test::F32RouteSource ref(**src);
  Expected<Glm5Weights> fast = internal_error("unset"), slow = internal_error("unset");
  for (int rep = 0; rep < repeats; ++rep)
    for (const WeightSource* s : {static_cast<const WeightSource*>(src->get()), static_cast<const WeightSource*>(&ref)}) {
      const auto t0 = std::chrono::steady_clock::now();
      Expected<Glm5Weights> w = load_glm5_weights(*s, cfg->text, 0, 1, dt, q);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!w) return std::fprintf(stderr, "%s\n", w.status().to_string().c_str()), 1;
      const bool native = s == src->get();
      std::printf("[load-bench] %s route, matrices %s, dense %s: %.2f s, %.2f GB/s of %.2f GB checkpoint files\n",
                  native ? "native" : "f32", dtype_name(dt), dense.c_str(), secs, file_bytes / 1e9 / secs,
                  file_bytes / 1e9);
      std::fflush(stdout);
      (native ? fast : slow) = std::move(w);
      if (rep + 1 == repeats && !native) {
        const bool ok = agree(*fast, *slow);
        std::printf("[load-bench] routes agree bit for bit: %s\n", ok ? "yes" : "NO");
        if (!ok) return 1;
      }
      if (!native) fast = slow = internal_error("released");  // one load held at a time
    }
  return 0;
}
