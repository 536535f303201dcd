// indexer_topk_rows on the GPU: each decode row's top-k pools among its own
// (position + 1) / kp candidates, read from device memory, so the launches depend only
// on the row count and the score buffer's width (capture-safe).
//
// The selection is a block-wide radix select over keys held in registers: order-
// preserving 32-bit keys, 4 passes of 8 bits (a histogram per warp, counted by shared
// atomics: on an H100 these beat aggregating a warp's equal bins with __match_any_sync
// first, 24 against 32 us at 32K pools), the bin search by one warp; then, in ascending
// pool order, every entry above the k-th largest key and the lowest-index entries equal
// to it until k are taken (two block scans over contiguous segments keep the order).
// That is the set topk(kLowerIndex) keeps.
//  - Buffers up to kChunk pools: one block per row over the row's scores.
//  - Longer buffers (long contexts: one block a row waited on its loads, ~55 us at 32K
//    pools on an H100): every kChunk-pool chunk of a row keeps its own top-k (a block
//    each, all rows at once), then one block per row selects among those candidates (at
//    most kMaxCandidates, in ascending pool order). A pool of the row's top-k is in its
//    chunk's top-k (fewer than k entries precede it in the chunk), so the two steps keep
//    the same set, ties included.
//  - Past kMaxCandidates candidates (no 1M-token window with k = 512 gets there) one
//    block a row reads the keys beyond its registers again at every pass.
// kTorchCpu goes through the host (PyTorch's CPU tie-breaking depends on the row
// length), like topk(kTorchCpu).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cub/block/block_scan.cuh>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kChunkPerThread = 8;                      // pools a thread holds in the one-chunk select
constexpr int64_t kChunk = kThreads * kChunkPerThread;  // 8,192 pools (32K tokens at 4 per pool)
constexpr int kMaxCandPerThread = 32;                   // candidates a thread holds in the second step
constexpr int64_t kMaxCandidates = int64_t{kThreads} * kMaxCandPerThread;

// Larger float -> larger unsigned key (-0 counts as +0, as float comparisons do). Key 0
// marks an absent entry: the one float that maps there (a negative NaN with every
// payload bit set) takes key 1, below every number either way.
__device__ __forceinline__ uint32_t order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return max((u & 0x80000000u) ? ~u : (u | 0x80000000u), 1u);
}

struct SelectShared {
  typename cub::BlockScan<int, kThreads>::TempStorage scan;
  int hist[kWarps][256];  // a histogram per warp (fewer shared atomics in flight)
  int total[256];
  uint32_t prefix;
  int remaining;
};

// Selects the k largest of a block's entries and calls emit(e, key, rank) for each kept
// entry e of the thread's segment with its rank in ascending entry order (rank < k). Thread t
// holds the contiguous segment of `per` entries from t * per (the same `per` in every
// thread): the first R keys in registers (reg; 1,024 threads leave 64 registers a
// thread), the rest through load(e) at every pass. Key 0 is an absent entry; k >= 1 and
// at least k entries are present.
template <int R, class Load, class Emit>
__device__ void select_top(const uint32_t (&reg)[R], int64_t per, Load load, int k, SelectShared& sh,
                           Emit emit) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < kWarps * 256; i += kThreads) (&sh.hist[0][0])[i] = 0;
    __syncthreads();
    auto count = [&](uint32_t key) {
      if (key != 0 && (key & mask) == prefix) atomicAdd(&sh.hist[warp][(key >> shift) & 255u], 1);
    };
