// cuda_mla_decode_bench: the decode-row MLA/DSA ops at GLM-5.3-Flash shapes (64 heads,
// latent width 512, fp8 pages of 64 tokens with per-token scales, pools of 4 tokens,
// the incomplete tail pool appended) on the CUDA backend.
//
//  mla_sparse_attention_rows for rows 1, 4, 8, 16, 64 and 16 / 512 / 2048 selected pools
//  (W = 4 S + 3 indices; each row's context holds twice the selected pools, its pages
//  scrambled): us per call eager (events around back-to-back calls) and from a CUDA
//  graph of the calls, GB/s of the latent, q and output bytes, the % of the measured
//  HBM copy bandwidth, TFLOP/s (4 H R flops per row token). Self-check: every row
//  equals, bit for bit, the one-sequence op on that row, and all outputs are finite.
//  indexer_scores_rows and indexer_topk_rows (S = 512 pools) for rows 1, 4 and 16 at 512 ..
//  262144 candidate pools (2K .. 1M tokens): us per call (graph-timed) and GB/s of pooled
//  keys. TF_INDEXER_POOLS_PER_THREAD=1|2|4 (scores) and TF_INDEXER_TOPK=rows (one block a
//  row) select the kernels' variants (cuda_indexer.cu, cuda_indexer_topk.cu).
//  head_matmul (the absorbed w_uk_t / w_uv products, bf16) at 1, 4, 8 rows ("head-matmul").
// Lines start with "mla-decode" / "indexer-rows"; "FAILED" marks a failed check.
// Kernel knobs (read once per process, for A/B runs): TF_MLA_DECODE_SPLIT=v1 (the first
// split kernel), TF_MLA_DECODE_CHUNKS=N, TF_MLA_DECODE_MMA=0, TF_MLA_DECODE_INLINE=1 (cuda_mla_decode.cu),
// TF_HEAD_MATMUL_GEMV=0 (cuda_linear.cu: head_matmul through small_gemm).
//   cuda_mla_decode_bench [--quick | --decode (rows 1, 2, 4, 8 and head_matmul only) | --indexer]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_graph_timing.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

using tf::DType;
using tf::Tensor;

constexpr int64_t kHeads = 64, kWidth = 512, kPageSize = 64, kPool = 4, kIndexDim = 128, kIndexHeads = 32;

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("mla-decode: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

int64_t addr(const Tensor& t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw())); }

Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

