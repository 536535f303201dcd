// The fused mHC pre-step (Ops::mhc_pre) for decode rows, in two launches instead of
// five (rms_norm of the flat streams, the fn matmul, mhc_coefficients, mhc_collapse,
// the sublayer's rms_norm):
//  1. pass: one read of the streams and of fn. The flat norm has no weight, so it
//     factors out of the dot products: logits_j = (x . fn_j) * rsqrt(mean(x^2) + eps).
//     Block b owns 128 consecutive columns of K = M*D (one float4 per lane) for 8 rows;
//     its warps split the (2+M)M fn rows. Each block writes its partial dots (f32,
//     reduced in a fixed shuffle order) and partial sums of squares (f64, as the norm
//     kernels accumulate them) to scratch: no atomics, so the result is deterministic.
//     fn (f32, or bf16 as the checkpoint stores it: 0.75 MB per site, the same values
//     in f32 give the same bits) is spread over K/128 blocks to stream at HBM speed.
//     With PDL the pass is launched early: its fn loads (a weight) are issued before
//     griddepcontrol.wait, overlapping the previous kernel; everything the previous
//     kernels write is read after it.
//  2. finish, two blocks per row side by side: the partials summed in block order
//     (one warp per value) and the logits scaled in both; one block computes the
//     coefficients (mhc_coeff_row_fast, cuda_mhc_coeff.cuh: the bits of the group code
//     mhc_coefficients uses, on a shorter chain), the other pre (which needs no
//     Sinkhorn), the collapse held in registers (the same sum order as mhc_collapse)
//     and the weighted rms_norm, so the Sinkhorn chain's latency overlaps the collapse
//     instead of preceding it.
// mhc_pre_v1() selects session 7's kernels (the group Sinkhorn, f32 fn only, no PDL on
// the pass) for before/after benches; they give the same bits.
// Versus the default sequence the only difference is where the norm's scale is
// applied to the logits (after the dot products, not to each x); everything after
// the logits is the default's arithmetic. The outputs agree within ~1e-6 relative
// (the tests hold them to 2e-5 against the default on the GPU and the CPU
// tolerance against the CPU). A row's bits do not depend on the other rows.
// mhc_expand_pre folds the preceding mhc_expand into the pass: each block computes its
// columns of the new streams from y and the residual (mhc_expand's sum and order, so
// the same bits), stores them and uses them: one launch and one stream read fewer.
// Prefill rows (past exact_rows) take the rows pass and finish instead
// (cuda_mhc_pre_rows.cuh): the same two steps laid out for many rows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mhc_coeff.cuh"
#include "kernels/cuda/cuda_mhc_pre.h"
#include "kernels/cuda/cuda_mhc_pre_common.cuh"
#include "kernels/cuda/cuda_mhc_pre_rows.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/launch_kernel_ex.cuh"
#include "kernels/cuda/legacy_small_ops.h"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda {
namespace {

constexpr int kPassRows = 8;        // rows per pass block (blockIdx.y)
constexpr int kPassWarps = 8;       // warps per pass block
constexpr int kColsPerBlock = 128;  // columns of K per pass block: a float4 per lane

// The warp's dot products (fv[t] . xv[r]), all reduced side by side (rows past nr and
// fn rows past kMix are zeros): no control flow between the reductions, so their
// shuffles interleave. The same butterfly as warp_reduce (v += shfl_xor(v, o), o = 16
// .. 1): the same bits. Lane 0 stores them.
template <int M, int kRows>
__device__ __forceinline__ void mhc_pass_reduce_store(float* __restrict__ part_dot, const float4* fv,
                                                      const float4* xv, int lane, int warp, int r0, int nr, int np,
                                                      int p) {
  constexpr int kMix = (2 + M) * M, kPerWarp = (kMix + kPassWarps - 1) / kPassWarps;
  float dt[kPerWarp][kRows];
#pragma unroll
  for (int t = 0; t < kPerWarp; ++t)
#pragma unroll
    for (int r = 0; r < kRows; ++r) dt[t][r] = dot4(fv[t], xv[r]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int t = 0; t < kPerWarp; ++t)
#pragma unroll
      for (int r = 0; r < kRows; ++r) dt[t][r] += __shfl_xor_sync(0xffffffffu, dt[t][r], o);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < kPerWarp; ++t) {
      const int j = warp + t * kPassWarps;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (j < kMix && r < nr) part_dot[(static_cast<int64_t>(r0 + r) * kMix + j) * np + p] = dt[t][r];
    }
  }
}

