// The token list of one MLA query row, as every sparse-attention kernel needs it: the
// row's indices with out-of-range ones dropped, sorted ascending (bitonic, in shared
// memory) so that repeats are adjacent and each cached token counts once, as the CPU
// op counts it. Shared by the prefill kernels (cuda_mla_prefill*.cu); the per-head
// kernel of cuda_attention.cu sorts the same way and can use these helpers too.
#pragma once

#include <climits>
#include <cstdint>

namespace tf::cuda {

// Smallest power of two >= w (at least `min_pad`): the sort's slot count.
inline int latent_sort_slots(int64_t w, int min_pad = 32) {
  int padded = min_pad;
  while (padded < w) padded <<= 1;
  return padded;
}

// Bitonic sort of toks[0, padded) ascending in shared memory (padded a power of two);
// every thread of the block must call it; it ends with a barrier.
__device__ inline void bitonic_sort_slots(int* toks, int padded) {
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < padded; i += blockDim.x) {
        const int partner = i ^ stride;
        if (partner > i) {
          const bool up = (i & size) == 0;
          const int a = toks[i], b = toks[partner];
          if ((a > b) == up) {
            toks[i] = b;
            toks[partner] = a;
          }
        }
      }
      __syncthreads();
    }
}

// toks[0, padded) = the row's valid indices (0 <= id < num_tokens) sorted ascending,
// INT_MAX ("none") in the remaining slots. Every thread of the block must call it;
// it ends with a barrier.
__device__ inline void sort_row_tokens(int* toks, const int32_t* __restrict__ row_indices, int64_t w,
                                       int64_t num_tokens, int padded) {
  for (int j = threadIdx.x; j < padded; j += blockDim.x) {
    int v = INT_MAX;
    if (j < w) {
      const int32_t id = row_indices[j];
      if (id >= 0 && id < num_tokens) v = id;
    }
    toks[j] = v;
  }
  __syncthreads();
  bitonic_sort_slots(toks, padded);
}

// Whether sorted slot j holds a token listed for the first time.
__device__ __forceinline__ bool first_of_token(const int* toks, int j) {
  return toks[j] != INT_MAX && (j == 0 || toks[j - 1] != toks[j]);
}

// After sort_row_tokens: the distinct tokens, ascending, packed into ids[0, n); returns
// n. `counts` is shared scratch of 33 ints; blockDim.x a multiple of 32, at most 1024.
// ids may not alias toks. Ends with a barrier.
__device__ inline int compact_row_tokens(int* ids, const int* toks, int padded, int* counts) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  // Each thread owns a contiguous run of `per` slots; a block scan of the run counts.
  const int per = (padded + blockDim.x - 1) / blockDim.x, j0 = tid * per;
  int mine = 0;
  for (int j = j0; j < j0 + per && j < padded; ++j) mine += first_of_token(toks, j);
  int incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) counts[warp] = incl;
  __syncthreads();
  int at = incl - mine, total = 0;
  for (int ww = 0; ww < nwarps; ++ww) {
    if (ww < warp) at += counts[ww];
    total += counts[ww];
  }
  for (int j = j0; j < j0 + per && j < padded; ++j)
    if (first_of_token(toks, j)) ids[at++] = toks[j];
  __syncthreads();
  return total;
}

}  // namespace tf::cuda
