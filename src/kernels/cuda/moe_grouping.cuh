// Token grouping for routed-expert kernels (moe_experts, moe_experts_exl3): turns a
// routing table ids [T, k] into a per-expert list of rows on the device, with no host
// sync and no allocation (a decode step stays capturable in a CUDA graph), for any T.
//
// Result (MoeGroups, device memory carved from one int scratch buffer):
//   slots  = the active experts in ascending id; slot s has expert slot_expert[s] and
//            rows [slot_first[s], slot_first[s] + slot_count[s]) of the sorted list;
//   rows   = one per valid (token, j) pair, grouped by expert, within an expert in
//            pair order (= token order): row_token[r], row_expert[r];
//   pairs  = pair_row[t * k + j], the row of that pair (-1 for an id outside [0, E):
//            the kernel also sets kErrMoeExpertId in the context's error word);
//   tiles  = (when tile_rows > 0) each slot cut into runs of at most tile_rows rows:
//            tile_slot[i], tile_row0[i] (absolute first row), for grouped GEMM grids.
//   counts = *num_active, *num_rows, *num_tiles.
// Grids are sized on the host by the bounds (moe_max_slots, pairs, moe_max_tiles);
// blocks past the device counts exit at once.
//
// How (one block, W warps, deterministic): warp w walks its contiguous range of pairs
// 32 at a time; __match_any_sync finds the lanes naming the same expert, the lowest of
// them counts them into the warp's own per-expert counter (shared memory [W][E]: no
// atomics between warps). A block scan over the experts then gives every expert its
// first row, slot and first tile, the counters become each warp's base row per expert,
// and a second walk gives each pair its row (base + rank among equal lanes). The
// result does not depend on thread timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

struct MoeGroups {
  int* num_active;   // [1] active experts (slots)
  int* num_rows;     // [1] valid pairs
  int* num_tiles;    // [1] row tiles (0 when tile_rows == 0)
  int* slot_expert;  // [S]
  int* slot_first;   // [S]
  int* slot_count;   // [S]
  int* row_token;    // [P]
  int* row_expert;   // [P]
  int* pair_row;     // [P]
  int* tile_slot;    // [max_tiles]
  int* tile_row0;    // [max_tiles]
};

// Bounds for grids and scratch (P = tokens * k pairs).
inline int64_t moe_max_slots(int64_t experts, int64_t pairs) { return std::max<int64_t>(1, std::min(experts, pairs)); }
inline int64_t moe_max_tiles(int64_t experts, int64_t pairs, int tile_rows) {
  return tile_rows <= 0 ? 0 : (pairs + tile_rows - 1) / tile_rows + moe_max_slots(experts, pairs);
}
// Ints of scratch MoeGroups needs.
inline int64_t moe_groups_ints(int64_t experts, int64_t pairs, int tile_rows) {
  return 3 + 3 * moe_max_slots(experts, pairs) + 3 * pairs + 2 * moe_max_tiles(experts, pairs, tile_rows);
}
// The layout over `base` (moe_groups_ints(...) ints of device memory).
inline MoeGroups moe_groups_at(int* base, int64_t experts, int64_t pairs, int tile_rows) {
  const int64_t s = moe_max_slots(experts, pairs), t = moe_max_tiles(experts, pairs, tile_rows);
  MoeGroups g;
  g.num_active = base;
  g.num_rows = base + 1;
  g.num_tiles = base + 2;
  g.slot_expert = base + 3;
  g.slot_first = g.slot_expert + s;
  g.slot_count = g.slot_first + s;
  g.row_token = g.slot_count + s;
  g.row_expert = g.row_token + pairs;
  g.pair_row = g.row_expert + pairs;
  g.tile_slot = g.pair_row + pairs;
  g.tile_row0 = g.tile_slot + t;
  return g;
}

// The largest expert count the grouping kernel handles (one warp's counters, with the
// kernel's static shared memory, in 48 KB).
constexpr int64_t kMoeGroupingMaxExperts = 12000;

namespace moe_detail {

// Exclusive prefix sums of three ints over the block (ints: any order gives the same sums);
// tot[] gets the totals. smem: 96 ints.
__device__ inline void block_scan3(int (&v)[3], int (&tot)[3], int* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int inc[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    inc[i] = v[i];
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, inc[i], o);
      if (lane >= o) inc[i] += n;
    }
  }
  __syncthreads();
  if (lane == 31)
#pragma unroll
    for (int i = 0; i < 3; ++i) smem[i * 32 + warp] = inc[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    int base = 0, t = 0;
    for (int w = 0; w < nw; ++w) {
      const int s = smem[i * 32 + w];
      if (w < warp) base += s;
      t += s;
    }
    tot[i] = t;
    v[i] = base + inc[i] - v[i];
  }
}