Tensor host_i64(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

Tensor host_randn(const tf::Shape& shape, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(tf::shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_floats(shape, v);
}

// Fills `bytes` of device memory by tiling a random host block (`fp8`: bytes that are
// finite e4m3 values; otherwise N(0, 0.5) floats).
void fill_device(tf::Ops& ops, void* dst, int64_t bytes, bool fp8, uint32_t seed) {
  const int64_t block = std::min<int64_t>(bytes, int64_t{1} << 23);
  Tensor src;
  if (fp8) {
    std::mt19937 rng(seed);
    Tensor h = Tensor::empty({block}, DType::kU8);
    for (int64_t i = 0; i < block; ++i) h.data<uint8_t>()[i] = static_cast<uint8_t>((rng() % 0x78) | (rng() & 0x80));
    src = ops.to_device(h);
  } else {
    src = ops.to_device(host_randn({block / 4}, seed, 0.5f));
  }
  for (int64_t at = 0; at < bytes; at += block)
    check(cudaMemcpy(static_cast<char*>(dst) + at, src.raw(), static_cast<size_t>(std::min(block, bytes - at)),
                     cudaMemcpyDeviceToDevice),
          "fill");
}

// Seconds per call: events around `iters` back-to-back calls (after 3 warm-ups).
double eager_seconds(cudaStream_t stream, int iters, const std::function<void()>& call) {
  for (int i = 0; i < 3; ++i) call();
  return tf::bench::event_seconds(stream, iters, call);
}

// Seconds per call from a CUDA graph of `calls` calls replayed 5 times; -1 when the
// capture fails (then the stream is left usable).
double graph_seconds(cudaStream_t stream, int calls, const std::function<void()>& call) {
  cudaDeviceSynchronize();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
  bool ok = true;
  try {
    for (int i = 0; i < calls; ++i) call();
  } catch (const tf::StatusError&) {
    ok = false;
  }
  ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok;
  ok = ok && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  double s = -1;
  if (ok) {
    cudaGraphLaunch(exec, stream);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    for (int r = 0; r < 5; ++r) cudaGraphLaunch(exec, stream);
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    s = ms / 1e3 / (5.0 * calls);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  cudaDeviceSynchronize();
  return s;
}

bool bench_attention(tf::Ops& ops, cudaStream_t stream, double hbm, int64_t rows, int64_t sel, int iters) {
  const int64_t w = sel * kPool + kPool - 1;
  const int64_t ctx = 2 * sel * kPool;           // complete tokens of each row's context
  const int64_t tokens = ctx + kPool - 1;        // + the incomplete tail pool
  const int64_t pages_per_row = (tokens + kPageSize - 1) / kPageSize, num_pages = rows * pages_per_row;
  Tensor pages = ops.empty({num_pages * kPageSize * kWidth}, DType::kU8);
  fill_device(ops, pages.raw(), pages.nbytes(), true, 11);
  std::vector<float> hsc(static_cast<size_t>(num_pages * kPageSize));
  std::mt19937 rng(static_cast<uint32_t>(rows * 7919 + sel));
  for (float& s : hsc) s = 0.002f + 0.002f * static_cast<float>(rng() % 100) / 100.0f;
  Tensor scales = ops.to_device(Tensor::from_floats({num_pages * kPageSize}, hsc));
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  for (int64_t i = 0; i < num_pages; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<Tensor> tables;
  std::vector<int64_t> table_addrs;
  std::vector<int32_t> positions, idx;
  for (int64_t r = 0; r < rows; ++r) {
    tables.push_back(ops.to_device(host_i32(std::vector<int32_t>(perm.begin() + r * pages_per_row,
                                                                 perm.begin() + (r + 1) * pages_per_row))));
    table_addrs.push_back(addr(tables.back()));
    positions.push_back(static_cast<int32_t>(tokens - 1));
    // Every other pool, one of each pair at random: ascending, distinct.
    for (int64_t s = 0; s < sel; ++s) {
      const int64_t pool = 2 * s + static_cast<int64_t>(rng() & 1);
      for (int64_t k = 0; k < kPool; ++k) idx.push_back(static_cast<int32_t>(pool * kPool + k));
    }
    for (int64_t k = 0; k < kPool - 1; ++k) idx.push_back(static_cast<int32_t>(ctx + k));
  }
  Tensor dpos = ops.to_device(host_i32(positions)), dtabs = ops.to_device(host_i64(table_addrs));
  Tensor didx = ops.to_device(host_i32(idx)).reshape({rows, w});
  Tensor q = ops.to_device(host_randn({rows, kHeads, kWidth}, 5, 0.05f));
  Tensor out = ops.empty({rows, kHeads, kWidth});
  tf::DecodeRowsView v;
  v.rows = rows;
  v.positions = dpos.data<int32_t>();
  v.page_tables = dtabs.data<int64_t>();
  v.pages = pages.raw();
  v.scales = scales.data<float>();
  v.dtype = DType::kF8E4M3;
  v.page_size = kPageSize;
  v.width = kWidth;
  v.page_stride = kPageSize * kWidth;
  const float scale = 1.0f / std::sqrt(192.0f);
  auto call = [&] { ops.mla_sparse_attention_rows(out, q, v, didx, scale); };
  if (iters == 0) {  // --profile: one call for a profiler
    call();
    std::printf("mla-decode profile rows=%lld W=%lld: %s\n", static_cast<long long>(rows), static_cast<long long>(w),
                check(cudaStreamSynchronize(stream), "profile call") ? "done" : "FAILED");
    return true;
  }
  const double te = eager_seconds(stream, iters, call);
  const double tg = graph_seconds(stream, 8, call);
  // Self-check: finite, and each row equals the one-sequence op on it alone.
  call();
  const Tensor got = ops.to_host(out);
  bool ok = true;
  for (int64_t i = 0; i < got.numel(); ++i) ok = ok && std::isfinite(got.data<float>()[i]);
  for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 4)) {
    tf::LatentPagesView one{pages.raw(), scales.data<float>(), DType::kF8E4M3, kPageSize, kWidth,
                            kPageSize * kWidth, tables[r].data<int32_t>(), tokens};
    Tensor o1 = ops.empty({1, kHeads, kWidth});
    ops.mla_sparse_attention(o1, q.slice(0, r, r + 1), one, didx.slice(0, r, r + 1), scale);
    const Tensor h1 = ops.to_host(o1);
    ok = ok && std::memcmp(h1.raw(), got.data<float>() + r * kHeads * kWidth, h1.nbytes()) == 0;
  }
  const double n = static_cast<double>(rows) * static_cast<double>(w);
  const double bytes = n * (kWidth + 4 + 12) + static_cast<double>(rows) * kHeads * kWidth * 8;
  const double flops = n * 4.0 * kHeads * kWidth;
  const double t = tg > 0 ? tg : te;
  std::printf("mla-decode rows=%-3lld pools=%-5lld W=%-5lld  eager %8.1f us  graph %8.1f us  %6.0f GB/s (%4.1f%% HBM)  "
              "%5.1f TFLOP/s  %s\n",
              static_cast<long long>(rows), static_cast<long long>(sel), static_cast<long long>(w), te * 1e6,
              tg > 0 ? tg * 1e6 : -1.0, bytes / t / 1e9, 100.0 * bytes / t / hbm, flops / t / 1e12,
              ok ? "ok" : "FAILED (row != one-sequence op, or not finite)");
  std::printf("{\"bench\": \"mla_decode_rows\", \"rows\": %lld, \"pools\": %lld, \"eager_us\": %.2f, \"graph_us\": %.2f}\n",
              static_cast<long long>(rows), static_cast<long long>(sel), te * 1e6, tg * 1e6);
  return ok;
}

void bench_indexer(tf::Ops& ops, cudaStream_t stream, double hbm, int64_t rows, int64_t pools, int iters) {
  int64_t width = 64;
  while (width < pools) width *= 2;
  std::vector<Tensor> keys;
  std::vector<int64_t> key_addrs;
  std::vector<int32_t> positions;
  for (int64_t r = 0; r < rows; ++r) {
    keys.push_back(ops.empty({pools, kIndexDim}));
    fill_device(ops, keys.back().raw(), keys.back().nbytes(), false, 20 + static_cast<uint32_t>(r));
    key_addrs.push_back(addr(keys.back()));
    positions.push_back(static_cast<int32_t>(pools * kPool - 1 - (r % kPool)));  // (pos + 1) / kp pools at most
  }
  Tensor dpos = ops.to_device(host_i32(positions)), dkeys = ops.to_device(host_i64(key_addrs));
  Tensor q = ops.to_device(host_randn({rows, kIndexHeads, kIndexDim}, 6, 1.0f));
  Tensor wts = ops.to_device(host_randn({rows, kIndexHeads}, 7, 1.0f));
  Tensor scores = ops.empty({rows, width});
  Tensor sel = ops.empty({rows, 512}, DType::kI32);
  tf::DecodeRowsView v;
  v.rows = rows;
  v.positions = dpos.data<int32_t>();
  v.pool_keys = dkeys.data<int64_t>();
  v.kpool = kPool;
  v.index_dim = kIndexDim;
  auto score_call = [&] { ops.indexer_scores_rows(scores, v, q, wts, 1.0f / std::sqrt(128.0f), 0); };
  const double ts_eager = eager_seconds(stream, iters, score_call);
  const double ts_graph = graph_seconds(stream, 8, score_call);
  const double ts = ts_graph > 0 ? ts_graph : ts_eager;
  // Scores that look like the model's (the kernel above, over random keys), then the top-k
  // from a graph too (its scratch comes from the graph's arena).
  score_call();
  auto topk_call = [&] { ops.indexer_topk_rows(sel, scores, v, tf::TopkTies::kLowerIndex); };
  const double tk_eager = eager_seconds(stream, iters, topk_call);
  const double tk_graph = graph_seconds(stream, 8, topk_call);
  const double tk = tk_graph > 0 ? tk_graph : tk_eager;
  const double bytes = static_cast<double>(rows) * pools * (kIndexDim * 4 + 4);
  std::printf(
      "indexer-rows rows=%-3lld pools=%-7lld  scores %9.1f us graph (eager %7.1f; %6.0f GB/s, %4.1f%% HBM)  "
      "topk(512) %9.1f us graph (eager %7.1f)\n",
      static_cast<long long>(rows), static_cast<long long>(pools), ts * 1e6, ts_eager * 1e6, bytes / ts / 1e9,
      100.0 * bytes / ts / hbm, tk * 1e6, tk_eager * 1e6);
  std::printf("{\"bench\": \"indexer_rows\", \"rows\": %lld, \"pools\": %lld, \"scores_us\": %.2f, \"topk_us\": %.2f}\n",
              static_cast<long long>(rows), static_cast<long long>(pools), ts * 1e6, tk * 1e6);
}

// The absorbed MLA per-head products at decode rows (head_matmul: w_uk_t [H, R, dn] and
// w_uv [H, dv, R], bf16 as loaded): graph-timed us and % of HBM for the weight bytes.
void bench_head_matmul(tf::Ops& ops, cudaStream_t stream, double hbm, int64_t rows, int64_t n, int64_t k,
                       bool once = false) {
  Tensor w = ops.empty({kHeads, n, k}, DType::kBF16);
  fill_device(ops, w.raw(), w.nbytes(), false, 31);
  Tensor x = ops.to_device(host_randn({rows, kHeads, k}, 8, 1.0f));
  Tensor out = ops.empty({rows, kHeads, n});
  auto call = [&] { ops.head_matmul(out, x, w); };
  if (once) {
    call();
    check(cudaStreamSynchronize(stream), "head_matmul profile call");
    return;
  }
  const double te = eager_seconds(stream, 20, call);
  const double tg = graph_seconds(stream, 8, call);
  const double t = tg > 0 ? tg : te;
  const double bytes = static_cast<double>(w.nbytes());
  std::printf("head-matmul rows=%-3lld [%lld, %lld, %lld] bf16  graph %7.2f us (eager %7.2f)  %6.0f GB/s (%4.1f%% HBM)\n",
              static_cast<long long>(rows), static_cast<long long>(kHeads), static_cast<long long>(n),
              static_cast<long long>(k), t * 1e6, te * 1e6, bytes / t / 1e9, 100.0 * bytes / t / hbm);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --decode: the decode batch sizes only (attention at 1, 2, 4, 8 rows, head_matmul), no indexer.
  const bool decode = argc > 1 && std::strcmp(argv[1], "--decode") == 0;
  // --profile: one attention call at rows 1 and 8, W = 67 and 2051, and one head_matmul of each shape at 1 row,
  // nothing timed (for ncu).
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  // --indexer: the indexer's scores and top-k only.
  const bool indexer_only = argc > 1 && std::strcmp(argv[1], "--indexer") == 0;
  auto made = tf::make_cuda_ops(0);
  if (!made) {
    std::printf("mla-decode: FAILED: %s\n", made.status().to_string().c_str());
    return 1;
  }
  tf::Ops& ops = **made;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(tf::cuda_ops_stream(ops));
  const size_t copy_bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (!check(cudaMalloc(&a, copy_bytes), "cudaMalloc") || !check(cudaMalloc(&b, copy_bytes), "cudaMalloc")) return 1;
  cudaMemcpy(b, a, copy_bytes, cudaMemcpyDeviceToDevice);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) cudaMemcpy(b, a, copy_bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  const double hbm = 2.0 * 5 * copy_bytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaFree(a);
  cudaFree(b);
  std::printf("mla-decode measured HBM bandwidth (D2D copy): %.0f GB/s\n", hbm / 1e9);
  bool ok = true;
  try {
    if (profile) {
      for (int64_t sel : {16, 512})
        for (int64_t rows : {1, 8}) bench_attention(ops, stream, hbm, rows, sel, 0);
      bench_head_matmul(ops, stream, hbm, 1, kWidth, 256, true);
      bench_head_matmul(ops, stream, hbm, 1, 256, kWidth, true);
      return 0;
    }
    for (int64_t sel : {16, 512, 2048})
      for (int64_t rows : {1, 2, 4, 8, 16, 64}) {
        if (indexer_only || (quick && rows != 1 && rows != 16 && rows != 64) ||
            (decode ? rows > 8 : rows == 2))
          continue;
        ok = bench_attention(ops, stream, hbm, rows, sel, quick ? 10 : 30) && ok;
      }
    for (int64_t rows : {1, 4, 8}) {
      if (indexer_only) break;
      bench_head_matmul(ops, stream, hbm, rows, kWidth, 256);  // q_nope -> latent (w_uk_t)
      bench_head_matmul(ops, stream, hbm, rows, 256, kWidth);  // latent -> v (w_uv)
    }
    for (int64_t rows : {1, 4, 16})
      for (int64_t pools : {512, 8192, 32768, 131072, 262144}) {
        if ((quick && (pools == 8192 || pools == 32768 || rows == 4)) || decode) continue;
        bench_indexer(ops, stream, hbm, rows, pools, quick ? 5 : 20);
      }
  } catch (const tf::StatusError& e) {
    std::printf("mla-decode: FAILED: %s\n", e.status().to_string().c_str());
    return 1;
  }
  std::printf("mla-decode: %s\n", ok ? "all checks passed" : "FAILED");
  return ok ? 0 : 1;
}
