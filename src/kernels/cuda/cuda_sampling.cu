// Device sampling: one block of kThreads threads per logits row, several passes
// over the row (it stays in L2: 620 KB for a 154,880-token vocabulary).
//
//   1. raw pass: NaN/+inf check and the argmax (value, lowest id);
//   greedy rows stop here. Sampled rows:
//   2. temperature (IEEE f32 division, __fdiv_rn: as the host) and min_p (one f32
//      addition of the host's log(min_p)) are applied on the fly in every pass;
//   3. top_k: radix select of the k-th largest processed value (4 passes of 8 bits);
//   4. top_p: total mass in double, then a radix walk down the values (descending)
//      accumulating the mass of each 8-bit digit until it reaches top_p * total:
//      the value found is the threshold, and the masses on both sides of it are
//      checked against kTopPMargin (sample_rows.h);
//   5. Gumbel-max over the kept tokens with the host's counter hash, keeping the
//      runner-up key to check gumbel_margin;
//   6. raw logprobs when asked: lse (double) and top-n by repeated block argmax.
// Digit masses are summed with shared-memory atomics (order not fixed): that can
// only move a row between "decided" and kUndecided, never change a decided token,
// because a decision is taken only outside the rounding margins.
#include "kernels/cuda/cuda_sampling.h"

#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/api/counter_hash.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;
// The largest Gumbel variate hash_to_open_unit allows is < 36.8 (u <= 1 - 2^-53).
constexpr double kMaxGumbel = 37.5;
constexpr double kLn2 = 0.69314718055994530942;
constexpr int kWarps = kThreads / 32;

struct RowJob {
  const float* x;
  int64_t n;
  SampleRowParams p;
};

// (value, id) with "better" = larger value, then lower id; id -1 = none.
struct ArgBest {
  float v;
  int64_t id;
};
__device__ __forceinline__ bool better(float v1, int64_t i1, float v2, int64_t i2) {
  if (i2 < 0) return i1 >= 0;
  if (i1 < 0) return false;
  return v1 > v2 || (v1 == v2 && i1 < i2);
}
__device__ __forceinline__ ArgBest combine(ArgBest a, ArgBest b) { return better(a.v, a.id, b.v, b.id) ? a : b; }

// Best key, its id, and the runner-up key.
struct KeyBest {
  double best;
  int64_t id;
  double second;
};
__device__ __forceinline__ KeyBest combine(KeyBest a, KeyBest b) {
  const bool a_wins = a.id >= 0 && (b.id < 0 || a.best > b.best || (a.best == b.best && a.id < b.id));
  KeyBest w = a_wins ? a : b, l = a_wins ? b : a;
  w.second = fmax(w.second, l.id >= 0 ? l.best : -INFINITY);
  w.second = fmax(w.second, l.second);
  return w;
}

__device__ __forceinline__ ArgBest shfl(ArgBest a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.v, o), __shfl_xor_sync(0xffffffffu, a.id, o)};
}
__device__ __forceinline__ KeyBest shfl(KeyBest a, int o) {
  return {__shfl_xor_sync(0xffffffffu, a.best, o), __shfl_xor_sync(0xffffffffu, a.id, o),
          __shfl_xor_sync(0xffffffffu, a.second, o)};
}

// Block-wide combine of a struct (fixed order; every thread gets the result).
template <typename T>
__device__ T block_combine(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = combine(v, shfl(v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int i = 1; i < kWarps; ++i) r = combine(r, scratch[i]);
  return r;
}

__device__ __forceinline__ uint32_t order_key(float v) { return float_order_key(__float_as_uint(v)); }

struct Processing {
  bool scale;
  float temperature;
  float threshold;  // values below are removed (min_p, top_k, top_p as found)
  __device__ float value(float raw) const { return scale ? __fdiv_rn(raw, temperature) : raw; }
  // The processed value, or -inf when removed.
  __device__ float kept(float raw) const {
    const float v = value(raw);
    return v >= threshold ? v : -INFINITY;
  }
};

struct Shared {
  ArgBest arg[kWarps];
  KeyBest key[kWarps];
  double sum[32];
  float fmin[32];
  unsigned cnt[256];
  double mass[256];
  double stage[kWarps][32];  // warp_bin_add's per-lane masses
  uint32_t prefix;
  int undecided;
};

// Adds (1, mass) to bin d of cnt (and of bins, when not null) for every lane with
// `valid`. Logits crowd into a few radix digits, so lanes that share a bin are first
// combined (lane order) and one leader per bin and warp does the shared atomics.
// Every lane of the warp must call it (uniform loop trip counts).
__device__ __forceinline__ void warp_bin_add(bool valid, unsigned d, double mass, unsigned* cnt, double* bins,
                                             Shared& sh) {
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
      atomicAdd(&bins[d], sum);
    }
  }
  if (bins != nullptr) __syncwarp();
}

