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
// tensor cores: q, k, P, v in bf16 (the reference's bf16 attention; device scratch of 4
// bytes per element of k), TF_SEGMENT_ATTENTION_MMA=split on hi/lo operands (parity ~1e-5,
// 8 bytes per element), =0 on the scalar kernel (cuda_vision.cu).
void segment_attention(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& offsets, float scale);

}  // namespace tf::cuda