// grid (P, ceil(rows / kRows)), 256 threads. part_dot [rows, mix, P], part_ss [rows, P].
// kExpand: the streams are mhc_expand(ex) (written to ex.out, the same sum in the same
// order as mhc_expand's kernels), else x. FnT: float or __nv_bfloat16. kRows: rows per
// block (1, 2, 4 or kPassRows: pass_block_rows; the bits do not depend on it). kV1:
// session 7's reduction order of work (one reduction after the other; same bits).
template <int M, bool kExpand, typename FnT, int kRows, bool kV1 = false>
__global__ void __launch_bounds__(kPassWarps * 32)
    mhc_pre_pass_kernel(float* __restrict__ part_dot, double* __restrict__ part_ss,
                        const float4* __restrict__ x, const FnT* __restrict__ fn, int rows, int k4,
                        ExpandIn ex) {
  constexpr int kMix = (2 + M) * M, kPerWarp = (kMix + kPassWarps - 1) / kPassWarps;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int p = blockIdx.x, np = gridDim.x;
  const int q = p * 32 + lane;
  const int r0 = blockIdx.y * kRows;
  const int nr = min(kRows, rows - r0);
  const bool in = q < k4;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  // All loads first: this warp's fn rows (a weight: before the wait for the previous
  // kernel when launched with PDL), then the block's rows of x.
  float4 fv[kPerWarp];
#pragma unroll
  for (int t = 0; t < kPerWarp; ++t) {
    const int j = warp + t * kPassWarps;
    fv[t] = in && j < kMix ? load_fn4(fn, static_cast<int64_t>(j) * k4 + q) : zero;
  }
  pdl_wait();
  // The finish kernel may start now: what it reads before its own wait (the streams)
  // was complete before this point.
  pdl_launch_dependents();
  float4 xv[kRows];
  if constexpr (kExpand) {
    // Every warp computes the block's streams (they are its dot products' input);
    // warp 0 stores them.
    const int m = q / ex.d4, kk = q - m * ex.d4;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      xv[r] = zero;
      if (!in || r >= nr) continue;
      const int64_t row = r0 + r;
      xv[r] = expand4<M>(ex, row, m, kk);
      if (warp == 0) ex.out[row * k4 + q] = xv[r];
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      xv[r] = in && r < nr ? x[static_cast<int64_t>(r0 + r) * k4 + q] : zero;
  }
  // Warp w: the sum of squares of row r0 + w.
  if (warp < nr) {
    double ss = 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r == warp) ss = sq4(xv[r]);
    ss = warp_reduce(ss, SumOp{});
    if (lane == 0) part_ss[static_cast<int64_t>(r0 + warp) * np + p] = ss;
  }
  // The dot products: session 7's loop (one reduction after the other: the branches
  // keep them apart) or side by side (the same bits).
  if constexpr (kV1) {
#pragma unroll
    for (int t = 0; t < kPerWarp; ++t) {
      const int j = warp + t * kPassWarps;
      if (j >= kMix) break;  // warp-uniform
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= nr) break;  // block-uniform
        const float d = warp_reduce(dot4(fv[t], xv[r]), SumOp{});
        if (lane == 0) part_dot[(static_cast<int64_t>(r0 + r) * kMix + j) * np + p] = d;
      }
    }
  } else {
    mhc_pass_reduce_store<M, kRows>(part_dot, fv, xv, lane, warp, r0, nr, np, p);
  }
}

