// Device sampling: one block of kThreads threads per logits row, several passes
// over the row (it stays in L2: 620 KB for a 154,880-token vocabulary). Calls of a
// few rows without logprobs go to the grid kernel instead (cuda_sampling_grid.cu: the
// same passes with each row spread over many blocks).
//
//   1. raw pass: NaN/+inf check and the argmax (value, lowest id);
//   greedy rows and rows scoring a given token stop here. Sampled rows:
//   2. temperature (IEEE f32 division, __fdiv_rn: as the host) and min_p (one f32
//      addition of the host's log(min_p)) are applied on the fly in every pass;
//   3. top_k: radix select of the k-th largest processed value (4 passes of 8 bits);
//   4. top_p: total mass in double, then a radix walk down the values (descending)
//      accumulating the mass of each 8-bit digit until it reaches top_p * total:
//      the value found is the threshold, and the masses on both sides of it are
//      checked against kTopPMargin (sample_rows.h); the minimum, the total and the
//      first digit's masses come from one pass;
//   5. Gumbel-max over the kept tokens with the host's counter hash, keeping the
//      runner-up key to check gumbel_margin;
//   6. raw logprobs when asked: lse (double) in one pass that also collects the
//      top-n candidates (values >= a bound taken from the raw pass's warp maxima),
//      ranked in shared memory (repeated block argmax when too many tie).
// Digit masses are summed with shared-memory atomics (order not fixed; 8 copies of
// the bins, one per group of warps, summed at the end, except in v1): that can
// only move a row between "decided" and kUndecided, never change a decided token,
// because a decision is taken only outside the rounding margins.
//
// Every pass reads the row through walk_row (below): each thread owns the elements
// i = threadIdx.x (mod kThreads), as session 10's loops did, but issues several
// loads before using them (one dependent L2 round trip per element was ~38 us per
// pass at 154,880 tokens). Owning the same elements in the same order keeps every
// per-thread sum, hence every result bit, of the one-load-per-iteration kernel,
// which TF_SAMPLE_ROWS=v1 still runs (=vec4: 16-byte loads, elements owned in
// groups of 4: the same tokens, the double sums in another order).
//
// Few rows leave most SMs idle, so a row may run on a thread-block cluster of 2-8
// blocks (Group below; TF_SAMPLE_ROWS=cluster) that together act as the one block of
// kThreads threads: the same elements per (virtual) thread, the same warps, the same
// combine orders, hence the same bits; partial results meet through distributed
// shared memory.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/counter_hash.h"
#include "kernels/api/sample_rows_call.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_sampling.h"
#include "kernels/cuda/cuda_sampling_grid.h"
#include "kernels/cuda/cuda_sampling_row.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/launch_kernel_ex.cuh"

namespace tf::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace sampling;  // NOLINT: the row pieces shared with the grid kernel

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
// Top-n logprob candidates ranked in shared memory (per block); more (ties) take the
// block-argmax loop.
constexpr int kTopCandidates = 256;
// Copies of the digit-mass bins (warp w adds into copy w % copies): a double atomicAdd
// on shared memory is a compare-and-swap loop, and 32 warps hitting the few bins that
// logits crowd into retry each other; the copies are summed in a fixed order.
constexpr int kMaxMassCopies = 8;

// How a pass reads the row (TF_SAMPLE_ROWS, see sample_rows()).
enum class Walk {
  kV1,       // session 10: one 4-byte load per thread and iteration; passes not merged
  kStrided,  // the same elements per thread as kV1, several loads issued before the math
  kVec4,     // 16-byte loads, kVec4Loads of them in flight per thread
};
constexpr int kVec4Loads = 4;

