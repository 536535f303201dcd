// The token list of one MLA query row, as every sparse-attention kernel needs it: the
// row's indices with out-of-range ones dropped, ascending, each cached token once, as
// the CPU op counts it. Either sorted (bitonic, in shared memory, so that repeats are
// adjacent) or read out of a bitmap of the cache's tokens where that fits. Shared by
// the prefill kernels (cuda_mla_prefill*.cu); the per-head kernel of cuda_attention.cu
// and the decode kernels sort with bitonic_sort_slots.
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

// The same network as bitonic_sort_slots, a thread per compared pair: warp w takes the
// pairs of slots [w c, (w + 1) c) for c = 2 per, per the smallest power of two with
// per x warps >= padded / 2 (a power of two, so a run holds both slots of every pair
// closer than c), so passes with a stride below c stay inside one warp and need no block
// barrier. Ends with a barrier.
__device__ inline void bitonic_sort_slots_by_warp(int* toks, int padded) {
  const int nwarps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = padded >> 1;
  int per = 1;
  while (per * nwarps < half) per <<= 1;
  const int chunk = 2 * per;
  for (int size = 2; size <= padded; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int sh = __ffs(stride) - 1;
      for (int x = lane; x < per; x += 32) {
        const int p = warp * per + x;
        if (p < half) {
          const int i = ((p >> sh) << (sh + 1)) | (p & (stride - 1)), j = i + stride;
          const bool up = (i & size) == 0;
          const int a = toks[i], b = toks[j];
          if ((a > b) == up) {
            toks[i] = b;
            toks[j] = a;
          }
        }
      }
      const int next = stride > 1 ? stride >> 1 : size;  // the next pass's stride
      if (stride >= chunk || next >= chunk)
        __syncthreads();
      else
        __syncwarp();
    }
  __syncthreads();
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
  bitonic_sort_slots_by_warp(toks, padded);
}

// Each thread's exclusive prefix of the block's per-thread counts `mine` (in thread
// order), and their total. `counts`: shared scratch of one int per warp; blockDim.x a
// multiple of 32. Every thread must call it; it passes a barrier (scratch reuse needs
// another barrier first).
__device__ inline int block_exclusive_sum(int mine, int* counts, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  int incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) counts[warp] = incl;
  __syncthreads();
  int at = incl - mine;
  total = 0;
  for (int ww = 0; ww < nwarps; ++ww) {
    if (ww < warp) at += counts[ww];
    total += counts[ww];
  }
  return at;
}

// Whether sorted slot j holds a token listed for the first time.
__device__ __forceinline__ bool first_of_token(const int* toks, int j) {
  return toks[j] != INT_MAX && (j == 0 || toks[j - 1] != toks[j]);
}

// After sort_row_tokens: the distinct tokens, ascending, packed into ids[0, n); returns
// n. `counts` is shared scratch of 33 ints; blockDim.x a multiple of 32, at most 1024.
// ids may not alias toks. Ends with a barrier.
__device__ inline int compact_row_tokens(int* ids, const int* toks, int padded, int* counts) {
  // Each thread owns a contiguous run of `per` slots; a block scan of the run counts.
  const int per = (padded + blockDim.x - 1) / blockDim.x, j0 = threadIdx.x * per;
  int mine = 0;
  for (int j = j0; j < j0 + per && j < padded; ++j) mine += first_of_token(toks, j);
  int total;
  int at = block_exclusive_sum(mine, counts, total);
  for (int j = j0; j < j0 + per && j < padded; ++j)
    if (first_of_token(toks, j)) ids[at++] = toks[j];
  __syncthreads();
  return total;
}

// The same list without a sort, where the cache's tokens fit a bitmap of `words` 32-bit
// words of shared memory (bits): each valid index sets its token's bit (repeats once),
// then the set bits are read out in ascending order into ids[0, n); returns n. O(w +
// num_tokens / 32) instead of the sort's O(padded log^2 padded). `counts` as above; ids
// may not alias bits. Every thread of the block must call it; it ends with a barrier.
__host__ __device__ inline int64_t latent_bitmap_words(int64_t num_tokens) { return (num_tokens + 31) / 32; }
__device__ inline int bitmap_row_tokens(int* ids, uint32_t* bits, const int32_t* __restrict__ row_indices, int64_t w,
                                        int64_t num_tokens, int* counts) {
  const int tid = threadIdx.x;
  const int words = static_cast<int>(latent_bitmap_words(num_tokens));
  for (int i = tid; i < words; i += blockDim.x) bits[i] = 0u;
  __syncthreads();
  for (int64_t j = tid; j < w; j += blockDim.x) {
    const int32_t id = row_indices[j];
    if (id >= 0 && id < num_tokens) atomicOr(&bits[id >> 5], 1u << (id & 31));
  }
  __syncthreads();
  // Each thread reads a contiguous run of words; a block scan of the runs' counts.
  const int per = (words + blockDim.x - 1) / blockDim.x, w0 = tid * per;
  int mine = 0;
  for (int i = w0; i < w0 + per && i < words; ++i) mine += __popc(bits[i]);
  int total;
  int at = block_exclusive_sum(mine, counts, total);
  for (int i = w0; i < w0 + per && i < words; ++i)
    for (uint32_t b = bits[i]; b != 0u; b &= b - 1u) ids[at++] = i * 32 + __ffs(b) - 1;
  __syncthreads();
  return total;
}

}  // namespace tf::cuda
