// Device sampling on a grid (see cuda_sampling_grid.h): each row's passes are spread
// over `slices` blocks, one contiguous slice of the row each, so a few rows use every
// SM instead of one each. The passes are the one-block kernel's (cuda_sampling.cu):
//   A. raw pass: NaN/+inf check and the argmax (value, lowest id); greedy rows end;
//   K. top_k: radix select of the k-th largest processed value (4 digits of 8 bits);
//   P. top_p: the minimum, the total mass (double) and the first digit's masses in one
//      pass, then the walk down the digits to the threshold value, with the margins
//      of kTopPMargin (sample_rows.h) checked on both sides;
//   G. Gumbel-max over the kept tokens (gumbel_consider), runner-up margin checked.
// Between passes the grid meets (cooperative launch, grid.sync()): each block leaves
// its partial results (arg, min, total, best keys) in its row's RowScratch, digit
// counts and masses are added there with atomics, and every block of the row then
// reads the same values and takes the same decision. Sums in another order than the
// one-block kernel's can only move a row between decided and kUndecided (the margins
// are far wider than the rounding), never change a decided token: every token decided
// here is the host sampler's token, as in the one-block kernels.
// Rows asking for logprobs keep the one-block kernels (their values depend on the
// summation order, which must not depend on how many rows share a call).
#include "kernels/cuda/cuda_sampling_grid.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {
namespace {

using namespace sampling;  // NOLINT: the row pieces shared with the one-block kernels
namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSlices = 128;  // blocks per row at most
constexpr int kMinSlices = 8;    // fewer: the one-block kernels (many rows fill the GPU anyway)
// More rows, or greedy rows only: the one-block kernels. Measured on an H200 (bench/RESULTS.md,
// session 31): the grid wins for sampled rows at batch 1 (top_p 3.7x) but loses for a greedy
// row (its grid-wide barrier costs more than one block's argmax) and for 64 top_p/top_k rows.
constexpr int kMaxRows = 16;
constexpr int kLoads = 4;        // loads in flight per thread and round
constexpr int kDigits = 4;       // 8-bit digits of a 32-bit order key

// A row's meeting place in global memory, zeroed before the launch.
struct RowScratch {
  ArgBest arg[kMaxSlices];
  float fmin[kMaxSlices];
  double total[kMaxSlices];
  KeyBest key[kMaxSlices];
  unsigned kcnt[kDigits][256];  // top_k digit counts
  unsigned cnt[kDigits][256];   // top_p digit counts
  double mass[kDigits][256];    // top_p digit masses
  int bad;
};

struct GridArgs {
  const RowJob* jobs;
  SampleRowResult* results;
  RowScratch* scratch;
  int slices;
  bool any_sampled, any_top_k, any_top_p;  // passes some row of the call needs (grid-uniform)
};

struct BlockShared {
  ArgBest arg[kWarps];
  KeyBest key[kWarps];
  float fmin[kWarps];
  double sum[kWarps];
  unsigned cnt[256];
  double mass[256];
  ArgBest raw;
  float mn;
  double total;
  uint32_t prefix;
  double above, group_mass;
  int undecided;
};

// Cross-block values are read past L1 (another SM wrote them before the grid met).
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (sizeof(T) == 4) {
    return __ldcg(p);
  } else {
    T v;
    const auto* s = reinterpret_cast<const unsigned*>(p);
    auto* d = reinterpret_cast<unsigned*>(&v);
#pragma unroll
    for (size_t k = 0; k < sizeof(T) / 4; ++k) d[k] = __ldcg(s + k);
    return v;
  }
}

struct MinOp {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};
struct AddOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct CombineOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return combine(a, b);
  }
};
__device__ __forceinline__ float shfl(float a, int o) { return __shfl_xor_sync(0xffffffffu, a, o); }
__device__ __forceinline__ double shfl(double a, int o) { return __shfl_xor_sync(0xffffffffu, a, o); }

// Block-wide reduction; the result in every thread.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl(v, o));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  __syncthreads();  // scratch is free again
  return r;
}

// f(i, v, valid) for the elements threadIdx.x (mod kThreads) of [lo, hi), ascending,
// kLoads loads issued before their calls. Every thread of the block makes the same
// number of calls (valid false past hi): warp_bin_add needs uniform trip counts.
template <typename F>
__device__ __forceinline__ void walk_slice(const float* __restrict__ x, int64_t lo, int64_t hi, F&& f) {
  for (int64_t base = lo; base < hi; base += int64_t{kThreads} * kLoads) {
    float v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      v[u] = i < hi ? x[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      f(i, v[u], i < hi);
    }
  }
}