// A row's threads: kCluster blocks of kThreads / kCluster threads (one thread-block
// cluster; kCluster 1: one block). Virtual thread vt = rank * kBlockThreads + threadIdx.x
// plays thread vt of the one-block kernel: its elements, its warp (vt / 32), its place
// in every combine. Per-warp scratch of virtual warp w lives in block w / kBlockWarps.
template <Walk W, int kCluster>
struct Group {
  static constexpr Walk kWalk = W;
  static constexpr int kSize = kCluster;
  static constexpr int kBlockThreads = kThreads / kCluster;
  static constexpr int kBlockWarps = kBlockThreads / 32;
  // Loads in flight per thread: fewer threads per SM get more each.
  static constexpr int kLoads = W == Walk::kV1 ? 1 : (kCluster == 1 ? 8 : 16);
  static constexpr int kMassCopies = W == Walk::kV1 ? 1 : kMaxMassCopies;
  __device__ static unsigned rank() {
    if constexpr (kCluster == 1) {
      return 0;
    } else {
      return cg::this_cluster().block_rank();
    }
  }
  __device__ static int64_t vt() { return static_cast<int64_t>(rank()) * kBlockThreads + threadIdx.x; }
  __device__ static bool leader() { return threadIdx.x == 0 && rank() == 0; }
  // A barrier of the row's threads; also orders their shared-memory accesses.
  __device__ static void sync() {
    if constexpr (kCluster == 1) {
      __syncthreads();
    } else {
      cg::this_cluster().sync();
    }
  }
  // `local` (shared memory of this block) as seen in block r of the cluster.
  template <typename T>
  __device__ static T* at(T* local, unsigned r) {
    if constexpr (kCluster == 1) {
      return local;
    } else {
      return cg::this_cluster().map_shared_rank(local, r);
    }
  }
  template <typename T>
  __device__ static T warp_entry(T* scratch, int w) {
    return at(scratch, static_cast<unsigned>(w / kBlockWarps))[w % kBlockWarps];
  }
};

// g(j, v, valid) for the items j = t (mod kThreads) of x[0, n) in increasing order, kLoads loads in
// flight per round (the loads of a round first, then its calls); g(_, _, false) where the thread has
// none left but others do: every thread makes the same calls (warp_bin_add needs uniform trip counts).
template <int kLoads, typename T, typename G>
__device__ __forceinline__ void walk_rounds(const T* __restrict__ x, int64_t n, int64_t t, T zero, G& g) {
  constexpr int64_t step = kThreads;
  int64_t base = 0;
#pragma unroll 1
  for (; base + kLoads * step <= n; base += kLoads * step) {
    T v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) v[u] = x[base + u * step + t];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) g(base + u * step + t, v[u], true);
  }
  if (base < n) {  // the last, partial round (loads first here too)
    T v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t j = base + u * step + t;
      v[u] = j < n ? x[j] : zero;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u)
      if (base + u * step < n) g(base + u * step + t, v[u], base + u * step + t < n);
  }
}

// f(i, v, valid) for the elements virtual thread vt owns, i = vt (mod kThreads) in
// increasing order (walk_rounds over the floats).
template <int kLoads, typename F>
__device__ __forceinline__ void walk_strided(const float* __restrict__ x, int64_t lim, int64_t t, F& f) {
  walk_rounds<kLoads>(x, lim, t, 0.0f, f);
}

// As walk_strided (one block), but a thread owns groups of 4 consecutive elements read
// as one float4 (scalar head up to the first 16-byte boundary, scalar tail), still in
// increasing i. x must be 4-byte aligned.
template <int kLoads, typename F>
__device__ __forceinline__ void walk_vec4(const float* __restrict__ x, int64_t lim, F& f) {
  const int64_t t = threadIdx.x;
  const auto misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x) & 15);
  const int64_t head = min(lim, ((16 - misalign) & 15) / 4);
  f(t, t < head ? x[t] : 0.0f, t < head);
  const auto* x4 = reinterpret_cast<const float4*>(x + head);
  const int64_t n4 = (lim - head) / 4;
  auto call4 = [&](int64_t j, float4 v, bool valid) {
    const int64_t i = head + 4 * j;
    f(i, v.x, valid);
    f(i + 1, v.y, valid);
    f(i + 2, v.z, valid);
    f(i + 3, v.w, valid);
  };
  walk_rounds<kLoads>(x4, n4, t, make_float4(0.0f, 0.0f, 0.0f, 0.0f), call4);
  const int64_t tail = head + 4 * n4;  // fewer than 4 left
  f(tail + t, tail + t < lim ? x[tail + t] : 0.0f, tail + t < lim);
}

