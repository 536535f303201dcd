// Row norms on the GPU: RMSNorm (weighted or not), LayerNorm and KDA's gated
// RMSNorm. One block per row; the statistics are accumulated in double (as the
// CPU reference does) with a fixed block reduction, so the result of a row does
// not depend on the other rows. Rows of a multiple of 4 floats at 16-byte
// alignment (all the model's) take the float4 kernel with up to 1024 threads:
// at decode a step has 1-64 rows, so one block per row must read its row with
// many independent loads to keep the latency near the ~3 us of a launch. Rows of
// up to 16384 floats (every norm of the model) take rms_kernel_regs: each thread
// loads its <= 4 float4 of x, weight and gate before the reduction, so the
// weight's and gate's memory latency overlaps x's instead of following the
// reduction; same threads, same partition, same sums: the same bits.
#include <algorithm>
#include <cstdint>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/legacy_small_ops.h"
#include "kernels/cuda/pdl.cuh"

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

// The same math as rms_kernel over float4 chunks (d4 = d / 4).
__global__ void rms_kernel_vec4(float4* __restrict__ out, const float4* __restrict__ x, const float4* __restrict__ w,
                                const float4* __restrict__ gate, int64_t d4, float eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float4* xr = x + r * d4;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < d4; i += blockDim.x) {
    const float4 v = xr[i];
    ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
          static_cast<double>(v.w) * v.w;
  }
  ss = block_reduce(ss, SumOp{}, scratch);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / (4 * d4)) + eps);
  float4* o = out + r * d4;
  for (int64_t i = threadIdx.x; i < d4; i += blockDim.x) {
    const float4 v = xr[i];
    float4 y = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    if (w) {
      const float4 g = w[i];
      y = make_float4(g.x * y.x, g.y * y.y, g.z * y.z, g.w * y.w);
    }
    if (gate) {
      const float4 g = gate[r * d4 + i];
      y.x *= 1.0f / (1.0f + expf(-g.x));
      y.y *= 1.0f / (1.0f + expf(-g.y));
      y.z *= 1.0f / (1.0f + expf(-g.z));
      y.w *= 1.0f / (1.0f + expf(-g.w));
    }
    o[i] = y;
  }
}

// rms_kernel_vec4 with V float4 chunks per thread held in registers (d4 <= V * blockDim.x).
// early: pdl_launch_dependents() first (early_trigger_enabled()).
template <int V>
__global__ void __launch_bounds__(1024) rms_kernel_regs(float4* __restrict__ out, const float4* __restrict__ x, const float4* __restrict__ w,
                                const float4* __restrict__ gate, int64_t d4, float eps, bool early) {
  if (early) pdl_launch_dependents();
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float4* xr = x + r * d4;
  constexpr bool kPreGate = V <= 2;
  float4 xv[V], wv[V], gv[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * blockDim.x;
    const bool in = i < d4;
    xv[j] = in ? xr[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    wv[j] = in && w ? w[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    // (V = 4 loads the gate after the reduction: 64 registers at 1024 threads.)
    gv[j] = kPreGate && in && gate ? gate[r * d4 + i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  double ss = 0;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    if (threadIdx.x + int64_t{j} * blockDim.x < d4) {
      const float4 v = xv[j];
      ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
            static_cast<double>(v.w) * v.w;
    }
  }
  ss = block_reduce(ss, SumOp{}, scratch);
  const float inv = 1.0f / sqrtf(static_cast<float>(ss / (4 * d4)) + eps);
  float4* o = out + r * d4;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * blockDim.x;
    if (i >= d4) continue;
    const float4 v = xv[j];
    float4 y = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);
    if (w) {
      const float4 g = wv[j];
      y = make_float4(g.x * y.x, g.y * y.y, g.z * y.z, g.w * y.w);
    }
    if (gate) {
      const float4 g = kPreGate ? gv[j] : gate[r * d4 + i];
      y.x *= 1.0f / (1.0f + expf(-g.x));
      y.y *= 1.0f / (1.0f + expf(-g.y));
      y.z *= 1.0f / (1.0f + expf(-g.z));
      y.w *= 1.0f / (1.0f + expf(-g.w));
    }
    o[i] = y;
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void launch_rms(CudaContext& ctx, float* out, const float* x, const float* w, const float* gate, int64_t rows,
                int64_t d, float eps) {
  if (d % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(w) && aligned16(gate)) {
    const int64_t d4 = d / 4;
    const int threads = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(32, (d4 + 31) / 32 * 32)));
    const auto o4 = reinterpret_cast<float4*>(out);
    const auto x4 = reinterpret_cast<const float4*>(x);
    const auto w4 = reinterpret_cast<const float4*>(w);
    const auto g4 = reinterpret_cast<const float4*>(gate);
    const auto blocks = static_cast<unsigned>(rows);
    if (!legacy_small_ops() && d4 <= 4 * threads) {
      const bool early = early_trigger_enabled();
      if (d4 <= threads) {
        rms_kernel_regs<1><<<blocks, threads, 0, ctx.stream>>>(o4, x4, w4, g4, d4, eps, early);
      } else if (d4 <= 2 * threads) {
        rms_kernel_regs<2><<<blocks, threads, 0, ctx.stream>>>(o4, x4, w4, g4, d4, eps, early);
      } else {
        rms_kernel_regs<4><<<blocks, threads, 0, ctx.stream>>>(o4, x4, w4, g4, d4, eps, early);
      }
      return;
    }
    rms_kernel_vec4<<<static_cast<unsigned>(rows), threads, 0, ctx.stream>>>(
        reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w),
        reinterpret_cast<const float4*>(gate), d4, eps);
    return;
  }
  rms_kernel<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(out, x, w, gate, d, eps);
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
  launch_rms(ctx, out.data<float>(), x.data<float>(), has_w ? weight.data<float>() : nullptr, nullptr, rows, d, eps);
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
  launch_rms(ctx, out.data<float>(), x.data<float>(), weight.data<float>(), gate.data<float>(), rows, d, eps);
  check_launch("gated_rms_norm");
}

}  // namespace tf::cuda
