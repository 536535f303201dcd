// The fused mHC pre-step on the GPU (Ops::mhc_pre at decode rows): two launches in
// place of rms_norm, the fn matmul, mhc_coefficients, mhc_collapse and rms_norm
// (and of the mhc_expand before them: Ops::mhc_expand_pre).
#pragma once

#include <atomic>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Runs Ops::mhc_pre fused when the call fits the kernels (M = 4; an f32 fn at most
// ctx.exact_rows rows, a bf16 fn any number up to 524280 (its default sequence would
// round the normed streams to bf16 above exact_rows); D a multiple of 4 up to 8192,
// 16-byte aligned tensors, the legacy switch off) and returns true; returns false
// without enqueuing anything otherwise (the caller then runs the default sequence).
// Throws StatusError on tensors that do not match each other.
bool mhc_pre_fused(CudaContext& ctx, Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams,
                   const Tensor& fn, const Tensor& base, const Tensor& scale, const Tensor& norm_weight,
                   float norm_eps, float hc_eps, int sinkhorn_iters);

// Ops::mhc_expand_pre fused: the pass kernel computes streams_out = mhc_expand(y,
// prev_post, prev_comb, residual) itself (the bits of mhc_expand), writes it and goes
// on as mhc_pre_fused over it. The same conditions (on streams_out), plus f32
// 16-byte aligned expand inputs; false: nothing enqueued.
bool mhc_expand_pre_fused(CudaContext& ctx, Tensor& streams_out, Tensor& post, Tensor& comb, Tensor& out,
                          const Tensor& y, const Tensor& prev_post, const Tensor& prev_comb,
                          const Tensor& residual, const Tensor& fn, const Tensor& base, const Tensor& scale,
                          const Tensor& norm_weight, float norm_eps, float hc_eps, int sinkhorn_iters);

// Whether the finish kernel launches with programmatic dependent launch (it then starts
// while the pass runs and loads the streams early; the same bits either way). On unless
// TF_MHC_PDL=0; benchmarks and tests flip it.
std::atomic<bool>& mhc_pre_pdl();

// Whether calls of more than ctx.exact_rows rows (and at least 32; prefill chunks) with
// a bf16 fn take the rows pass and finish (cuda_mhc_pre_rows.cuh: 8 rows per pass block,
// a row's dot products summed in registers over 256 float4 of K before any shuffle; the
// Sinkhorn chains two rows per warp beside one collapse block per row) instead of the
// decode kernels. The bits differ from the decode kernels' in the summation order only.
// On unless TF_MHC_ROWS_PASS=0; benchmarks and tests flip it.
std::atomic<bool>& mhc_pre_rows_pass();

// Rows per decode pass block for calls of 2 to 8 rows: 8 (the default, TF_MHC_PASS_ROWS
// unset: the blocks of session 51 and before), 2 or 4, or 0: the fewest of 2, 4, 8 that
// hold the call's rows. A block reduces the dot products of all its rows, real or not;
// the bits do not depend on it. 0 is not the default until it is measured in the model
// on the GPU. Benchmarks and tests set it.
std::atomic<int>& mhc_pre_pass_rows();

// Session 7's kernels instead of today's (the group Sinkhorn of mhc_coefficients, f32
// fn only: a bf16 fn then takes the default sequence; no PDL on the pass): the same
// bits, for before/after benchmarks. Off by default.
std::atomic<bool>& mhc_pre_v1();

// Timing and bits of the coefficient chain alone (one warp on `stream`, `reps` rows of
// logits [reps, 24] f32 on the device (base [24], scale [3] too), hc 4, `iters`
// iterations): the group Sinkhorn (old) and mhc_coeff_row_fast (new) on the same
// logits. Each variant runs over all rows in turn (its code then warm in the
// instruction cache); cycles_*: clock64 cycles per row, median over the rows;
// bits_equal: new gives the old bits. For the benchmark and the tests; throws
// StatusError on CUDA errors.
struct MhcSinkhornProbe {
  double cycles_old = 0, cycles_new = 0;
  bool bits_equal = false;
  // Alternatives of the new chain, timed the same way (exploratory: reported, not
  // required): its division 0 `a / b`, 1 mhc_div checked per division (the chain's
  // fallback when a value leaves the fast range), 2 unchecked (a bound); whether each
  // gave the old bits.
  static constexpr int kAlts = 3;
  double cycles_alt[kAlts] = {0, 0, 0};
  bool alt_bits_equal[kAlts] = {false, false, false};
  int64_t div_checked = 0, div_mismatches = 0;  // mhc_div vs a / b on random pairs
};
MhcSinkhornProbe mhc_sinkhorn_probe(cudaStream_t stream, const Tensor& logits, const Tensor& base,
                                    const Tensor& scale, float hc_eps, int iters);

}  // namespace tf::cuda