template <typename G, typename F>
__device__ __forceinline__ void walk_row(const float* __restrict__ x, int64_t lim, F&& f) {
  if constexpr (G::kWalk == Walk::kVec4) {
    static_assert(G::kSize == 1);
    if ((reinterpret_cast<uintptr_t>(x) & 3) == 0) return walk_vec4<kVec4Loads>(x, lim, f);
  }
  walk_strided<G::kLoads>(x, lim, G::vt(), f);
}

struct LaunchArgs {
  const RowJob* jobs;
  SampleRowResult* results;
};


// Row-wide combine of a struct (fixed order; every thread gets the result).
// scratch[w] keeps (local) warp w's combine until the next call with the same scratch.
template <typename G, typename T>
__device__ T group_combine(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, shfl(v, o));
  G::sync();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  G::sync();
  T r = G::warp_entry(scratch, 0);
  for (int i = 1; i < kWarps; ++i) r = combine(r, G::warp_entry(scratch, i));
  return r;
}

// Row-wide reduction in block_reduce's order (cuda_util.cuh): warp butterflies, then
// the warps' results in warp order. scratch: 32 T per block.
template <typename G, typename T, typename Op>
__device__ T group_reduce(T v, Op op, T* scratch) {
  v = warp_reduce(v, op);
  G::sync();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  G::sync();
  T r = G::warp_entry(scratch, 0);
  for (int i = 1; i < kWarps; ++i) r = op(r, G::warp_entry(scratch, i));
  return r;
}



struct Candidate {
  float v;
  int32_t id;
};

struct Shared {
  ArgBest arg[kWarps];
  KeyBest key[kWarps];
  double sum[32];
  float fmin[32];
  unsigned cnt[256];
  double mass[kMaxMassCopies][256];
  unsigned cnt_all[256];  // the row's bins (cluster: summed over the blocks in rank order)
  double mass_all[256];
  double stage[kWarps][32];  // warp_bin_add's per-lane masses
  Candidate top[kTopCandidates];
  unsigned top_count;
  float top_bound;
  uint32_t prefix;
  int undecided;
  int flag;
};

// Adds (1, mass) to bin d of cnt (and of bins, when not null: copy warp % kMassCopies
// of the [copies][256] bins) for every lane with `valid`. Logits crowd into a few
// radix digits, so lanes that share a bin are first combined (lane order) and one
// leader per bin and warp does the shared atomics.
// Every lane of the warp must call it (uniform loop trip counts).
template <typename G>
__device__ __forceinline__ void warp_bin_add(bool valid, unsigned d, double mass, unsigned* cnt, double* bins,
                                             Shared& sh) {
  if constexpr (G::kWalk != Walk::kV1) {
    if (!__any_sync(0xffffffffu, valid)) return;  // later digits: most warps have nothing in the prefix
  }
  const unsigned peers = __match_any_sync(0xffffffffu, valid ? d : 0xFFFFFFFFu);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (bins != nullptr) {
    sh.stage[warp][lane] = mass;
    __syncwarp();
  }
  if (valid && lane == __ffs(static_cast<int>(peers)) - 1) {
    atomicAdd(&cnt[d], static_cast<unsigned>(__popc(peers)));
    if (bins != nullptr) {
      double sum = 0.0;
      for (unsigned m = peers; m != 0; m &= m - 1) sum += sh.stage[warp][__ffs(static_cast<int>(m)) - 1];
      atomicAdd(&bins[(warp % G::kMassCopies) * 256 + d], sum);
    }
  }
  if (bins != nullptr) __syncwarp();
}