#pragma unroll
    for (int e = 0; e < R; ++e) count(reg[e]);
    for (int64_t e = R; e < per; ++e) count(load(e));
    __syncthreads();
    if (threadIdx.x < 256) {
      int c = 0;
      for (int w = 0; w < kWarps; ++w) c += sh.hist[w][threadIdx.x];
      sh.total[threadIdx.x] = c;
    }
    __syncthreads();
    if (warp == 0) {  // the bin holding the remaining-th largest: lane l scans bins 255-8l down to 248-8l
      int c[8], sum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum += c[i] = sh.total[255 - 8 * lane - i];
      int incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const int excl = incl - sum;
      if (excl < remaining && remaining <= incl) {
        int rem = remaining - excl, bin = 255 - 8 * lane;
        for (int i = 0; i < 7 && c[i] < rem; ++i, --bin) rem -= c[i];
        sh.prefix = prefix | (static_cast<uint32_t>(bin) << shift);
        sh.remaining = rem;
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    remaining = sh.remaining;
    mask |= 0xFFu << shift;
  }
  // prefix is the k-th largest key (a present entry's, so >= 1); `remaining` entries equal
  // to it are taken, lowest first.
  int gt = 0, eq = 0;
  auto tally = [&](uint32_t key) {
    gt += key > prefix;
    eq += key == prefix;
  };
#pragma unroll
  for (int e = 0; e < R; ++e) tally(reg[e]);
  for (int64_t e = R; e < per; ++e) tally(load(e));
  using Scan = cub::BlockScan<int, kThreads>;
  int eq_before = 0, eq_total = 0;
  Scan(sh.scan).ExclusiveSum(eq, eq_before, eq_total);
  __syncthreads();
  const int take = gt + max(0, min(eq, remaining - eq_before));
  int at = 0, taken = 0;
  Scan(sh.scan).ExclusiveSum(take, at, taken);
  int eq_seen = eq_before;
  auto keep = [&](int64_t e, uint32_t key) {
    if (key > prefix || (key == prefix && eq_seen++ < remaining)) emit(e, key, at++);
  };
#pragma unroll
  for (int e = 0; e < R; ++e) keep(e, reg[e]);
  for (int64_t e = R; e < per; ++e) keep(e, load(e));
}

__device__ __forceinline__ int64_t row_pools(const int32_t* pos, int64_t b, int64_t kp, int64_t width) {
  return min(int64_t(pos[b] + 1) / kp, width);
}

// A row's output slots past its k pools get -1; when the row has no more than k pools
// (k == n) they are all of them, written here. True when nothing is left to select.
__device__ __forceinline__ bool select_all(int32_t* out, int64_t n, int64_t k, int64_t s) {
  for (int64_t j = k + threadIdx.x; j < s; j += kThreads) out[j] = -1;
  if (k < n) return false;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) out[j] = static_cast<int32_t>(j);
  return true;
}

// A block per row over the row's scores: every thread holds kChunkPerThread of them in
// registers (buffers up to kChunk pools); longer buffers (past what the two steps below
// take) read the rest again at every pass.
__global__ void __launch_bounds__(kThreads)
    topk_rows_kernel(int32_t* __restrict__ selected, const float* __restrict__ scores,
                     const int32_t* __restrict__ pos, int64_t width, int64_t s, int64_t kp) {
  __shared__ SelectShared sh;
  const int64_t b = blockIdx.x, n = row_pools(pos, b, kp, width), k = min(s, n);
  int32_t* out = selected + b * s;
  if (select_all(out, n, k, s)) return;
  const float* x = scores + b * width;
  const int64_t per = (width + kThreads - 1) / kThreads, j0 = int64_t(threadIdx.x) * per;
  auto load = [&](int64_t e) { return j0 + e < n ? order_key(x[j0 + e]) : 0u; };
  uint32_t key[kChunkPerThread];
#pragma unroll
  for (int e = 0; e < kChunkPerThread; ++e) key[e] = e < per ? load(e) : 0u;
  select_top(key, per, load, static_cast<int>(k), sh,
             [&](int64_t e, uint32_t, int rank) { out[rank] = static_cast<int32_t>(j0 + e); });
}

// Long buffers, step 1: block (c, b) keeps the top-s of row b's pools [c kChunk, (c+1) kChunk)
// as (key, pool) candidates in ascending pool order, pool -1 for the unused slots.
__global__ void __launch_bounds__(kThreads)
    topk_chunks_kernel(uint32_t* __restrict__ cand_key, int32_t* __restrict__ cand_pool,
                       const float* __restrict__ scores, const int32_t* __restrict__ pos, int64_t width,
                       int64_t s, int64_t kp) {
  __shared__ SelectShared sh;
  const int64_t c = blockIdx.x, b = blockIdx.y, chunks = gridDim.x;
  const int64_t n = row_pools(pos, b, kp, width);
  if (min(s, n) == n || c * kChunk >= n) return;  // step 2 takes every pool / reads no slot of this chunk
  const int64_t first = c * kChunk, m = min(n - first, kChunk);
  uint32_t* ck = cand_key + (b * chunks + c) * s;
  int32_t* cp = cand_pool + (b * chunks + c) * s;
  const float* x = scores + b * width + first;
  if (m <= s) {  // the whole chunk
    for (int64_t j = threadIdx.x; j < s; j += kThreads) {
      cp[j] = j < m ? static_cast<int32_t>(first + j) : -1;
      if (j < m) ck[j] = order_key(x[j]);
    }
    return;
  }
  const int64_t j0 = int64_t(threadIdx.x) * kChunkPerThread;
  auto load = [&](int64_t e) { return j0 + e < m ? order_key(x[j0 + e]) : 0u; };
  uint32_t key[kChunkPerThread];
#pragma unroll
  for (int e = 0; e < kChunkPerThread; ++e) key[e] = load(e);
  select_top(key, kChunkPerThread, load, static_cast<int>(s), sh, [&](int64_t e, uint32_t kept, int rank) {
    ck[rank] = kept;
    cp[rank] = static_cast<int32_t>(first + j0 + e);
  });
}