// Two blocks per row (blockIdx.y; blockDim.x a multiple of 32, at least 32; d4 <=
// V * blockDim.x), running side by side: y = 0 the coefficients (post, comb: the
// Sinkhorn iterations, a chain of shuffles on one warp), y = 1 pre (a sigmoid of the
// first M logits, the same expression mhc_coeff_row evaluates), the collapse and the
// weighted norm. Each block sums the partials it needs itself.
// streams [rows, M, d4] float4; out [rows, d4]; w [d4] or null.
// kFast: mhc_coeff_row_fast (same bits), and the kernel lets the next one start once the
// pass is done (the next pass then loads its fn early).
template <int M, int V, bool kEarly, bool kFast>
__global__ void __launch_bounds__(1024, 1)
    mhc_pre_finish_kernel(float* __restrict__ post, float* __restrict__ comb, float4* __restrict__ out,
                          const float* __restrict__ part_dot, const double* __restrict__ part_ss,
                          const float4* __restrict__ streams, const float* __restrict__ base,
                          const float* __restrict__ scale, const float4* __restrict__ w, int np, int d4,
                          float norm_eps, float hc_eps, int iters) {
  constexpr int kMix = (2 + M) * M, kGroup = mhc_coeff_group<M>();
  static_assert(kMix <= 32, "warp 0 scales the logits one per lane");
  __shared__ float logits[kMix];
  __shared__ float pre[M];
  __shared__ double ss_flat;
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const bool coeff_block = blockIdx.y == 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  // The row's streams (the collapse block): before the wait for the pass when they
  // were there before it (launched early with PDL: the loads overlap the pass), after
  // it when the pass writes them (mhc_expand_pre).
  const float4* xs = streams + r * M * d4;
  float4 xv[V][M];
  auto load_streams = [&]() { load_row_streams<M, V>(xv, xs, d4, blockDim.x); };
  if (kEarly && !coeff_block) load_streams();
  pdl_wait();
  if (kFast) pdl_launch_dependents();
  // The partials of each value this block needs (all logits, or the first M), summed
  // over the pass blocks in a fixed order; the last value is the sum of squares.
  const int nv = coeff_block ? kMix : M;
  for (int v = warp; v <= nv; v += nw) {
    if (v < nv) {
      const float* src = part_dot + (r * kMix + v) * np;
      float a = 0;
      for (int p = lane; p < np; p += 32) a += src[p];
      a = warp_reduce(a, SumOp{});
      if (lane == 0) logits[v] = a;
    } else {
      const double* src = part_ss + r * np;
      double a = 0;
      for (int p = lane; p < np; p += 32) a += src[p];
      a = warp_reduce(a, SumOp{});
      if (lane == 0) ss_flat = a;
    }
  }
  if (coeff_block) {
    __syncthreads();
    if (warp != 0) return;
    // As rms_norm's kernels: mean in double, then 1 / sqrtf in float.
    const float inv =
        1.0f / sqrtf(static_cast<float>(ss_flat / (static_cast<double>(M) * 4 * d4)) + norm_eps);
    if (lane < kMix) logits[lane] *= inv;
    __syncwarp();
    if constexpr (!kFast)
      mhc_coeff_row<M>(lane % kGroup, lane < kGroup, logits, base, scale, hc_eps, iters, pre, post + r * M,
                       comb + r * M * M);
    else  // as a loop: faster than the chain unrolled for 20 iterations (run2s8, H200: 5.54 vs 5.98 us)
      mhc_coeff_row_fast<M>(lane % kGroup, lane < kGroup, logits, base, scale, hc_eps, iters, pre,
                            post + r * M, comb + r * M * M);
    return;
  }
  if (!kEarly) load_streams();
  __syncthreads();
  if (warp == 0 && lane < M) {
    const float inv =
        1.0f / sqrtf(static_cast<float>(ss_flat / (static_cast<double>(M) * 4 * d4)) + norm_eps);
    const float l = logits[lane] * inv;
    pre[lane] = sigmoidf_(l * scale[0] + base[lane]) + hc_eps;
  }
  __syncthreads();
  float p[M];
#pragma unroll
  for (int j = 0; j < M; ++j) p[j] = pre[j];
  collapse_norm_row<M, V>(out + r * d4, xv, p, w, d4, blockDim.x, norm_eps, scratch);
}

bool on_ctx(const CudaContext& ctx, const Tensor& t) {
  return t.device().kind == DeviceKind::kCuda && t.device().index == ctx.device && t.is_contiguous() &&
         reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
}