template <typename G>
__device__ void zero_bins(Shared& sh) {
  for (int d = threadIdx.x; d < 256; d += blockDim.x) {
    sh.cnt[d] = 0;
    for (int c = 0; c < G::kMassCopies; ++c) sh.mass[c][d] = 0.0;
  }
  __syncthreads();  // (the blocks of a cluster each zero and fill their own bins)
}

// After a binning pass: the row's bins, returned as pointers to 256 counts and masses
// that thread 0 of each block reads. One block with one mass copy: its own; otherwise
// every block sums the blocks' bins (rank order, then copy order) into its
// cnt_all/mass_all (the same values in each block).
template <typename G>
__device__ void gather_bins(Shared& sh, const unsigned*& cnt, const double*& mass) {
  G::sync();
  if constexpr (G::kSize == 1 && G::kMassCopies == 1) {
    cnt = sh.cnt;
    mass = sh.mass[0];
  } else {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      unsigned c = 0;
      double m = 0.0;
      for (int r = 0; r < G::kSize; ++r) {
        c += G::at(sh.cnt, static_cast<unsigned>(r))[d];
        const double* copies = G::at(&sh.mass[0][0], static_cast<unsigned>(r));
        for (int k = 0; k < G::kMassCopies; ++k) m += copies[k * 256 + d];
      }
      sh.cnt_all[d] = c;
      sh.mass_all[d] = m;
    }
    __syncthreads();
    cnt = sh.cnt_all;
    mass = sh.mass_all;
  }
}

// The k-th largest kept value (radix select over the order keys).
template <typename G>
__device__ float kth_largest(const float* x, int64_t lim, const Processing& pr, int32_t k, Shared& sh) {
  uint32_t prefix = 0;
  uint32_t remaining = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    zero_bins<G>(sh);
    walk_row<G>(x, lim, [&](int64_t, float raw, bool valid) {
      const uint32_t key = valid ? order_key(pr.kept(raw)) : 0u;
      warp_bin_add<G>(valid && (key & hi_mask) == prefix, (key >> shift) & 255u, 0.0, sh.cnt, nullptr, sh);
    });
    const unsigned* cnt;
    const double* mass;
    gather_bins<G>(sh, cnt, mass);
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (cnt[d] >= remaining) break;
        remaining -= cnt[d];
      }
      sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
    }
    G::sync();  // the bins were read (in every block) before they are zeroed again
    prefix = sh.prefix;
  }
  return __uint_as_float(float_bits_of_order_key(prefix));
}

