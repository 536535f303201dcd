// The bidirectional-encoder ops on the GPU (cuda_vision.cu; Ops::add_bias, gelu,
// rotary, segment_attention): the vision tower's kernels. Arguments are checked as
// by the CPU backend (StatusError naming the op and tensor).
#pragma once

#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

void add_bias(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& bias);
void gelu(CudaContext& ctx, Tensor& out, const Tensor& x);
void rotary(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin);
// Head dims up to 128; offsets int32 on the device, never read by the host (no sync: the
// call is capture-safe). Offsets that break Ops' contract are clamped into [0, T] (no
// stray reads); rows then outside every segment are left unwritten. D = 64 runs on
// tensor cores (split operands, parity ~1e-5; device scratch of 8 bytes per element of
// k) unless TF_SEGMENT_ATTENTION_MMA=0 (cuda_vision.cu).
void segment_attention(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& offsets, float scale);

}  // namespace tf::cuda