template <int M, int V>
void launch_finish(CudaContext& ctx, unsigned rows, int threads, float* post, float* comb, float4* out,
                   const float* part_dot, const double* part_ss, const float4* streams, const float* base,
                   const float* scale, const float4* w, int np, int d4, float norm_eps, float hc_eps,
                   int iters, bool streams_ready) {
  const bool fast = !mhc_pre_v1();
  auto* kernel = streams_ready ? (fast ? mhc_pre_finish_kernel<M, V, true, true> : mhc_pre_finish_kernel<M, V, true, false>)
                               : (fast ? mhc_pre_finish_kernel<M, V, false, true> : mhc_pre_finish_kernel<M, V, false, false>);
  const cudaError_t e =
      launch_kernel_ex(kernel, dim3(rows, 2), dim3(static_cast<unsigned>(threads)), 0, ctx.stream, nullptr,
                       mhc_pre_pdl(), post, comb, out, part_dot, part_ss, streams, base, scale, w, np, d4, norm_eps,
                       hc_eps, iters);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("mhc_pre (finish) launch: ") + cudaGetErrorString(e)));
}

// Rows per pass block for a call of `rows` rows: one for one row, kPassRows past
// kPassRows rows; between, the fewest of 2, 4, 8 that hold them (a block reduces all its
// kRows rows' dot products, real or not) or the mhc_pre_pass_rows() setting. Session 7's
// kernels: always kPassRows.
int pass_block_rows(int64_t rows) {
  if (mhc_pre_v1() || rows > kPassRows) return kPassRows;
  if (rows == 1) return 1;
  const int set = mhc_pre_pass_rows().load();
  if (set != 0) return set;
  int n = 2;
  while (n < kPassRows && n < rows) n *= 2;
  return n;
}

// f(std::integral_constant<int, n>) for n = block_rows (1, 2, 4 or 8).
template <typename F>
cudaError_t with_pass_rows(int block_rows, F&& f) {
  switch (block_rows) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, kPassRows>{});
  }
}

// The pass over fn's dtype (takes() admitted f32 or bf16), with PDL unless switched off
// or session 7's kernels are asked for; blocks of block_rows rows (pass_block_rows).
void launch_pass(CudaContext& ctx, dim3 grid, int block_rows, float* part_dot, double* part_ss,
                 const float4* x, const Tensor& fn, int rows, int k4, const ExpandIn& ex) {
  const bool expand = ex.out != nullptr, bf16 = fn.dtype() == DType::kBF16, pdl = mhc_pre_pdl() && !mhc_pre_v1();
  auto go = [&](auto kernel, const auto* f) {
    return launch_kernel_ex(kernel, grid, dim3(kPassWarps * 32), 0, ctx.stream, nullptr, pdl, part_dot, part_ss, x, f,
                            rows, k4, ex);
  };
  const auto* f16 = reinterpret_cast<const __nv_bfloat16*>(fn.raw());
  const float* f32 = reinterpret_cast<const float*>(fn.raw());
  cudaError_t e;
  if (mhc_pre_v1())  // f32 only (takes())
    e = expand ? go(mhc_pre_pass_kernel<4, true, float, kPassRows, true>, f32)
               : go(mhc_pre_pass_kernel<4, false, float, kPassRows, true>, f32);
  else
    e = with_pass_rows(block_rows, [&](auto n) {
      constexpr int kRows = decltype(n)::value;
      return bf16 ? (expand ? go(mhc_pre_pass_kernel<4, true, __nv_bfloat16, kRows>, f16)
                            : go(mhc_pre_pass_kernel<4, false, __nv_bfloat16, kRows>, f16))
                  : (expand ? go(mhc_pre_pass_kernel<4, true, float, kRows>, f32)
                            : go(mhc_pre_pass_kernel<4, false, float, kRows>, f32));
    });
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("mhc_pre (pass) launch: ") + cudaGetErrorString(e)));
}

}  // namespace