// The top_p threshold (see the file comment); sets sh.undecided when too close to call.
template <typename G>
__device__ float top_p_threshold(const float* x, int64_t lim, const Processing& pr, float pmax, float top_p,
                                 Shared& sh) {
  const double m = pmax;
  float mn = INFINITY;
  double part = 0.0;
  // kV1: minimum, total, then each digit in its own pass. Otherwise the first
  // pass also bins the first digit (the same exp values, the same per-thread sums).
  constexpr bool kMerged = G::kWalk != Walk::kV1;
  if constexpr (kMerged) {
    zero_bins<G>(sh);
    walk_row<G>(x, lim, [&](int64_t, float raw, bool valid) {
      const MassTerm t = mass_term(pr, raw, valid, m, mn, part);
      warp_bin_add<G>(t.in, order_key(t.v) >> 24, t.e, sh.cnt, &sh.mass[0][0], sh);
    });
  } else {
    walk_row<G>(x, lim, [&](int64_t, float raw, bool valid) {
      const float v = valid ? pr.kept(raw) : -INFINITY;
      if (v != -INFINITY) mn = fminf(mn, v);
    });
  }
  struct MinOp {
    __device__ float operator()(float a, float b) const { return fminf(a, b); }
  };
  mn = group_reduce<G>(mn, MinOp{}, sh.fmin);
  if (m - static_cast<double>(mn) == 0.0) return -INFINITY;  // all kept values tied: all stay
  if constexpr (!kMerged) {
    walk_row<G>(x, lim, [&](int64_t, float raw, bool valid) {
      const float v = valid ? pr.kept(raw) : -INFINITY;
      if (v != -INFINITY) part += exp(static_cast<double>(v) - m);
    });
  }
  const double total = group_reduce<G>(part, SumOp{}, sh.sum);
  const double target = static_cast<double>(top_p) * total, eps = kTopPMargin * total;

  uint32_t prefix = 0;
  double above = 0.0, group_mass = 0.0;  // mass strictly above the prefix range; of the last digit
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    if (!kMerged || shift != 24) {
      zero_bins<G>(sh);
      walk_row<G>(x, lim, [&](int64_t, float raw, bool valid) {
        const float v = valid ? pr.kept(raw) : -INFINITY;
        const uint32_t key = order_key(v);
        const bool in = v != -INFINITY && (key & hi_mask) == prefix;
        warp_bin_add<G>(in, (key >> shift) & 255u, in ? exp(static_cast<double>(v) - m) : 0.0, sh.cnt,
                        &sh.mass[0][0], sh);
      });
    }
    const unsigned* cnt;
    const double* mass;
    gather_bins<G>(sh, cnt, mass);
    if (threadIdx.x == 0) {
      int chosen = -1;
      for (int d = 255; d >= 0; --d) {
        if (cnt[d] == 0) continue;
        if (above + mass[d] >= target) {
          chosen = d;
          break;
        }
        above += mass[d];
      }
      if (chosen < 0) {
        sh.undecided = 1;  // the digit sums never reached the target: rounding decides
        chosen = 0;
      } else {
        group_mass = mass[chosen];
      }
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
    }
    G::sync();  // the bins were read (in every block) before they are zeroed again
    prefix = sh.prefix;
  }
  const float v_star = __uint_as_float(float_bits_of_order_key(prefix));
  if (threadIdx.x == 0) {
    // v* is kept (F(v*) = above < target) and the next value is not (F = above + its
    // group >= target): both must hold with margin, unless v* is the smallest value.
    if (!(above < target - eps)) sh.undecided = 1;
    if (order_key(v_star) != order_key(mn) && !(above + group_mass > target + eps)) sh.undecided = 1;
  }
  __syncthreads();
  return v_star;
}

// A lower bound of the n-th best finite value of the row (n <= kWarps): the n-th
// best of the raw pass's warp winners (sh.arg, left by its group_combine), which are
// n distinct elements; -inf when fewer warps had a finite value. Warp 0 of each block
// computes it (the same value everywhere) and clears the block's candidate list.
template <typename G>
__device__ void top_candidate_bound(int n, Shared& sh) {
  if (threadIdx.x >= 32) return;
  const ArgBest a = G::warp_entry(sh.arg, static_cast<int>(threadIdx.x));
  int rank = 0;
  for (int j = 0; j < kWarps; ++j) {
    const ArgBest b = G::warp_entry(sh.arg, j);
    rank += better(b.v, b.id, a.v, a.id);
  }
  const unsigned finite = __ballot_sync(0xffffffffu, a.id >= 0);
  if (threadIdx.x == 0) {
    sh.top_bound = -INFINITY;
    sh.top_count = 0;
  }
  __syncwarp();
  if (__popc(finite) >= n && a.id >= 0 && rank == n - 1) sh.top_bound = a.v;
}

