// MLA sparse decode, step 1 (cuda_mla_decode.cu): a row's token list. Included by cuda_mla_decode.cu only.
#pragma once

#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/latent_index_sort.cuh"
#include "kernels/cuda/mla_decode_layout.cuh"

namespace tf::cuda {
namespace {

// ---- 1. prep -------------------------------------------------------------------

template <bool kFp8>
__global__ void __launch_bounds__(kPrepThreads)
    prep_kernel(Workspace ws, MlaSplitPages p, const int32_t* __restrict__ indices, int w) {
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  extern __shared__ int toks[];  // [pow2 >= W]
  const int64_t b = blockIdx.x;
  pdl_launch_dependents();  // the pipelined split loads its queries meanwhile
  const int32_t* table = p.page_table;
  int64_t num_tokens = p.num_tokens;
  if (p.row_tables != nullptr) {
    table = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(p.row_tables[b]));
    num_tokens = int64_t(p.row_pos[b]) + 1;
  }
  const int32_t* idx = indices + b * w;
  // Compaction of the in-range indices, in order (a contiguous segment per thread).
  const int per = (w + kPrepThreads - 1) / kPrepThreads;
  const int j0 = min(w, int(threadIdx.x) * per), j1 = min(w, j0 + per);
  int mine = 0;
  for (int j = j0; j < j1; ++j) mine += idx[j] >= 0 && idx[j] < num_tokens;
  int at = 0, n = 0;
  Scan(scan_tmp).ExclusiveSum(mine, at, n);
  for (int j = j0; j < j1; ++j) {
    const int32_t id = idx[j];
    if (id >= 0 && id < num_tokens) toks[at++] = id;
  }
  __syncthreads();
  int unsorted = 0;
  for (int j = threadIdx.x + 1; j < n; j += blockDim.x) unsorted |= toks[j - 1] >= toks[j];
  if (__syncthreads_or(unsorted)) {
    int padded = 1;
    while (padded < n) padded <<= 1;
    for (int j = n + threadIdx.x; j < padded; j += blockDim.x) toks[j] = INT_MAX;
    __syncthreads();
    bitonic_sort_slots(toks, padded);
  }
  // Drop repeats (sorted now), then each kept token's page offset and scale.
  const int per2 = (n + kPrepThreads - 1) / kPrepThreads;
  const int k0 = min(n, int(threadIdx.x) * per2), k1 = min(n, k0 + per2);
  int keep = 0;
  for (int j = k0; j < k1; ++j) keep += j == 0 || toks[j - 1] != toks[j];
  int rank = 0, kept = 0;
  Scan(scan_tmp).ExclusiveSum(keep, rank, kept);
  int64_t* off = ws.offset + b * w;
  float* sc = ws.tscale + b * w;
  for (int j = k0; j < k1; ++j) {
    if (j > 0 && toks[j - 1] == toks[j]) continue;
    const int64_t tok = toks[j], page = table[tok / p.page_size], slot = tok % p.page_size;
    off[rank] = page * p.page_stride + slot * p.width;
    sc[rank] = kFp8 ? p.scales[page * p.page_size + slot] : 1.0f;
    ++rank;
  }
  if (threadIdx.x == 0) ws.count[b] = kept;
}

}  // namespace
}  // namespace tf::cuda
