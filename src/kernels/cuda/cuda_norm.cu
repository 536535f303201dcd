// Row norms on the GPU: RMSNorm (weighted or not), LayerNorm and KDA's gated
// RMSNorm. One block per row; the statistics are accumulated in double (as the
// CPU reference does) with a fixed block reduction, so the result of a row does
// not depend on the other rows.
#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kThreads = 256;

// mode 0: rms (weight may be null), 1: gated rms (gate required).
__global__ void rms_kernel(float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ gate, int64_t d, float eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  ss = block_reduce(ss, SumOp{}, scratch);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / d) + eps);
  float* o = out + r * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
    if (gate) v *= 1.0f / (1.0f + expf(-gate[r * d + i]));
    o[i] = v;
  }
}

__global__ void layer_norm_kernel(float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, int64_t d, float eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * d;
  double mean = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) mean += xr[i];
  mean = block_reduce(mean, SumOp{}, scratch) / d;
  double var = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) var += (xr[i] - mean) * (xr[i] - mean);
  var = block_reduce(var, SumOp{}, scratch) / d;
  const float inv = 1.0f / sqrtf(static_cast<float>(var) + eps);
  const float meanf = static_cast<float>(mean);
  float* o = out + r * d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = (xr[i] - meanf) * inv * w[i] + b[i];
}

}  // namespace

void rms_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& weight, float eps) {
  check_dev(ctx, "rms_norm x", x, DType::kF32);
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  check_dev(ctx, "rms_norm out", out, DType::kF32, x.numel());
  const bool has_w = !weight.is_null();
  if (has_w) check_dev(ctx, "rms_norm weight", weight, DType::kF32, d);
  if (rows == 0) return;
  rms_kernel<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(
      out.data<float>(), x.data<float>(), has_w ? weight.data<float>() : nullptr, nullptr, d, eps);
  check_launch("rms_norm");
}

void layer_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  check_dev(ctx, "layer_norm x", x, DType::kF32);
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  check_dev(ctx, "layer_norm out", out, DType::kF32, x.numel());
  check_dev(ctx, "layer_norm weight", weight, DType::kF32, d);
  check_dev(ctx, "layer_norm bias", bias, DType::kF32, d);
  if (rows == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(
      out.data<float>(), x.data<float>(), weight.data<float>(), bias.data<float>(), d, eps);
  check_launch("layer_norm");
}

void gated_rms_norm(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                    float eps) {
  check_dev(ctx, "gated_rms_norm x", x, DType::kF32);
  check_dev(ctx, "gated_rms_norm weight", weight, DType::kF32);
  const int64_t d = weight.numel();
  if (d == 0 || x.numel() % d != 0)
    throw StatusError(invalid_argument("gated_rms_norm: x " + x.describe() + " does not match weight " +
                                       weight.describe()));
  const int64_t rows = x.numel() / d;
  check_dev(ctx, "gated_rms_norm gate", gate, DType::kF32, x.numel());
  check_dev(ctx, "gated_rms_norm out", out, DType::kF32, x.numel());
  if (rows == 0) return;
  rms_kernel<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(out.data<float>(), x.data<float>(),
                                                                       weight.data<float>(), gate.data<float>(), d,
                                                                       eps);
  check_launch("gated_rms_norm");
}

}  // namespace tf::cuda