// Adds (1, mass) to bin d of the block's bins for every lane with `valid`: lanes that
// share a digit are summed by the warp first, so the shared atomics see one add per
// distinct digit and warp. Every lane of the warp must call it.
__device__ __forceinline__ void warp_bin_add(bool valid, unsigned d, double mass, BlockShared& sh) {
  unsigned todo = __ballot_sync(0xffffffffu, valid);
  const int lane = threadIdx.x & 31;
  while (todo != 0) {
    const unsigned d0 = __shfl_sync(0xffffffffu, d, __ffs(static_cast<int>(todo)) - 1);
    const bool in = valid && d == d0;
    const unsigned members = __ballot_sync(0xffffffffu, in);
    double m = in ? mass : 0.0;
    for (int o = 16; o > 0; o >>= 1) m += __shfl_xor_sync(0xffffffffu, m, o);
    if (lane == __ffs(static_cast<int>(members)) - 1) {
      atomicAdd(&sh.cnt[d0], static_cast<unsigned>(__popc(members)));
      atomicAdd(&sh.mass[d0], m);
    }
    todo &= ~members;
  }
}

__device__ void zero_block_bins(BlockShared& sh) {
  for (int d = threadIdx.x; d < 256; d += kThreads) {
    sh.cnt[d] = 0;
    sh.mass[d] = 0.0;
  }
  __syncthreads();
}

// The block's bins into the row's (digit `level`); masses only when `mass` is set.
__device__ void flush_block_bins(BlockShared& sh, unsigned* cnt, double* mass) {
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += kThreads) {
    if (sh.cnt[d] == 0) continue;
    atomicAdd(&cnt[d], sh.cnt[d]);
    if (mass != nullptr) atomicAdd(&mass[d], sh.mass[d]);
  }
}

// The row's bins of one digit (written by every block before the grid met) into the
// block's shared bins, where warp 0 scans them.
__device__ void stage_row_bins(BlockShared& sh, const unsigned* cnt, const double* mass) {
  __syncthreads();  // the block's own bins are no longer read
  for (int d = threadIdx.x; d < 256; d += kThreads) {
    sh.cnt[d] = load_cg(&cnt[d]);
    sh.mass[d] = mass != nullptr ? load_cg(&mass[d]) : 0.0;
  }
  __syncthreads();
}

// Warp 0, lane l, owns the digits 255 - 8l - j (j = 0..7), the lanes' sums meet in an
// exclusive scan, and the first lane whose digits cross the target reports. Digits
// are taken from the top, as the one-block kernels' serial loops do.
__device__ __forceinline__ int first_lane(bool found) {
  const unsigned any = __ballot_sync(0xffffffffu, found);
  return any == 0 ? -1 : __ffs(static_cast<int>(any)) - 1;
}
template <typename T>
__device__ __forceinline__ T exclusive_lane_sum(T mine) {
  const int lane = threadIdx.x & 31;
  T incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  return incl - mine;
}

// top_k: the digit holding the `remaining`-th largest count (digit 0 when none
// does), and what remains inside it. Warp 0 only; the result in lane 0's return.
__device__ bool pick_count_digit(const BlockShared& sh, uint32_t& remaining, int& chosen) {
  const int lane = threadIdx.x & 31;
  unsigned sum = 0;
  for (int j = 0; j < 8; ++j) sum += sh.cnt[255 - 8 * lane - j];
  const unsigned before = exclusive_lane_sum(sum);
  uint32_t rem = before < remaining ? remaining - before : 0;
  int d_found = -1;
  if (before < remaining) {
    for (int j = 0; j < 8; ++j) {
      const int d = 255 - 8 * lane - j;
      if (d == 0 || sh.cnt[d] >= rem) {
        d_found = d;
        break;
      }
      rem -= sh.cnt[d];
    }
  }
  const int w = first_lane(d_found >= 0);
  chosen = __shfl_sync(0xffffffffu, d_found, w < 0 ? 0 : w);
  remaining = __shfl_sync(0xffffffffu, rem, w < 0 ? 0 : w);
  return w >= 0;
}