// Raw logprobs: the chosen token's and the n_top best (value desc, id asc).
template <typename G>
__device__ void raw_logprobs(const float* x, int64_t lim, float m, int64_t token, int n_top, bool rank,
                             float& logprob, SampleRowResult* out, Shared& sh) {
  // kV1 finds the top n by n block argmaxes over the row; otherwise the lse pass
  // also collects every finite value >= a bound of the n-th (usually a few dozen).
  const bool collect = G::kWalk != Walk::kV1 && n_top > 0;
  if (collect) {
    top_candidate_bound<G>(n_top, sh);
    __syncthreads();
  }
  const float bound = sh.top_bound;
  const float token_v = token < lim ? x[token] : -INFINITY;
  double part = 0.0;
  int at_least = 0;  // rank: ids whose logit is >= the token's
  walk_row<G>(x, lim, [&](int64_t i, float v, bool valid) {
    if (!valid) return;
    part += exp(static_cast<double>(v) - m);
    at_least += v >= token_v;
    if (collect && v >= bound && v != -INFINITY) {
      const unsigned slot = atomicAdd(&sh.top_count, 1u);
      if (slot < kTopCandidates) sh.top[slot] = {v, static_cast<int32_t>(i)};
    }
  });
  const double lse = m + log(group_reduce<G>(part, SumOp{}, sh.sum));  // its barriers publish sh.top
  logprob = token < lim ? static_cast<float>(static_cast<double>(x[token]) - lse) : -INFINITY;
  if (rank) {  // a count far below 2^53: exact in double, in any order
    const double ranked = group_reduce<G>(static_cast<double>(at_least), SumOp{}, sh.sum);
    if (G::leader()) out->rank = static_cast<int32_t>(ranked);
  }
  if (n_top == 0) {
    if (G::leader()) out->top_count = 0;  // (the result buffer is reused scratch)
    return;
  }
  unsigned found = 0;
  bool fits = true;
  if (collect) {
    for (int r = 0; r < G::kSize; ++r) {
      const unsigned c = *G::at(&sh.top_count, static_cast<unsigned>(r));
      found += c;
      fits = fits && c <= kTopCandidates;
    }
  }
  if (collect && fits) {
    // Rank each candidate among all: a total order, so the order in which they were
    // collected does not matter.
    const unsigned mine = sh.top_count;
    for (unsigned c = threadIdx.x; c < mine; c += blockDim.x) {
      const Candidate a = sh.top[c];
      int rank = 0;
      for (int r = 0; r < G::kSize; ++r) {
        const Candidate* list = G::at(sh.top, static_cast<unsigned>(r));
        const unsigned count = *G::at(&sh.top_count, static_cast<unsigned>(r));
        for (unsigned j = 0; j < count; ++j) rank += better(list[j].v, list[j].id, a.v, a.id);
      }
      if (rank < n_top) {
        out->top_tokens[rank] = a.id;
        out->top_values[rank] = static_cast<float>(static_cast<double>(a.v) - lse);
      }
    }
    if (G::leader()) out->top_count = min(n_top, static_cast<int>(found));
    return;
  }
  ArgBest prev{INFINITY, -1};
  int count = 0;
  for (; count < n_top; ++count) {
    ArgBest b{-INFINITY, -1};
    walk_row<G>(x, lim, [&](int64_t i, float v, bool valid) {
      if (!valid || v == -INFINITY) return;
      // strictly after prev in (value desc, id asc) order
      if (prev.id >= 0 && !(v < prev.v || (v == prev.v && i > prev.id))) return;
      if (better(v, i, b.v, b.id)) b = {v, i};
    });
    b = group_combine<G>(b, sh.arg);
    if (b.id < 0) break;
    if (G::leader()) {
      out->top_tokens[count] = static_cast<int32_t>(b.id);
      out->top_values[count] = static_cast<float>(static_cast<double>(b.v) - lse);
    }
    prev = b;
  }
  if (G::leader()) out->top_count = count;
}