namespace {

constexpr int kM = 4, kMix = (2 + kM) * kM;
constexpr int64_t kMaxRows = int64_t{kPassRows} * 65535;  // the pass grid's y extent

// Whether the fused kernels take a pre-step over `streams` (or, with expand, over the
// streams to be written there): the conditions of mhc_pre_fused (header).
bool takes(const CudaContext& ctx, const Tensor& streams, const Tensor& fn, const Tensor& out,
           const Tensor& norm_weight) {
  if (legacy_small_ops() || streams.dim() != 3 || streams.size(1) != kM) return false;
  const int64_t rows = streams.size(0), d = streams.size(2);
  // A bf16 fn is taken at any row count: the default sequence would round the normed
  // streams to bf16 for cuBLAS above exact_rows (cuda_linear.cu); f32 fn keeps session
  // 7's rule (decode rows fused, prefill rows through the f32 GEMM).
  const bool bf16 = fn.dtype() == DType::kBF16;
  if (bf16 && mhc_pre_v1()) return false;
  if (!bf16 && fn.dtype() != DType::kF32) return false;
  if (rows < 1 || (!bf16 && rows > ctx.exact_rows) || rows > kMaxRows || d % 4 != 0 || d > 8192) return false;
  if (streams.dtype() != DType::kF32 || !on_ctx(ctx, streams) || !on_ctx(ctx, fn) || !on_ctx(ctx, out))
    return false;
  return norm_weight.is_null() || (norm_weight.dtype() == DType::kF32 && on_ctx(ctx, norm_weight));
}

// The two launches over `streams` [rows, M, d] (computed by the pass from ex when
// ex.out is set); the call already passed takes().
void run_fused(CudaContext& ctx, Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams,
               const Tensor& fn, const Tensor& base, const Tensor& scale, const Tensor& norm_weight,
               float norm_eps, float hc_eps, int sinkhorn_iters, const ExpandIn& ex) {
  const int64_t rows = streams.size(0), d = streams.size(2), k = kM * d;
  // Past takes() the call is ours: mismatched tensors are errors, as in the unfused ops.
  if (fn.dim() != 2 || fn.size(0) != kMix || fn.size(1) != k)
    throw StatusError(invalid_argument("mhc_pre: fn " + fn.describe() + " must be [24, " + std::to_string(k) +
                                       "] for streams " + streams.describe()));
  check_dev(ctx, "mhc_pre base", base, DType::kF32, kMix);
  check_dev(ctx, "mhc_pre scale", scale, DType::kF32, 3);
  check_dev(ctx, "mhc_pre post", post, DType::kF32, rows * kM);
  check_dev(ctx, "mhc_pre comb", comb, DType::kF32, rows * kM * kM);
  check_dev(ctx, "mhc_pre out", out, DType::kF32, rows * d);
  const bool has_w = !norm_weight.is_null();
  if (has_w) check_dev(ctx, "mhc_pre norm weight", norm_weight, DType::kF32, d);

  const int k4 = static_cast<int>(k / 4), d4 = static_cast<int>(d / 4);
  // Prefill rows: the rows pass (cuda_mhc_pre_rows.cuh); else the decode pass, whose
  // blocks take kColsPerBlock columns of K each. np: partials per row.
  const bool rows_pass = !mhc_pre_v1() && rows_pass_takes(ctx, rows, d4, fn, mhc_pre_rows_pass());
  static_assert(kColsPerBlock == 32 * 4, "one float4 per lane");
  const int np = rows_pass ? d4 / kRowsPassCols : (k4 + 31) / 32;
  Tensor part = ctx.scratch(rows * np * static_cast<int64_t>(sizeof(double) + kMix * sizeof(float)));
  auto* part_ss = reinterpret_cast<double*>(part.raw());
  auto* part_dot = reinterpret_cast<float*>(part_ss + rows * np);
  const int block_rows = pass_block_rows(rows);
  const dim3 grid(static_cast<unsigned>(np), static_cast<unsigned>((rows + block_rows - 1) / block_rows));
  const auto* x4 = reinterpret_cast<const float4*>(streams.raw());
  if (rows_pass)
    launch_rows_pass(ctx, part_dot, part_ss, x4, fn, static_cast<int>(rows), d4, ex, mhc_pre_pdl());
  else
    launch_pass(ctx, grid, block_rows, part_dot, part_ss, x4, fn, static_cast<int>(rows), k4, ex);

  // Threads: enough float4 lanes for the row in at most 2 per thread, at least one warp
  // (4 per thread spilled registers at 1024 threads).
  const int v = d4 <= 1024 ? 1 : 2;
  int threads = (d4 + v - 1) / v;
  threads = std::max(32, (threads + 31) / 32 * 32);
  const auto* w4 = has_w ? reinterpret_cast<const float4*>(norm_weight.raw()) : nullptr;
  if (rows_pass) {
    launch_rows_finish(ctx, post.data<float>(), comb.data<float>(), reinterpret_cast<float4*>(out.raw()),
                       part_dot, part_ss, x4, base.data<float>(), scale.data<float>(), w4, static_cast<int>(rows),
                       d4, norm_eps, hc_eps, sinkhorn_iters, mhc_pre_pdl());
    check_launch("mhc_pre (rows finish)");
    return;
  }
  auto go = [&](auto launch) {
    launch(ctx, static_cast<unsigned>(rows), threads, post.data<float>(), comb.data<float>(),
           reinterpret_cast<float4*>(out.raw()), part_dot, part_ss, x4, base.data<float>(),
           scale.data<float>(), w4, np, d4, norm_eps, hc_eps, sinkhorn_iters, ex.out == nullptr);
  };
  if (v == 1)
    go(launch_finish<kM, 1>);
  else
    go(launch_finish<kM, 2>);
  check_launch("mhc_pre (finish)");
}

}  // namespace

