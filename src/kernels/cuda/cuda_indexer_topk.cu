// indexer_topk_rows on the GPU: each decode row's top-k pools among its own
// (position + 1) / kp candidates, read from device memory, so the launch is one
// block per row whatever the lengths (capture-safe).
//
// A block finds the k-th largest score by a radix select on order-preserving
// 32-bit keys (4 passes of 8 bits, a shared histogram each), then writes, in
// ascending pool order, every pool above that key and the lowest-index pools equal
// to it until k are taken (block-wide prefix sums keep the order). That is the set
// topk(kLowerIndex) keeps. kTorchCpu goes through the host (PyTorch's CPU
// tie-breaking depends on the row length), like topk(kTorchCpu). 1024 threads a row:
// per-warp histograms with same-bin lanes aggregated (scores of one magnitude share
// their top byte), the bin search by one warp, and the final pass over contiguous
// segments with two block scans, so long rows (32K+ candidates) stay cheap.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Larger float -> larger unsigned key (-0 counts as +0, as float comparisons do).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(kThreads)
    topk_rows_kernel(int32_t* __restrict__ selected, const float* __restrict__ scores, const int32_t* __restrict__ pos,
                     int64_t width, int64_t s, int64_t kp) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[kWarps][256];  // a histogram per warp (fewer shared atomics in flight)
  __shared__ int total[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining;
  const int64_t b = blockIdx.x;
  const int64_t n = min(int64_t(pos[b] + 1) / kp, width), k = min(s, n);
  int32_t* out = selected + b * s;
  const float* x = scores + b * width;
  for (int64_t j = k + threadIdx.x; j < s; j += blockDim.x) out[j] = -1;
  if (k == 0) return;
  if (k == n) {  // every candidate
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) out[j] = static_cast<int32_t>(j);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t prefix = 0, mask = 0;
  int remaining = static_cast<int>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) (&hist[0][0])[i] = 0;
    __syncthreads();
    // Lanes of a warp with the same bin add once (their leader adds the count).
    for (int64_t base = 0; base < n; base += kThreads) {
      const int64_t j = base + threadIdx.x;
      const uint32_t u = j < n ? order_key(x[j]) : 0u;
      const bool mine = j < n && (u & mask) == prefix;
      const unsigned active = __ballot_sync(0xffffffffu, mine);
      if (mine) {
        const unsigned bin = (u >> shift) & 255u;
        const unsigned peers = __match_any_sync(active, bin);
        if (lane == __ffs(peers) - 1) hist[warp][bin] += __popc(peers);
      }
    }
    __syncthreads();
    if (threadIdx.x < 256) {
      int c = 0;
      for (int w = 0; w < kWarps; ++w) c += hist[w][threadIdx.x];
      total[threadIdx.x] = c;
    }
    __syncthreads();
    if (warp == 0) {  // the bin holding the remaining-th largest: lane l scans bins 255-8l down to 248-8l
      int c[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += c[i] = total[255 - 8 * lane - i];
      int incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const int excl = incl - sum;
      if (excl < remaining && remaining <= incl) {
        int rem = remaining - excl, bin = 255 - 8 * lane;
        for (int i = 0; i < 7 && c[i] < rem; ++i, --bin) rem -= c[i];
        s_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
        s_remaining = rem;
      }
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 0xFFu << shift;
  }
  // prefix is the k-th largest key; `remaining` pools equal to it are taken, lowest first.
  // A contiguous segment per thread keeps the output in ascending pool order.
  const int64_t per = (n + kThreads - 1) / kThreads;
  const int64_t j0 = min(n, int64_t(threadIdx.x) * per), j1 = min(n, j0 + per);
  int gt = 0, eq = 0;
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t u = order_key(x[j]);
    gt += u > prefix;
    eq += u == prefix;
  }
  int eq_before = 0, eq_total = 0;
  Scan(scan_tmp).ExclusiveSum(eq, eq_before, eq_total);
  __syncthreads();
  const int take = gt + max(0, min(eq, remaining - eq_before));
  int at = 0, taken = 0;
  Scan(scan_tmp).ExclusiveSum(take, at, taken);
  int eq_seen = eq_before;
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t u = order_key(x[j]);
    if (u > prefix || (u == prefix && eq_seen++ < remaining)) out[at++] = static_cast<int32_t>(j);
  }
}

void raise_if(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

}  // namespace

void indexer_topk_rows(CudaContext& ctx, Tensor& selected, const Tensor& scores, const DecodeRowsView& rows,
                       TopkTies ties) {
  if (rows.rows < 0 || (rows.rows > 0 && rows.positions == nullptr) || rows.kpool < 1)
    throw StatusError(invalid_argument("indexer_topk_rows: decode rows without positions or pool size"));
  check_dev(ctx, "indexer_topk_rows scores", scores, DType::kF32);
  check_dev(ctx, "indexer_topk_rows selected", selected, DType::kI32);
  const int64_t b = rows.rows;
  if (b == 0) return;
  if (scores.size(0) != b || selected.size(0) != b)
    throw StatusError(invalid_argument("indexer_topk_rows: scores " + scores.describe() + ", selected " +
                                       selected.describe() + " for " + std::to_string(b) + " rows"));
  const int64_t width = scores.numel() / b, s = selected.numel() / b, kp = rows.kpool;
  if (s == 0) return;
  if (ties == TopkTies::kTorchCpu) {
    // PyTorch's CPU choice among equal scores depends on the row length: on the host.
    std::vector<float> hx(static_cast<size_t>(b * width));
    std::vector<int32_t> hp(static_cast<size_t>(b)), hs(static_cast<size_t>(b * s), -1);
    raise_if(cuda_status(cudaMemcpyAsync(hx.data(), scores.raw(), scores.nbytes(), cudaMemcpyDeviceToHost, ctx.stream),
                         "indexer_topk_rows download"));
    raise_if(cuda_status(cudaMemcpyAsync(hp.data(), rows.positions, hp.size() * 4, cudaMemcpyDeviceToHost, ctx.stream),
                         "indexer_topk_rows download"));
    raise_if(cuda_status(cudaStreamSynchronize(ctx.stream), "indexer_topk_rows download"));
    std::vector<float> vals;
    std::vector<int32_t> idx;
    for (int64_t r = 0; r < b; ++r) {
      const int64_t n = std::min<int64_t>((hp[r] + 1) / kp, width), k = std::min(s, n);
      if (k == 0) continue;
      vals.resize(k);
      idx.resize(k);
      topk_torch_cpu_host(vals.data(), idx.data(), hx.data() + r * width, 1, n, static_cast<int>(k));
      std::sort(idx.begin(), idx.end());
      std::copy(idx.begin(), idx.end(), hs.begin() + r * s);
    }
    raise_if(cuda_status(cudaMemcpyAsync(selected.raw(), hs.data(), selected.nbytes(), cudaMemcpyHostToDevice,
                                         ctx.stream),
                         "indexer_topk_rows upload"));
    raise_if(cuda_status(cudaStreamSynchronize(ctx.stream), "indexer_topk_rows upload"));  // hs dies here
    return;
  }
  topk_rows_kernel<<<static_cast<unsigned>(b), kThreads, 0, ctx.stream>>>(
      selected.data<int32_t>(), scores.data<float>(), rows.positions, width, s, kp);
  check_launch("indexer_topk_rows");
}

}  // namespace tf::cuda
