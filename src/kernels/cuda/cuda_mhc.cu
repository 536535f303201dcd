// Manifold-constrained hyper-connections on the GPU. M (= hc_mult) is small, so
// the coefficients of a row (sigmoids, softmax, Sinkhorn) are computed by one
// thread in the CPU reference's order; collapse and expand use one thread per
// output element with the reference's summation order.
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kMaxM = 8;

__global__ void mhc_coeff_kernel(float* __restrict__ pre, float* __restrict__ post, float* __restrict__ comb,
                                 const float* __restrict__ mix, const float* __restrict__ b,
                                 const float* __restrict__ s, int64_t rows, int m, float hc_eps, int iters) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const int width = (2 + m) * m;
  const float* l = mix + r * width;
  for (int i = 0; i < m; ++i) {
    pre[r * m + i] = sigmoidf_(l[i] * s[0] + b[i]) + hc_eps;
    post[r * m + i] = 2.0f * sigmoidf_(l[m + i] * s[1] + b[m + i]);
  }
  float c[kMaxM * kMaxM];
  for (int i = 0; i < m; ++i) {
    float mx = -INFINITY;
    for (int j = 0; j < m; ++j) {
      c[i * m + j] = l[2 * m + i * m + j] * s[2] + b[2 * m + i * m + j];
      mx = fmaxf(mx, c[i * m + j]);
    }
    float sum = 0;
    for (int j = 0; j < m; ++j) sum += (c[i * m + j] = expf(c[i * m + j] - mx));
    for (int j = 0; j < m; ++j) c[i * m + j] = c[i * m + j] / sum + hc_eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {  // rows, then columns (the first pass is columns only)
      for (int i = 0; i < m; ++i) {
        float sum = 0;
        for (int j = 0; j < m; ++j) sum += c[i * m + j];
        for (int j = 0; j < m; ++j) c[i * m + j] /= (sum + hc_eps);
      }
    }
    for (int j = 0; j < m; ++j) {
      float sum = 0;
      for (int i = 0; i < m; ++i) sum += c[i * m + j];
      for (int i = 0; i < m; ++i) c[i * m + j] /= (sum + hc_eps);
    }
  }
  for (int i = 0; i < m * m; ++i) comb[r * m * m + i] = c[i];
}

__global__ void mhc_collapse_kernel(float* __restrict__ out, const float* __restrict__ streams,
                                    const float* __restrict__ pre, int64_t rows, int64_t m, int64_t d) {
  const int64_t total = rows * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / d, i = e % d;
    const float* p = pre + r * m;
    const float* x = streams + r * m * d;
    float acc = 0;
    for (int64_t j = 0; j < m; ++j) acc += p[j] * x[j * d + i];
    out[e] = acc;
  }
}

__global__ void mhc_expand_kernel(float* __restrict__ out, const float* __restrict__ y, const float* __restrict__ post,
                                  const float* __restrict__ comb, const float* __restrict__ residual, int64_t rows,
                                  int64_t m, int64_t d) {
  const int64_t total = rows * m * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / (m * d), i = (e / d) % m, k = e % d;
    const float* c = comb + r * m * m;
    const float* res = residual + r * m * d;
    float acc = 0;
    for (int64_t j = 0; j < m; ++j) acc += c[j * m + i] * res[j * d + k];
    out[e] = post[r * m + i] * y[r * d + k] + acc;
  }
}

}  // namespace

void mhc_coefficients(CudaContext& ctx, Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix,
                      const Tensor& base, const Tensor& scale, float hc_eps, int sinkhorn_iters) {
  check_dev(ctx, "mhc mix", mix, DType::kF32);
  const int64_t width = mix.size(-1), rows = width == 0 ? 0 : mix.numel() / width;
  int64_t m = 1;
  while ((2 + m) * m < width) ++m;
  if ((2 + m) * m != width) throw StatusError(invalid_argument("mhc_coefficients: mix width is not (2+M)*M"));
  if (m > kMaxM)
    throw StatusError(unimplemented("mhc_coefficients: hc_mult " + std::to_string(m) + " above " +
                                    std::to_string(kMaxM)));
  check_dev(ctx, "mhc base", base, DType::kF32, width);
  check_dev(ctx, "mhc scale", scale, DType::kF32, 3);
  check_dev(ctx, "mhc pre", pre, DType::kF32, rows * m);
  check_dev(ctx, "mhc post", post, DType::kF32, rows * m);
  check_dev(ctx, "mhc comb", comb, DType::kF32, rows * m * m);
  if (rows == 0) return;
  mhc_coeff_kernel<<<grid_1d(rows, 128), 128, 0, ctx.stream>>>(pre.data<float>(), post.data<float>(),
                                                               comb.data<float>(), mix.data<float>(),
                                                               base.data<float>(), scale.data<float>(), rows,
                                                               static_cast<int>(m), hc_eps, sinkhorn_iters);
  check_launch("mhc_coefficients");
}

void mhc_collapse(CudaContext& ctx, Tensor& out, const Tensor& streams, const Tensor& pre) {
  check_dev(ctx, "mhc_collapse streams", streams, DType::kF32);
  check_dev(ctx, "mhc_collapse pre", pre, DType::kF32);
  const int64_t d = out.size(-1), rows = d == 0 ? 0 : out.numel() / d;
  if (rows == 0) return;
  const int64_t m = pre.numel() / rows;
  check_dev(ctx, "mhc_collapse out", out, DType::kF32, rows * d);
  if (streams.numel() != rows * m * d || pre.numel() != rows * m)
    throw StatusError(invalid_argument("mhc_collapse: stream shape mismatch: " + streams.describe() + ", pre " +
                                       pre.describe() + ", out " + out.describe()));
  mhc_collapse_kernel<<<grid_1d(rows * d), 256, 0, ctx.stream>>>(out.data<float>(), streams.data<float>(),
                                                                  pre.data<float>(), rows, m, d);
  check_launch("mhc_collapse");
}

void mhc_expand(CudaContext& ctx, Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                const Tensor& residual) {
  check_dev(ctx, "mhc_expand y", y, DType::kF32);
  const int64_t d = y.size(-1), rows = d == 0 ? 0 : y.numel() / d;
  if (rows == 0) return;
  const int64_t m = post.numel() / rows;
  check_dev(ctx, "mhc_expand post", post, DType::kF32, rows * m);
  check_dev(ctx, "mhc_expand comb", comb, DType::kF32, rows * m * m);
  check_dev(ctx, "mhc_expand residual", residual, DType::kF32, rows * m * d);
  check_dev(ctx, "mhc_expand out", out, DType::kF32, rows * m * d);
  if (out.raw() == residual.raw()) throw StatusError(invalid_argument("mhc_expand: out must not alias residual"));
  mhc_expand_kernel<<<grid_1d(rows * m * d), 256, 0, ctx.stream>>>(out.data<float>(), y.data<float>(),
                                                                    post.data<float>(), comb.data<float>(),
                                                                    residual.data<float>(), rows, m, d);
  check_launch("mhc_expand");
}

}  // namespace tf::cuda