bool mhc_pre_fused(CudaContext& ctx, Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams,
                   const Tensor& fn, const Tensor& base, const Tensor& scale, const Tensor& norm_weight,
                   float norm_eps, float hc_eps, int sinkhorn_iters) {
  if (!takes(ctx, streams, fn, out, norm_weight)) return false;
  run_fused(ctx, post, comb, out, streams, fn, base, scale, norm_weight, norm_eps, hc_eps, sinkhorn_iters,
            ExpandIn{});
  return true;
}

bool mhc_expand_pre_fused(CudaContext& ctx, Tensor& streams_out, Tensor& post, Tensor& comb, Tensor& out,
                          const Tensor& y, const Tensor& prev_post, const Tensor& prev_comb,
                          const Tensor& residual, const Tensor& fn, const Tensor& base, const Tensor& scale,
                          const Tensor& norm_weight, float norm_eps, float hc_eps, int sinkhorn_iters) {
  if (!takes(ctx, streams_out, fn, out, norm_weight)) return false;
  const int64_t rows = streams_out.size(0), d = streams_out.size(2);
  for (const Tensor* t : {&y, &residual, &prev_post, &prev_comb})
    if (t->dtype() != DType::kF32 || !on_ctx(ctx, *t)) return false;
  // The expand's own checks (mhc_expand's messages).
  check_dev(ctx, "mhc_expand y", y, DType::kF32, rows * d);
  check_dev(ctx, "mhc_expand post", prev_post, DType::kF32, rows * kM);
  check_dev(ctx, "mhc_expand comb", prev_comb, DType::kF32, rows * kM * kM);
  check_dev(ctx, "mhc_expand residual", residual, DType::kF32, rows * kM * d);
  if (streams_out.raw() == residual.raw())
    throw StatusError(invalid_argument("mhc_expand_pre: streams_out must not alias residual"));
  ExpandIn ex;
  ex.out = reinterpret_cast<float4*>(streams_out.raw());
  ex.y = reinterpret_cast<const float4*>(y.raw());
  ex.post = prev_post.data<float>();
  ex.comb = prev_comb.data<float>();
  ex.residual = reinterpret_cast<const float4*>(residual.raw());
  ex.d4 = static_cast<int>(d / 4);
  run_fused(ctx, post, comb, out, streams_out, fn, base, scale, norm_weight, norm_eps, hc_eps, sinkhorn_iters,
            ex);
  return true;
}