// One block of W = blockDim.x / 32 warps; dynamic smem: W * experts ints. (A template
// so that every .cu including this header shares one definition.)
template <typename IdT>
__global__ void __launch_bounds__(1024)
    moe_grouping_kernel(const IdT* __restrict__ ids, int pairs, int k, int experts, int tile_rows, MoeGroups g,
                        unsigned* err, int* clear, int n_clear) {
  extern __shared__ int cnt[];  // [W][experts]: per-warp counts, then per-warp base rows
  __shared__ int scan_smem[96];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int i = threadIdx.x; i < nw * experts; i += blockDim.x) cnt[i] = 0;
  for (int i = threadIdx.x; i < n_clear; i += blockDim.x) clear[i] = 0;
  __syncthreads();
  const int per = (pairs + nw - 1) / nw, p0 = min(pairs, warp * per), p1 = min(pairs, p0 + per);
  int* mine = cnt + warp * experts;
  for (int b = p0; b < p1; b += 32) {
    const int p = b + lane;
    const int e = p < p1 ? ids[p] : -1;
    const bool ok = e >= 0 && e < experts;
    if (p < p1 && !ok) atomicOr(err, kErrMoeExpertId);
    const unsigned same = __match_any_sync(0xffffffffu, ok ? e : -1);
    if (ok && lane == __ffs(same) - 1) mine[e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  // Each thread scans a contiguous run of experts.
  const int run = (experts + blockDim.x - 1) / blockDim.x;
  const int e0 = min(experts, static_cast<int>(threadIdx.x) * run), e1 = min(experts, e0 + run);
  int v[3] = {0, 0, 0};  // rows, active experts, tiles in this run
  for (int e = e0; e < e1; ++e) {
    int c = 0;
    for (int w = 0; w < nw; ++w) c += cnt[w * experts + e];
    v[0] += c;
    v[1] += c > 0;
    v[2] += tile_rows > 0 ? (c + tile_rows - 1) / tile_rows : 0;
  }
  int tot[3];
  block_scan3(v, tot, scan_smem);
  int row = v[0], slot = v[1], tile = v[2];
  for (int e = e0; e < e1; ++e) {
    int c = 0;
    for (int w = 0; w < nw; ++w) {  // counts -> each warp's base row for e
      const int n = cnt[w * experts + e];
      cnt[w * experts + e] = row + c;
      c += n;
    }
    if (c > 0) {
      g.slot_expert[slot] = e;
      g.slot_first[slot] = row;
      g.slot_count[slot] = c;
      if (tile_rows > 0)
        for (int r = 0; r < c; r += tile_rows, ++tile) {
          g.tile_slot[tile] = slot;
          g.tile_row0[tile] = row + r;
        }
      ++slot;
    }
    row += c;
  }
  if (threadIdx.x == 0) {
    *g.num_rows = tot[0];
    *g.num_active = tot[1];
    *g.num_tiles = tot[2];
  }
  __syncthreads();
  const unsigned below = (1u << lane) - 1u;
  for (int b = p0; b < p1; b += 32) {
    const int p = b + lane;
    const int e = p < p1 ? ids[p] : -1;
    const bool ok = e >= 0 && e < experts;
    const unsigned same = __match_any_sync(0xffffffffu, ok ? e : -1);
    if (ok) {
      const int r = mine[e] + __popc(same & below);
      g.pair_row[p] = r;
      g.row_token[r] = p / k;
      g.row_expert[r] = e;
    } else if (p < p1) {
      g.pair_row[p] = -1;
    }
    __syncwarp();
    if (ok && lane == __ffs(same) - 1) mine[e] += __popc(same);
    __syncwarp();
  }
}

}  // namespace moe_detail

// Enqueues the grouping of ids [tokens, k] (int32, device) over `experts` experts into g
// (moe_groups_at over moe_groups_ints(experts, tokens * k, tile_rows) ints) on `stream`.
// Requires 0 < experts <= kMoeGroupingMaxExperts and tokens * k < 2^31; the caller
// checks the launch (check_launch) and the error word (bad ids). Optionally the kernel
// also zeroes n_clear ints at `clear` (e.g. the work counters of the next launch).
inline void launch_moe_grouping(const int32_t* ids, int64_t tokens, int64_t k, int64_t experts, int tile_rows,
                                const MoeGroups& g, unsigned* err, cudaStream_t stream, int* clear = nullptr,
                                int n_clear = 0) {
  const int64_t pairs = tokens * k;
  // About 64 pairs per warp, at most 32 warps and 47 KB of counters.
  int64_t warps = std::clamp<int64_t>((pairs + 63) / 64, 1, 32);
  warps = std::max<int64_t>(1, std::min(warps, (47 * 1024) / (4 * experts)));
  const size_t smem = static_cast<size_t>(warps * experts) * sizeof(int);
  moe_detail::moe_grouping_kernel<int32_t><<<1, static_cast<unsigned>(warps * 32), smem, stream>>>(
      ids, static_cast<int>(pairs), static_cast<int>(k), static_cast<int>(experts), tile_rows, g, err, clear, n_clear);
}

}  // namespace tf::cuda