// One row (see the file comment). Returns at the same point in every thread of the row.
template <typename G>
__device__ void sample_row(const RowJob& job, SampleRowResult* out, Shared& sh) {
  const SampleRowParams& p = job.p;
  const float* x = job.x;
  const int64_t lim = p.vocab_limit > 0 && p.vocab_limit < job.n ? p.vocab_limit : job.n;
  if (threadIdx.x == 0) sh.undecided = 0;

  // 1. raw pass.
  ArgBest raw{-INFINITY, -1};
  int bad = 0;
  walk_row<G>(x, lim, [&](int64_t i, float v, bool valid) {
    if (!valid) return;
    if (isnan(v) || v == INFINITY) bad = 1;
    if (v > raw.v) raw = {v, i};  // ascending ids per thread: ties keep the lowest
  });
  if (raw.v == -INFINITY) raw.id = -1;
  bad = __syncthreads_or(bad);
  if constexpr (G::kSize > 1) {
    if (threadIdx.x == 0) sh.flag = bad;
    G::sync();
    for (int r = 0; r < G::kSize; ++r) bad |= *G::at(&sh.flag, static_cast<unsigned>(r));
  }
  raw = group_combine<G>(raw, sh.arg);
  auto finish = [&](SampleRowStatus s, int64_t token) {
    if (G::leader()) {
      out->status = s;
      out->token = static_cast<int32_t>(token);
      out->logprob = 0.0f;
      out->top_count = 0;
    }
  };
  if (bad) return finish(SampleRowStatus::kBadLogit, -1);
  if (raw.id < 0) return finish(SampleRowStatus::kNothingLeft, -1);

  int64_t token = p.scored_token >= 0 ? p.scored_token : raw.id;
  if (!p.greedy && p.scored_token < 0) {
    Processing pr{p.temperature > 0.0f && p.temperature != 1.0f, p.temperature, -INFINITY};
    const float pmax = pr.value(raw.v);  // division by t > 0 keeps the order
    if (pmax == INFINITY) return finish(SampleRowStatus::kUndecided, -1);
    if (p.log_min_p > -INFINITY) pr.threshold = __fadd_rn(pmax, p.log_min_p);
    if (p.top_k > 0 && p.top_k < lim) {
      const float kth = kth_largest<G>(x, lim, pr, p.top_k, sh);
      if (kth != -INFINITY) pr.threshold = kth;
    }
    if (p.top_p < 1.0f) {
      const float t = top_p_threshold<G>(x, lim, pr, pmax, p.top_p, sh);
      if (sh.undecided) return finish(SampleRowStatus::kUndecided, -1);
      if (t > pr.threshold) pr.threshold = t;
    }
    // 5. Gumbel-max over the kept tokens (gumbel_consider, cuda_sampling_row.cuh).
    const GumbelRow gr = gumbel_row(p, pmax, raw.id);
    KeyBest kb{-INFINITY, -1, -INFINITY};
    walk_row<G>(x, lim, [&](int64_t i, float raw_v, bool valid) {
      if (valid) gumbel_consider(gr, i, pr.kept(raw_v), kb);
    });
    kb = group_combine<G>(kb, sh.key);
    if (kb.id < 0) return finish(SampleRowStatus::kNothingLeft, -1);
    if (kb.best - kb.second <= gumbel_margin(kb.best)) return finish(SampleRowStatus::kUndecided, -1);
    token = kb.id;
  }

  // 6. raw logprobs.
  float logprob = 0.0f;
  const int n_top = p.top_logprobs < 0 ? 0 : (p.top_logprobs > kSampleRowsMaxTopLogprobs ? kSampleRowsMaxTopLogprobs : p.top_logprobs);
  if (p.logprob || n_top > 0) {
    raw_logprobs<G>(x, lim, raw.v, token, n_top, p.rank, logprob, out, sh);
  } else if (G::leader()) {
    out->top_count = 0;
  }
  if (G::leader()) {
    out->status = SampleRowStatus::kOk;
    out->token = static_cast<int32_t>(token);
    out->logprob = logprob;
  }
}

template <typename G>
__global__ void __launch_bounds__(G::kBlockThreads) sample_rows_kernel(LaunchArgs a) {
  __shared__ Shared sh;
  const unsigned row = blockIdx.x / G::kSize;
  const RowJob job = a.jobs[row];
  sample_row<G>(job, a.results + row, sh);
  if constexpr (G::kSize > 1) G::sync();  // no block leaves while another may read its shared memory
}