namespace {

// One warp: the group Sinkhorn (old), mhc_coeff_row_fast (new) and the alternatives,
// each over every row of logits in turn, each row between clock64 reads.
// out [kProbeVariants, reps, 20]: post then comb of each row; cycles [reps, variants].
constexpr int kProbeVariants = 2 + MhcSinkhornProbe::kAlts;  // old, new, the alternatives
template <int kIters>
__device__ void probe_row(int v, int lane, const float* l, const float* b, const float* s, float hc_eps,
                          int iters, float* pre, float* o) {
  constexpr int kM4 = 4;
  switch (v) {
    case 0: mhc_coeff_row<kM4>(lane % 16, lane < 16, l, b, s, hc_eps, iters, pre, o, o + kM4); break;
    case 1: mhc_coeff_row_fast<kM4, kIters, 3>(lane % 16, lane < 16, l, b, s, hc_eps, iters, pre, o, o + kM4); break;
    case 2: mhc_coeff_row_fast<kM4, kIters, 0>(lane % 16, lane < 16, l, b, s, hc_eps, iters, pre, o, o + kM4); break;
    case 3: mhc_coeff_row_fast<kM4, kIters, 1>(lane % 16, lane < 16, l, b, s, hc_eps, iters, pre, o, o + kM4); break;
    default: mhc_coeff_row_fast<kM4, kIters, 2>(lane % 16, lane < 16, l, b, s, hc_eps, iters, pre, o, o + kM4); break;
  }
}

__global__ void mhc_sinkhorn_probe_kernel(const float* __restrict__ logits, const float* __restrict__ base,
                                          const float* __restrict__ scale, float hc_eps, int iters, int reps,
                                          float* __restrict__ out, long long* __restrict__ cycles) {
  constexpr int kM4 = 4, kMix4 = (2 + kM4) * kM4, kOut = kM4 + kM4 * kM4;
  __shared__ float l[kMix4];
  __shared__ float pre[kM4];
  const int lane = threadIdx.x;
  for (int v = 0; v < kProbeVariants; ++v) {
    for (int r = 0; r < reps; ++r) {
      if (lane < kMix4) l[lane] = logits[static_cast<int64_t>(r) * kMix4 + lane];
      float* o = out + (static_cast<int64_t>(v) * reps + r) * kOut;
      __syncwarp();
      const long long t0 = clock64();
      if (iters == 20)
        probe_row<20>(v, lane, l, base, scale, hc_eps, iters, pre, o);
      else
        probe_row<0>(v, lane, l, base, scale, hc_eps, iters, pre, o);
      __syncwarp();
      const long long t1 = clock64();
      if (lane == 0) cycles[static_cast<int64_t>(r) * kProbeVariants + v] = t1 - t0;
    }
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// mhc_div against a / b on n pseudo-random pairs, four kinds in turn: the Sinkhorn's
// range (a in [2^-30, 16), b in [2^-24, 16)), any normal pair inside the fast path's
// range, uniform a in [0, 1) / b in [1e-6, 5), and arbitrary bit patterns (denormals,
// zeros, inf, NaN: the fallback). NaN results count as equal to NaN.
__global__ void mhc_div_check_kernel(int64_t n, unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull);
    const uint32_t ha = static_cast<uint32_t>(h), hb = static_cast<uint32_t>(h >> 32);
    float a, b;
    switch (i & 3) {
      case 0:
        a = __uint_as_float(((97u + ha % 34u) << 23) | (ha >> 9));
        b = __uint_as_float(((103u + hb % 28u) << 23) | (hb >> 9));
        break;
      case 1:
        a = __uint_as_float(((27u + ha % 200u) << 23) | (ha >> 9) | (ha & 0x80000000u));
        b = __uint_as_float(((27u + hb % 200u) << 23) | (hb >> 9));
        break;
      case 2:
        a = static_cast<float>(ha >> 8) * 0x1p-24f;
        b = 1e-6f + static_cast<float>(hb >> 8) * 0x1p-24f * 5.0f;
        break;
      default:
        a = __uint_as_float(ha);
        b = __uint_as_float(hb);
        break;
    }
    const float q1 = mhc_div(a, b), q2 = a / b;
    const bool same = __float_as_uint(q1) == __float_as_uint(q2) || (isnan(q1) && isnan(q2));
    bad += same ? 0 : 1;
  }
  if (bad) atomicAdd(mismatches, bad);
}

void probe_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("mhc_sinkhorn_probe: ") + what + ": " + cudaGetErrorString(e)));
}

}  // namespace