// The k-th largest kept value (radix select over the order keys).
__device__ float kth_largest(const float* x, int64_t lim, const Processing& pr, int32_t k, Shared& sh) {
  uint32_t prefix = 0;
  uint32_t remaining = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    for (int d = threadIdx.x; d < 256; d += blockDim.x) sh.cnt[d] = 0;
    __syncthreads();
    for (int64_t i0 = 0; i0 < lim; i0 += blockDim.x) {  // uniform trip count (warp_bin_add)
      const int64_t i = i0 + threadIdx.x;
      const uint32_t key = i < lim ? order_key(pr.kept(x[i])) : 0u;
      warp_bin_add(i < lim && (key & hi_mask) == prefix, (key >> shift) & 255u, 0.0, sh.cnt, nullptr, sh);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (sh.cnt[d] >= remaining) break;
        remaining -= sh.cnt[d];
      }
      sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
    }
    __syncthreads();
    prefix = sh.prefix;
  }
  return __uint_as_float(float_bits_of_order_key(prefix));
}

// The top_p threshold (see the file comment); sets sh.undecided when too close to call.
__device__ float top_p_threshold(const float* x, int64_t lim, const Processing& pr, float pmax, float top_p,
                                 Shared& sh) {
  float mn = INFINITY;
  for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
    const float v = pr.kept(x[i]);
    if (v != -INFINITY) mn = fminf(mn, v);
  }
  struct MinOp {
    __device__ float operator()(float a, float b) const { return fminf(a, b); }
  };
  mn = block_reduce(mn, MinOp{}, sh.fmin);
  const double m = pmax;
  if (m - static_cast<double>(mn) == 0.0) return -INFINITY;  // all kept values tied: all stay
  double part = 0.0;
  for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
    const float v = pr.kept(x[i]);
    if (v != -INFINITY) part += exp(static_cast<double>(v) - m);
  }
  const double total = block_reduce(part, SumOp{}, sh.sum);
  const double target = static_cast<double>(top_p) * total, eps = kTopPMargin * total;

  uint32_t prefix = 0;
  double above = 0.0, group_mass = 0.0;  // mass strictly above the prefix range; of the last digit
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : (0xFFFFFFFFu << (shift + 8));
    for (int d = threadIdx.x; d < 256; d += blockDim.x) {
      sh.cnt[d] = 0;
      sh.mass[d] = 0.0;
    }
    __syncthreads();
    for (int64_t i0 = 0; i0 < lim; i0 += blockDim.x) {  // uniform trip count (warp_bin_add)
      const int64_t i = i0 + threadIdx.x;
      const float v = i < lim ? pr.kept(x[i]) : -INFINITY;
      const uint32_t key = order_key(v);
      const bool in = v != -INFINITY && (key & hi_mask) == prefix;
      warp_bin_add(in, (key >> shift) & 255u, in ? exp(static_cast<double>(v) - m) : 0.0, sh.cnt, sh.mass, sh);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1;
      for (int d = 255; d >= 0; --d) {
        if (sh.cnt[d] == 0) continue;
        if (above + sh.mass[d] >= target) {
          chosen = d;
          break;
        }
        above += sh.mass[d];
      }
      if (chosen < 0) {
        sh.undecided = 1;  // the digit sums never reached the target: rounding decides
        chosen = 0;
      } else {
        group_mass = sh.mass[chosen];
      }
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
    }
    __syncthreads();
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

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const RowJob* jobs, SampleRowResult* results) {
  __shared__ Shared sh;
  const RowJob job = jobs[blockIdx.x];
  const SampleRowParams& p = job.p;
  const float* x = job.x;
  const int64_t lim = p.vocab_limit > 0 && p.vocab_limit < job.n ? p.vocab_limit : job.n;
  SampleRowResult* out = results + blockIdx.x;
  if (threadIdx.x == 0) sh.undecided = 0;

  // 1. raw pass.
  ArgBest raw{-INFINITY, -1};
  int bad = 0;
  for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
    const float v = x[i];
    if (isnan(v) || v == INFINITY) bad = 1;
    if (v > raw.v) raw = {v, i};
  }
  if (raw.v == -INFINITY) raw.id = -1;
  bad = __syncthreads_or(bad);
  raw = block_combine(raw, sh.arg);
  auto finish = [&](SampleRowStatus s, int64_t token) {
    if (threadIdx.x == 0) {
      out->status = s;
      out->token = static_cast<int32_t>(token);
      out->logprob = 0.0f;
      out->top_count = 0;
    }
  };
  if (bad) return finish(SampleRowStatus::kBadLogit, -1);
  if (raw.id < 0) return finish(SampleRowStatus::kNothingLeft, -1);

  int64_t token = raw.id;
  if (!p.greedy) {
    Processing pr{p.temperature > 0.0f && p.temperature != 1.0f, p.temperature, -INFINITY};
    const float pmax = pr.value(raw.v);  // division by t > 0 keeps the order
    if (pmax == INFINITY) return finish(SampleRowStatus::kUndecided, -1);
    if (p.log_min_p > -INFINITY) pr.threshold = __fadd_rn(pmax, p.log_min_p);
    if (p.top_k > 0 && p.top_k < lim) {
      const float kth = kth_largest(x, lim, pr, p.top_k, sh);
      if (kth != -INFINITY) pr.threshold = kth;
    }
    if (p.top_p < 1.0f) {
      const float t = top_p_threshold(x, lim, pr, pmax, p.top_p, sh);
      if (sh.undecided) return finish(SampleRowStatus::kUndecided, -1);
      if (t > pr.threshold) pr.threshold = t;
    }
    // 5. Gumbel-max over the kept tokens. As on the host (sampler.cc), the two
    // logarithms are computed only where a token can come near the key of the
    // argmax token (best0, a lower bound of the winner's key): E = -log(u) >= w = 1 - u,
    // so floor(log2(w)) * ln2 > x + 1e-6 (x = v - best0) proves key < best0 - 1e-6.
    // Such a token can neither win nor be within gumbel_margin of the winner, as long
    // as that margin is below 1e-6 (keys below ~1e6: skipping is off beyond).
    const uint64_t pos = static_cast<uint64_t>(p.position);
    const double u0 = hash_to_open_unit(counter_hash(p.seed, pos, static_cast<uint64_t>(raw.id)));
    const double best0 = __dadd_rn(static_cast<double>(pmax), -log(-log(u0)));
    const bool skipping = gumbel_margin(fabs(static_cast<double>(pmax)) + 40.0) < 1e-7;
    KeyBest kb{-INFINITY, -1, -INFINITY};
    for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
      const float v = pr.kept(x[i]);
      if (v == -INFINITY) continue;
      const double u = hash_to_open_unit(counter_hash(p.seed, pos, static_cast<uint64_t>(i)));
      if (skipping) {
        const double xd = static_cast<double>(v) - best0;
        if (xd < -kMaxGumbel) continue;
        const double w = 1.0 - u;  // exact: u is a multiple of 2^-53 in (0, 1)
        const int e2 = static_cast<int>((__double_as_longlong(w) >> 52) & 0x7FF) - 1023;
        if (e2 * kLn2 > xd + 1e-6) continue;
      }
      const double key = __dadd_rn(static_cast<double>(v), -log(-log(u)));
      if (kb.id < 0 || key > kb.best) {  // ascending ids per thread: equal keys keep the lower id
        kb.second = kb.id < 0 ? kb.second : kb.best;
        kb.best = key;
        kb.id = i;
      } else if (key > kb.second) {
        kb.second = key;
      }
    }
    kb = block_combine(kb, sh.key);
    if (kb.id < 0) return finish(SampleRowStatus::kNothingLeft, -1);
    if (kb.best - kb.second <= gumbel_margin(kb.best)) return finish(SampleRowStatus::kUndecided, -1);
    token = kb.id;
  }

  // 6. raw logprobs.
  float logprob = 0.0f;
  const int n_top = p.top_logprobs < 0 ? 0 : (p.top_logprobs > kSampleRowsMaxTopLogprobs ? kSampleRowsMaxTopLogprobs : p.top_logprobs);
  if (p.logprob || n_top > 0) {
    const double m = raw.v;
    double part = 0.0;
    for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) part += exp(static_cast<double>(x[i]) - m);
    const double lse = m + log(block_reduce(part, SumOp{}, sh.sum));
    logprob = static_cast<float>(static_cast<double>(x[token]) - lse);
    ArgBest prev{INFINITY, -1};
    int count = 0;
    for (; count < n_top; ++count) {
      ArgBest b{-INFINITY, -1};
      for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) {
        const float v = x[i];
        if (v == -INFINITY) continue;
        // strictly after prev in (value desc, id asc) order
        if (prev.id >= 0 && !(v < prev.v || (v == prev.v && i > prev.id))) continue;
        if (better(v, i, b.v, b.id)) b = {v, i};
      }
      b = block_combine(b, sh.arg);
      if (b.id < 0) break;
      if (threadIdx.x == 0) {
        out->top_tokens[count] = static_cast<int32_t>(b.id);
        out->top_values[count] = static_cast<float>(static_cast<double>(b.v) - lse);
      }
      prev = b;
    }
    if (threadIdx.x == 0) out->top_count = count;
  } else if (threadIdx.x == 0) {
    out->top_count = 0;
  }
  if (threadIdx.x == 0) {
    out->status = SampleRowStatus::kOk;
    out->token = static_cast<int32_t>(token);
    out->logprob = logprob;
  }
}

}  // namespace