// Long buffers, step 2: a block per row selects among its chunks' candidates (the chunks
// that hold pools of the row; their slots in ascending pool order), R per thread.
template <int R>
__global__ void __launch_bounds__(kThreads)
    topk_candidates_kernel(int32_t* __restrict__ selected, const uint32_t* __restrict__ cand_key,
                           const int32_t* __restrict__ cand_pool, const int32_t* __restrict__ pos,
                           int64_t width, int64_t chunks, int64_t s, int64_t kp) {
  __shared__ SelectShared sh;
  const int64_t b = blockIdx.x, n = row_pools(pos, b, kp, width), k = min(s, n);
  int32_t* out = selected + b * s;
  if (select_all(out, n, k, s)) return;
  const int64_t slots = (n + kChunk - 1) / kChunk * s;  // <= kThreads * R (checked at launch)
  const uint32_t* ck = cand_key + b * chunks * s;
  const int32_t* cp = cand_pool + b * chunks * s;
  const int64_t j0 = int64_t(threadIdx.x) * R;
  auto load = [&](int64_t e) { return j0 + e < slots && cp[j0 + e] >= 0 ? ck[j0 + e] : 0u; };
  uint32_t key[R];
#pragma unroll
  for (int e = 0; e < R; ++e) key[e] = load(e);
  select_top(key, R, load, static_cast<int>(k), sh,
             [&](int64_t e, uint32_t, int rank) { out[rank] = cp[j0 + e]; });
}

// TF_INDEXER_TOPK=rows: one block a row at every width (for A/B runs; the same set).
bool one_block_only() {
  static const bool on = [] {
    const char* e = std::getenv("TF_INDEXER_TOPK");
    return e != nullptr && std::string(e) == "rows";
  }();
  return on;
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
  if (b > 65535) throw StatusError(unimplemented("indexer_topk_rows: more than 65,535 rows"));
  const int64_t chunks = (width + kChunk - 1) / kChunk;
  if (width <= kChunk || chunks * s > kMaxCandidates || 4 * s > kChunk || one_block_only()) {
    // One block a row (also the fallback for selections the two steps do not reduce).
    topk_rows_kernel<<<static_cast<unsigned>(b), kThreads, 0, ctx.stream>>>(
        selected.data<int32_t>(), scores.data<float>(), rows.positions, width, s, kp);
    check_launch("indexer_topk_rows");
    return;
  }
  Tensor keys = ctx.scratch(b * chunks * s * 4), pools = ctx.scratch(b * chunks * s * 4);
  auto* ck = static_cast<uint32_t*>(keys.raw());
  auto* cp = static_cast<int32_t*>(pools.raw());
  topk_chunks_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(b)), kThreads, 0,
                       ctx.stream>>>(ck, cp, scores.data<float>(), rows.positions, width, s, kp);
  check_launch("indexer_topk_rows chunks");
  if (chunks * s <= kThreads * 16)
    topk_candidates_kernel<16><<<static_cast<unsigned>(b), kThreads, 0, ctx.stream>>>(
        selected.data<int32_t>(), ck, cp, rows.positions, width, chunks, s, kp);
  else
    topk_candidates_kernel<kMaxCandPerThread><<<static_cast<unsigned>(b), kThreads, 0, ctx.stream>>>(
        selected.data<int32_t>(), ck, cp, rows.positions, width, chunks, s, kp);
  check_launch("indexer_topk_rows candidates");
}

}  // namespace tf::cuda