template <Walk W, int kCluster>
void launch_rows(CudaContext& ctx, unsigned rows, LaunchArgs a) {
  using G = Group<W, kCluster>;
  const dim3 cluster(kCluster, 1, 1);
  const Status launched =
      cuda_status(launch_kernel_ex(sample_rows_kernel<G>, dim3(rows * kCluster), dim3(G::kBlockThreads), 0,
                                   ctx.stream, kCluster > 1 ? &cluster : nullptr, false, a),
                  "sample_rows launch");
  if (!launched.is_ok()) throw StatusError(launched);
}

// TF_SAMPLE_ROWS: unset, the grid kernel where it takes the call (cuda_sampling_grid.h:
// up to 16 rows without logprobs, at least one sampled), else strided; v1
// (session 10's loads), strided, vec4 (16-byte loads), all one block a row; cluster
// (strided on a cluster of 8 blocks a row up to 16 rows, 4 up to 32, 2 up to 66, else
// one block) or cluster2|4|8 (that size); grid (the grid kernel where it takes the
// call, as unset). Read at every call, so tests and benches compare them in one process.
void launch_for_env(CudaContext& ctx, std::span<const RowJob> jobs, LaunchArgs a) {
  const auto rows = static_cast<unsigned>(jobs.size());
  const char* e = std::getenv("TF_SAMPLE_ROWS");
  const std::string walk = e != nullptr ? e : "";
  if ((walk.empty() || walk == "grid") && sample_rows_grid(ctx, jobs, a.jobs, a.results)) return;
  if (walk == "v1") return launch_rows<Walk::kV1, 1>(ctx, rows, a);
  if (walk == "vec4") return launch_rows<Walk::kVec4, 1>(ctx, rows, a);
  int cluster = 1;
  if (walk == "cluster") cluster = rows <= 16 ? 8 : rows <= 32 ? 4 : rows <= 66 ? 2 : 1;
  if (walk == "cluster2") cluster = 2;
  if (walk == "cluster4") cluster = 4;
  if (walk == "cluster8") cluster = 8;
  switch (cluster) {
    case 8: return launch_rows<Walk::kStrided, 8>(ctx, rows, a);
    case 4: return launch_rows<Walk::kStrided, 4>(ctx, rows, a);
    case 2: return launch_rows<Walk::kStrided, 2>(ctx, rows, a);
    default: return launch_rows<Walk::kStrided, 1>(ctx, rows, a);
  }
}

}  // namespace

void sample_rows(CudaContext& ctx, std::span<SampleRowResult> out, std::span<const Tensor> rows,
                 std::span<const SampleRowParams> params) {
  if (Status s = check_sample_rows_call(out.size(), rows, params); !s.is_ok()) throw StatusError(s);
  if (rows.empty()) return;
  std::vector<RowJob> jobs(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    check_dev(ctx, "sample_rows", rows[b], DType::kF32);
    jobs[b] = {rows[b].data<float>(), rows[b].numel(), params[b]};
  }
  const auto bytes = static_cast<int64_t>(jobs.size() * sizeof(RowJob));
  Tensor dev_jobs = ctx.upload(jobs.data(), bytes);
  Tensor dev_out = ctx.scratch(static_cast<int64_t>(out.size() * sizeof(SampleRowResult)));
  launch_for_env(ctx, jobs, {static_cast<const RowJob*>(dev_jobs.raw()), static_cast<SampleRowResult*>(dev_out.raw())});
  const Status copied = cuda_status(cudaMemcpyAsync(out.data(), dev_out.raw(), out.size() * sizeof(SampleRowResult),
                                                    cudaMemcpyDeviceToHost, ctx.stream),
                                    "sample_rows download");
  if (!copied.is_ok()) throw StatusError(copied);
  const Status synced = cuda_status(cudaStreamSynchronize(ctx.stream), "sample_rows");
  if (!synced.is_ok()) throw StatusError(synced);
}

}  // namespace tf::cuda