// top_p: the first digit (from the top) whose mass takes `above` to `target`; updates
// above (the mass of the digits above it) and group_mass (its own). False when the
// digits never reach the target (rounding decides: the row is undecided).
__device__ bool pick_mass_digit(const BlockShared& sh, double target, double& above, double& group_mass,
                                int& chosen) {
  const int lane = threadIdx.x & 31;
  double sum = 0.0;
  for (int j = 0; j < 8; ++j) {
    const int d = 255 - 8 * lane - j;
    if (sh.cnt[d] != 0) sum += sh.mass[d];
  }
  double run = above + exclusive_lane_sum(sum);
  int d_found = -1;
  double md_found = 0.0;
  for (int j = 0; j < 8; ++j) {
    const int d = 255 - 8 * lane - j;
    if (sh.cnt[d] == 0) continue;
    if (run + sh.mass[d] >= target) {
      d_found = d;
      md_found = sh.mass[d];
      break;
    }
    run += sh.mass[d];
  }
  const int w = first_lane(d_found >= 0);
  if (w < 0) return false;
  chosen = __shfl_sync(0xffffffffu, d_found, w);
  above = __shfl_sync(0xffffffffu, run, w);
  group_mass = __shfl_sync(0xffffffffu, md_found, w);
  return true;
}

__device__ void finish(SampleRowResult* out, SampleRowStatus s, int64_t token) {
  out->status = s;
  out->token = static_cast<int32_t>(token);
  out->logprob = 0.0f;
  out->top_count = 0;
}