void sample_rows(CudaContext& ctx, std::span<SampleRowResult> out, std::span<const Tensor> rows,
                 std::span<const SampleRowParams> params) {
  if (out.size() != rows.size() || params.size() != rows.size())
    throw StatusError(invalid_argument("sample_rows: " + std::to_string(rows.size()) + " rows, " +
                                       std::to_string(params.size()) + " parameter sets and " +
                                       std::to_string(out.size()) + " results must agree"));
  if (rows.empty()) return;
  std::vector<RowJob> jobs(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    check_dev(ctx, "sample_rows", rows[b], DType::kF32);
    jobs[b] = {rows[b].data<float>(), rows[b].numel(), params[b]};
  }
  const auto bytes = static_cast<int64_t>(jobs.size() * sizeof(RowJob));
  Tensor dev_jobs = ctx.upload(jobs.data(), bytes);
  Tensor dev_out = ctx.scratch(static_cast<int64_t>(out.size() * sizeof(SampleRowResult)));
  sample_rows_kernel<<<static_cast<unsigned>(rows.size()), kThreads, 0, ctx.stream>>>(
      static_cast<const RowJob*>(dev_jobs.raw()), static_cast<SampleRowResult*>(dev_out.raw()));
  check_launch("sample_rows");
  const Status copied = cuda_status(cudaMemcpyAsync(out.data(), dev_out.raw(), out.size() * sizeof(SampleRowResult),
                                                    cudaMemcpyDeviceToHost, ctx.stream),
                                    "sample_rows download");
  if (!copied.is_ok()) throw StatusError(copied);
  const Status synced = cuda_status(cudaStreamSynchronize(ctx.stream), "sample_rows");
  if (!synced.is_ok()) throw StatusError(synced);
}

}  // namespace tf::cuda
