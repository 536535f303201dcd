// cuda_ops_bench's matmul_many section (cuda_matmul_many_bench.h): one layer's
// projections of a shared x, separate matmul calls vs one matmul_many call, each
// captured into a graph through Ops::capture (as a graphed decode step runs them)
// and replayed; weights rotate over copies so every call reads them from HBM.
// q4 matrices get random codes and scales (the bench measures bytes, not accuracy).
#include "cuda_matmul_many_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "cuda_graph_timing.h"
#include "kernels/api/matrix.h"
#include "kernels/cuda/cuda_ops.h"

namespace tf::bench {
namespace {

struct Proj {
  const char* name;
  int64_t n, k;
  bool q4;  // else dense bf16
};

Tensor random_host(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// A q4 matrix [n, k] with random codes and scales near 0.01, on the device.
Matrix random_q4(Ops& ops, int64_t n, int64_t k, uint32_t seed) {
  const int64_t groups = (k + kQ4Group - 1) / kQ4Group;
  Tensor codes = Tensor::empty({n, groups * kQ4GroupBytes}, DType::kU8);
  Tensor scales = Tensor::empty({n, groups}, DType::kF16);
  std::mt19937 rng(seed);
  auto* c = codes.data<uint8_t>();
  for (int64_t i = 0; i < codes.numel(); ++i) c[i] = static_cast<uint8_t>(rng());
  auto* s = static_cast<uint16_t*>(scales.raw());
  for (int64_t i = 0; i < scales.numel(); ++i) s[i] = float_to_f16(0.005f + 0.01f * static_cast<float>(rng() % 1000) / 1000);
  return Matrix::q4(ops.to_device(codes), ops.to_device(scales), k);
}

// A device copy of `w` (same format).
Matrix copy_of(Ops& ops, const Matrix& w) {
  const auto dup = [&](const Tensor& t) {
    Tensor d = ops.empty(t.shape(), t.dtype());
    ops.copy(d, t);
    return d;
  };
  if (w.is_dense()) return Matrix(dup(w.dense()));
  return w.with_storage(dup(w.codes()), dup(w.scales()));
}

// Seconds per captured call of fn(i), i = 0..calls-1 (Ops::capture, replayed).
double replay_time(Ops& ops, int calls, const std::function<void(int)>& fn) {
  auto graph = ops.capture([&]() {
    for (int i = 0; i < calls; ++i) fn(i);
  });
  if (!graph) throw StatusError(graph.status());
  cudaStream_t stream = cuda_ops_stream(ops);
  const auto replay = [&]() {
    const Status s = ops.replay(**graph);
    if (!s.is_ok()) throw StatusError(s);
  };
  replay();  // warm-up
  cudaEvent_t t0, t1;
  BENCH_CUDA(cudaEventCreate(&t0));
  BENCH_CUDA(cudaEventCreate(&t1));
  const int reps = 20;
  BENCH_CUDA(cudaEventRecord(t0, stream));
  for (int r = 0; r < reps; ++r) replay();
  BENCH_CUDA(cudaEventRecord(t1, stream));
  BENCH_CUDA(cudaEventSynchronize(t1));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms / 1e3 / (static_cast<double>(reps) * calls);
}

bool bench_set(Ops& ops, double hbm, const char* set_name, const std::vector<Proj>& projs) {
  // One copy of the set, then device copies up to >= 256 MB (L2 is 60 MB).
  std::vector<Matrix> first;
  int64_t set_bytes = 0;
  uint32_t seed = 1;
  for (const Proj& p : projs) {
    first.push_back(p.q4 ? random_q4(ops, p.n, p.k, seed++)
                         : Matrix(ops.to_device(random_host({p.n, p.k}, seed++).to_dtype(DType::kBF16))));
    set_bytes += first.back().nbytes();
  }
  const int copies = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / set_bytes + 1, 2, 128));
  std::vector<std::vector<Matrix>> sets{first};
  for (int c = 1; c < copies; ++c) {
    std::vector<Matrix> s;
    for (const Matrix& w : first) s.push_back(copy_of(ops, w));
    sets.push_back(std::move(s));
  }
  bool ok = true;
  const int64_t k = projs.front().k;
  for (int64_t m : {1, 8}) {
    const Tensor x = ops.to_device(random_host({m, k}, 100 + static_cast<uint32_t>(m)));
    std::vector<Tensor> sep, many;
    std::vector<Tensor*> outs;
    for (const Proj& p : projs) {
      sep.push_back(ops.zeros({m, p.n}));
      many.push_back(ops.zeros({m, p.n}));
    }
    for (Tensor& t : many) outs.push_back(&t);
    std::vector<std::vector<const Matrix*>> ptrs(sets.size());
    for (size_t c = 0; c < sets.size(); ++c)
      for (const Matrix& w : sets[c]) ptrs[c].push_back(&w);
    const auto separate = [&](int i) {
      const std::vector<Matrix>& s = sets[static_cast<size_t>(i) % sets.size()];
      for (size_t j = 0; j < s.size(); ++j) ops.matmul(sep[j], x, s[j]);
    };
    const auto together = [&](int i) { ops.matmul_many(outs, x, ptrs[static_cast<size_t>(i) % sets.size()]); };
    const double t_sep = replay_time(ops, copies, separate);
    const double t_many = replay_time(ops, copies, together);
    // Both ended with the same copy: the outputs must agree bit for bit.
    int64_t bad = 0;
    for (size_t j = 0; j < projs.size(); ++j) {
      const Tensor a = ops.to_host(sep[j]), b = ops.to_host(many[j]);
      bad += std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0;
    }
    ok = ok && bad == 0;
    std::printf("[matmul-many] %-8s m=%lld  %zu matrices %6.1f MB  separate %7.2f us  matmul_many %7.2f us  x%.2f  "
                "%5.1f%% HBM (separate %5.1f%%)  %s\n",
                set_name, static_cast<long long>(m), projs.size(), set_bytes / 1e6, t_sep * 1e6, t_many * 1e6,
                t_sep / t_many, 100.0 * set_bytes / t_many / hbm, 100.0 * set_bytes / t_sep / hbm,
                bad == 0 ? "bits equal" : "FAIL: outputs differ");
  }
  return ok;
}

}  // namespace

bool bench_matmul_many(Ops& ops, double hbm) {
  const int64_t h = 4096;
  bool ok = true;
  ok &= bench_set(ops, hbm, "kda",
                  {{"q_proj", 8192, h, true}, {"k_proj", 8192, h, true}, {"v_proj", 8192, h, true},
                   {"f_a", 128, h, false}, {"b_proj", 64, h, false}, {"g_a", 128, h, false}});
  ok &= bench_set(ops, hbm, "kda-bf16",
                  {{"f_a", 128, h, false}, {"b_proj", 64, h, false}, {"g_a", 128, h, false}});
  ok &= bench_set(ops, hbm, "mla", {{"q_a", 1536, h, true}, {"kv_a", 512, h, true}});
  ok &= bench_set(ops, hbm, "indexer",
                  {{"wk", 128, h, false}, {"compress_gate", 128, h, false}, {"weights_proj", 32, h, false}});
  if (!ok) std::printf("[matmul-many] FAIL: matmul_many differs from separate matmul calls\n");
  return ok;
}

}  // namespace tf::bench
