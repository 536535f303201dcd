// The fused mHC pre-step on the GPU (Ops::mhc_pre at decode rows): two launches in
// place of rms_norm, the fn matmul, mhc_coefficients, mhc_collapse and rms_norm
// (and of the mhc_expand before them: Ops::mhc_expand_pre).
#pragma once

#include <atomic>

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// Runs Ops::mhc_pre fused when the call fits the kernels (M = 4, f32 fn, at most
// ctx.exact_rows rows, D a multiple of 4 up to 8192, 16-byte aligned tensors, the
// legacy switch off) and returns true; returns false without enqueuing anything
// otherwise (the caller then runs the default sequence). Throws StatusError on
// tensors that do not match each other.
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

}  // namespace tf::cuda