MhcSinkhornProbe mhc_sinkhorn_probe(cudaStream_t stream, const Tensor& logits, const Tensor& base,
                                    const Tensor& scale, float hc_eps, int iters) {
  for (auto [t, n] : {std::pair{&logits, int64_t{-1}}, {&base, int64_t{kMix}}, {&scale, int64_t{3}}})
    if (t->device().kind != DeviceKind::kCuda || t->dtype() != DType::kF32 || !t->is_contiguous() ||
        (n >= 0 && t->numel() != n))
      throw StatusError(invalid_argument("mhc_sinkhorn_probe: " + t->describe() + ": f32 on the GPU, packed"));
  if (logits.numel() % kMix != 0 || logits.numel() == 0)
    throw StatusError(invalid_argument("mhc_sinkhorn_probe: logits " + logits.describe() + " must be [R, 24]"));
  const int reps = static_cast<int>(logits.numel() / kMix);
  constexpr int kOut = kM + kM * kM, kV = kProbeVariants;
  const int64_t div_n = int64_t{1} << 26;
  const size_t one_bytes = sizeof(float) * kOut * reps, out_bytes = one_bytes * kV;
  const size_t cyc_bytes = sizeof(long long) * kV * reps;
  char* buf = nullptr;
  probe_check(cudaMalloc(&buf, out_bytes + cyc_bytes + sizeof(unsigned long long)), "cudaMalloc");
  auto* out = reinterpret_cast<float*>(buf);
  auto* cyc = reinterpret_cast<long long*>(buf + out_bytes);
  auto* bad = reinterpret_cast<unsigned long long*>(buf + out_bytes + cyc_bytes);
  std::vector<float> h_out(static_cast<size_t>(kOut) * reps * kV);
  std::vector<long long> h_cyc(static_cast<size_t>(kV) * reps);
  unsigned long long h_bad = 0;
  cudaError_t e = cudaMemsetAsync(bad, 0, sizeof(unsigned long long), stream);
  if (e == cudaSuccess) {
    mhc_sinkhorn_probe_kernel<<<1, 32, 0, stream>>>(logits.data<float>(), base.data<float>(), scale.data<float>(),
                                                    hc_eps, iters, reps, out, cyc);
    mhc_div_check_kernel<<<1024, 256, 0, stream>>>(div_n, bad);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(h_out.data(), out, out_bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(h_cyc.data(), cyc, cyc_bytes, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(&h_bad, bad, sizeof h_bad, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  cudaFree(buf);
  probe_check(e, "run");
  // Median cycles of variant v over the rows; whether its outputs are the old bits.
  auto median = [&](int v) {
    std::vector<long long> c(static_cast<size_t>(reps));
    for (int r = 0; r < reps; ++r) c[static_cast<size_t>(r)] = h_cyc[static_cast<size_t>(r) * kV + v];
    std::sort(c.begin(), c.end());
    return static_cast<double>(c[c.size() / 2]);
  };
  auto same = [&](int v) {
    return std::memcmp(h_out.data(), h_out.data() + static_cast<size_t>(v) * kOut * reps, one_bytes) == 0;
  };
  MhcSinkhornProbe p;
  p.cycles_old = median(0);
  p.cycles_new = median(1);
  p.bits_equal = same(1);
  for (int k = 0; k < MhcSinkhornProbe::kAlts; ++k) {
    p.cycles_alt[k] = median(2 + k);
    p.alt_bits_equal[k] = same(2 + k);
  }
  p.div_checked = div_n;
  p.div_mismatches = static_cast<int64_t>(h_bad);
  return p;
}

std::atomic<bool>& mhc_pre_v1() {
  static std::atomic<bool> on{false};
  return on;
}

std::atomic<bool>& mhc_pre_rows_pass() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_MHC_ROWS_PASS");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}
std::atomic<int>& mhc_pre_pass_rows() {
  static std::atomic<int> n{[] {
    const char* e = std::getenv("TF_MHC_PASS_ROWS");
    const int v = e == nullptr ? kPassRows : std::atoi(e);
    return v == 0 || v == 2 || v == 4 ? v : kPassRows;
  }()};
  return n;
}
std::atomic<bool>& mhc_pre_pdl() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_MHC_PDL");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

}  // namespace tf::cuda