__global__ void __launch_bounds__(kThreads) sample_rows_grid_kernel(GridArgs a) {
  __shared__ BlockShared sh;
  cg::grid_group grid = cg::this_grid();
  const int row = static_cast<int>(blockIdx.x) / a.slices, slice = static_cast<int>(blockIdx.x) % a.slices;
  const bool reporter = slice == 0 && threadIdx.x == 0;  // writes the row's result
  const RowJob job = a.jobs[row];
  const SampleRowParams& p = job.p;
  RowScratch& rs = a.scratch[row];
  SampleRowResult* out = a.results + row;
  const float* x = job.x;
  const int64_t lim = p.vocab_limit > 0 && p.vocab_limit < job.n ? p.vocab_limit : job.n;
  const int64_t chunk = (lim + a.slices - 1) / a.slices;
  const int64_t lo = std::min<int64_t>(lim, slice * chunk), hi = std::min<int64_t>(lim, lo + chunk);

  // A. raw pass.
  ArgBest raw{-INFINITY, -1};
  int bad = 0;
  walk_slice(x, lo, hi, [&](int64_t i, float v, bool valid) {
    if (!valid) return;
    if (isnan(v) || v == INFINITY) bad = 1;
    if (v > raw.v) raw = {v, i};  // ascending ids per thread: ties keep the lowest
  });
  bad = __syncthreads_or(bad);
  raw = block_reduce(raw, CombineOp{}, sh.arg);
  if (threadIdx.x == 0) {
    rs.arg[slice] = raw;
    if (bad) atomicOr(&rs.bad, 1);
  }
  grid.sync();
  if (threadIdx.x == 0) {
    ArgBest r = load_cg(&rs.arg[0]);
    for (int s = 1; s < a.slices; ++s) r = combine(r, load_cg(&rs.arg[s]));
    sh.raw = r;
    sh.undecided = load_cg(&rs.bad);
  }
  __syncthreads();
  raw = sh.raw;
  bool active = false;  // still sampling: every block of the row computes the same
  if (sh.undecided != 0) {
    if (reporter) finish(out, SampleRowStatus::kBadLogit, -1);
  } else if (raw.id < 0) {
    if (reporter) finish(out, SampleRowStatus::kNothingLeft, -1);
  } else if (p.greedy) {
    if (reporter) finish(out, SampleRowStatus::kOk, raw.id);
  } else {
    active = true;
  }
  __syncthreads();  // sh.undecided is reused below

  Processing pr{p.temperature > 0.0f && p.temperature != 1.0f, p.temperature, -INFINITY};
  const float pmax = active ? pr.value(raw.v) : 0.0f;  // division by t > 0 keeps the order
  if (active && pmax == INFINITY) {
    if (reporter) finish(out, SampleRowStatus::kUndecided, -1);
    active = false;
  }
  if (active && p.log_min_p > -INFINITY) pr.threshold = __fadd_rn(pmax, p.log_min_p);

  // K. top_k: the k-th largest kept value (removed values count as -inf, as in
  // the one-block kernel).
  if (a.any_top_k) {
    const bool mine = active && p.top_k > 0 && p.top_k < lim;
    uint32_t prefix = 0, remaining = mine ? static_cast<uint32_t>(p.top_k) : 0u;
    for (int level = 0; level < kDigits; ++level) {
      const int shift = 24 - 8 * level;
      const uint32_t hi_mask = level == 0 ? 0u : (0xFFFFFFFFu << (shift + 8));
      zero_block_bins(sh);
      if (mine) {
        walk_slice(x, lo, hi, [&](int64_t, float v, bool valid) {
          const uint32_t key = valid ? order_key(pr.kept(v)) : 0u;
          warp_bin_add(valid && (key & hi_mask) == prefix, (key >> shift) & 255u, 0.0, sh);
        });
        flush_block_bins(sh, rs.kcnt[level], nullptr);
      }
      grid.sync();
      if (mine) {
        stage_row_bins(sh, rs.kcnt[level], nullptr);
        if (threadIdx.x < 32) {
          int d = 0;
          pick_count_digit(sh, remaining, d);
          if (threadIdx.x == 0) sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
        }
      }
      __syncthreads();
      prefix = sh.prefix;
      __syncthreads();
    }
    if (mine) {
      const float kth = __uint_as_float(float_bits_of_order_key(prefix));
      if (kth != -INFINITY) pr.threshold = kth;
    }
  }

  // P. top_p.
  if (a.any_top_p) {
    const bool mine = active && p.top_p < 1.0f;
    const double m = pmax;
    float mn = INFINITY;
    double part = 0.0;
    zero_block_bins(sh);
    if (mine) {
      walk_slice(x, lo, hi, [&](int64_t, float raw_v, bool valid) {
        const MassTerm t = mass_term(pr, raw_v, valid, m, mn, part);
        warp_bin_add(t.in, order_key(t.v) >> 24, t.e, sh);
      });
      mn = block_reduce(mn, MinOp{}, sh.fmin);
      part = block_reduce(part, AddOp{}, sh.sum);
      if (threadIdx.x == 0) {
        rs.fmin[slice] = mn;
        rs.total[slice] = part;
      }
      flush_block_bins(sh, rs.cnt[0], rs.mass[0]);
    }
    grid.sync();
    if (mine && threadIdx.x == 0) {
      float row_mn = INFINITY;
      double total = 0.0;
      for (int s = 0; s < a.slices; ++s) {
        row_mn = fminf(row_mn, load_cg(&rs.fmin[s]));
        total += load_cg(&rs.total[s]);
      }
      sh.mn = row_mn;
      sh.total = total;
      sh.undecided = 0;
      sh.above = 0.0;
      sh.group_mass = 0.0;
      sh.prefix = 0;
    }
    __syncthreads();
    // All kept values tied: all stay (no threshold).
    const bool walk = mine && m - static_cast<double>(sh.mn) != 0.0;
    const double target = static_cast<double>(p.top_p) * sh.total, eps = kTopPMargin * sh.total;
    for (int level = 0; level < kDigits; ++level) {
      const int shift = 24 - 8 * level;
      const uint32_t hi_mask = level == 0 ? 0u : (0xFFFFFFFFu << (shift + 8));
      const uint32_t prefix = sh.prefix;
      if (level > 0) {
        __syncthreads();  // every thread read sh.prefix
        zero_block_bins(sh);
        if (walk) {
          walk_slice(x, lo, hi, [&](int64_t, float raw_v, bool valid) {
            const float v = valid ? pr.kept(raw_v) : -INFINITY;
            const uint32_t key = order_key(v);
            const bool in = v != -INFINITY && (key & hi_mask) == prefix;
            warp_bin_add(in, (key >> shift) & 255u, in ? exp(static_cast<double>(v) - m) : 0.0, sh);
          });
          flush_block_bins(sh, rs.cnt[level], rs.mass[level]);
        }
        grid.sync();
      }
      if (walk) {
        stage_row_bins(sh, rs.cnt[level], rs.mass[level]);
        if (threadIdx.x < 32) {
          double above = sh.above, group_mass = sh.group_mass;
          int chosen = 0;
          const bool reached = pick_mass_digit(sh, target, above, group_mass, chosen);
          if (threadIdx.x == 0) {
            if (!reached) sh.undecided = 1;  // the digit sums never reached the target: rounding decides
            sh.above = above;
            sh.group_mass = group_mass;
            sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
          }
        }
      }
      __syncthreads();
    }
    if (walk) {
      const float v_star = __uint_as_float(float_bits_of_order_key(sh.prefix));
      // v* is kept (F(v*) = above < target) and the next value is not (F = above + its
      // group >= target): both must hold with margin, unless v* is the smallest value.
      const bool close = !(sh.above < target - eps) ||
                         (order_key(v_star) != order_key(sh.mn) && !(sh.above + sh.group_mass > target + eps));
      if (sh.undecided != 0 || close) {
        if (reporter) finish(out, SampleRowStatus::kUndecided, -1);
        active = false;
      } else if (v_star > pr.threshold) {
        pr.threshold = v_star;
      }
    }
  }

  // G. Gumbel-max over the kept tokens.
  if (a.any_sampled) {
    KeyBest kb{-INFINITY, -1, -INFINITY};
    if (active) {
      const GumbelRow gr = gumbel_row(p, pmax, raw.id);
      walk_slice(x, lo, hi, [&](int64_t i, float v, bool valid) {
        if (valid) gumbel_consider(gr, i, pr.kept(v), kb);
      });
    }
    kb = block_reduce(kb, CombineOp{}, sh.key);
    if (threadIdx.x == 0) rs.key[slice] = kb;
    grid.sync();
    if (active && reporter) {
      KeyBest r = load_cg(&rs.key[0]);
      for (int s = 1; s < a.slices; ++s) r = combine(r, load_cg(&rs.key[s]));
      if (r.id < 0) {
        finish(out, SampleRowStatus::kNothingLeft, -1);
      } else if (r.best - r.second <= gumbel_margin(r.best)) {
        finish(out, SampleRowStatus::kUndecided, -1);
      } else {
        finish(out, SampleRowStatus::kOk, r.id);
      }
    }
  }
}

// Co-resident blocks of the grid kernel on the current device (cached per device).
int grid_capacity() {
  static std::mutex mu;
  static std::array<int, 64> cached{};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= static_cast<int>(cached.size())) return 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cached[static_cast<size_t>(dev)] == 0) {
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sample_rows_grid_kernel, kThreads, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 0;
    cached[static_cast<size_t>(dev)] = std::max(1, per_sm * sms);
  }
  return cached[static_cast<size_t>(dev)];
}

}  // namespace

bool sample_rows_grid(CudaContext& ctx, std::span<const RowJob> jobs, const RowJob* dev_jobs,
                      SampleRowResult* dev_out) {
  GridArgs a{dev_jobs, dev_out, nullptr, 0, false, false, false};
  for (const RowJob& j : jobs) {
    if (j.p.logprob || j.p.top_logprobs > 0 || j.p.scored_token >= 0) return false;
    a.any_sampled = a.any_sampled || !j.p.greedy;
    a.any_top_k = a.any_top_k || (!j.p.greedy && j.p.top_k > 0);
    a.any_top_p = a.any_top_p || (!j.p.greedy && j.p.top_p < 1.0f);
  }
  const int rows = static_cast<int>(jobs.size());
  if (rows == 0 || rows > kMaxRows || !a.any_sampled) return false;
  a.slices = std::min(kMaxSlices, grid_capacity() / rows);
  if (a.slices < kMinSlices) return false;
  const auto bytes = static_cast<int64_t>(sizeof(RowScratch)) * rows;
  Tensor scratch = ctx.scratch(bytes);
  a.scratch = static_cast<RowScratch*>(scratch.raw());
  const Status zeroed =
      cuda_status(cudaMemsetAsync(a.scratch, 0, static_cast<size_t>(bytes), ctx.stream), "sample_rows_grid scratch");
  if (!zeroed.is_ok()) throw StatusError(zeroed);
  void* args[] = {&a};
  const Status launched = cuda_status(
      cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(sample_rows_grid_kernel),
                                  dim3(static_cast<unsigned>(rows * a.slices)), dim3(kThreads), args, 0, ctx.stream),
      "sample_rows_grid launch");
  if (!launched.is_ok()) throw StatusError(launched);
  return true;
}

}  // namespace tf::cuda
