// Manifold-constrained hyper-connections on the GPU. M (= hc_mult) is small.
// The coefficients of a row (sigmoids, softmax, Sinkhorn) are computed by a
// group of lanes, one per entry of the M x M matrix (M*M <= 32), which gather
// a row's or column's entries by shuffles and sum them in the CPU reference's
// order, so the results are the reference's bit for bit; a single thread per
// row did the same serially with the matrix in local memory and took ~56 us per
// call at decode (90 calls per token). Larger M falls back to one thread per row.
// M = 4 (GLM-5.3) has its own instantiation of the group kernel: with M known the
// M gathers of a row or column sum are issued together, then added in order (a
// loop over a run-time M waited for each shuffle before the next).
// Collapse and expand use one thread per output element with the reference's
// summation order.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mhc_coeff.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/legacy_small_ops.h"

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

// Lanes [g*G, g*G + G) of the block handle row blockIdx.x * (blockDim.x / G) + g;
// lane l < M*M of a group owns entry (i, j) = (l / M, l % M). G is a power of two.
__global__ void mhc_coeff_group_kernel(float* __restrict__ pre, float* __restrict__ post, float* __restrict__ comb,
                                       const float* __restrict__ mix, const float* __restrict__ b,
                                       const float* __restrict__ s, int64_t rows, int m, int group, float hc_eps,
                                       int iters) {
  const int lane = threadIdx.x % group;
  const int64_t r = blockIdx.x * int64_t(blockDim.x / group) + threadIdx.x / group;
  const bool row_ok = r < rows;  // every lane stays for the shuffles
  const int width = (2 + m) * m, mm = m * m;
  const bool own = row_ok && lane < mm;
  const int i = lane / m, j = lane % m;
  const float* l = mix + (row_ok ? r : 0) * width;
  if (row_ok && lane < m) {
    pre[r * m + lane] = sigmoidf_(l[lane] * s[0] + b[lane]) + hc_eps;
    post[r * m + lane] = 2.0f * sigmoidf_(l[m + lane] * s[1] + b[m + lane]);
  }
  // Entry (i, j) of the group's matrix, gathered from its owner lane.
  auto at = [&](float v, int ii, int jj) { return __shfl_sync(0xffffffffu, v, ii * m + jj, group); };
  float c = own ? l[2 * m + lane] * s[2] + b[2 * m + lane] : 0.0f;
  {
    float mx = -INFINITY;
    for (int jj = 0; jj < m; ++jj) mx = fmaxf(mx, at(c, i, jj));
    const float e = own ? expf(c - mx) : 0.0f;
    float sum = 0;
    for (int jj = 0; jj < m; ++jj) sum += at(e, i, jj);
    c = e / sum + hc_eps;
  }
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {  // rows, then columns (the first pass is columns only)
      float sum = 0;
      for (int jj = 0; jj < m; ++jj) sum += at(c, i, jj);
      c /= (sum + hc_eps);
    }
    float sum = 0;
    for (int ii = 0; ii < m; ++ii) sum += at(c, ii, j);
    c /= (sum + hc_eps);
  }
  if (own) comb[r * mm + lane] = c;
}

// mhc_coeff_group_kernel for a compile-time M (group = the power of two >= M*M),
// the same operations in the same order (cuda_mhc_coeff.cuh).
template <int M>
__global__ void mhc_coeff_group_kernel_m(float* __restrict__ pre, float* __restrict__ post, float* __restrict__ comb,
                                         const float* __restrict__ mix, const float* __restrict__ b,
                                         const float* __restrict__ s, int64_t rows, float hc_eps, int iters) {
  constexpr int kMm = M * M, kWidth = (2 + M) * M, kGroup = mhc_coeff_group<M>();
  const int lane = threadIdx.x % kGroup;
  const int64_t r = blockIdx.x * int64_t(blockDim.x / kGroup) + threadIdx.x / kGroup;
  const bool row_ok = r < rows;
  const int64_t rr = row_ok ? r : 0;
  mhc_coeff_row<M>(lane, row_ok, mix + rr * kWidth, b, s, hc_eps, iters, pre + rr * M, post + rr * M,
                   comb + rr * kMm);
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

// expand over float4 chunks of d (d % 4 == 0, 16-byte aligned) with 32-bit
// indices: each element the same sum in the same order as the kernel above; a
// thread owns 4 adjacent elements, so the index arithmetic (64-bit divisions
// there) is paid once per 4. (A float4 collapse measured slower at 1-8 rows: 4x
// fewer threads for a kernel that is one latency deep.)
__global__ void mhc_expand_vec4_kernel(float4* __restrict__ out, const float4* __restrict__ y,
                                       const float* __restrict__ post, const float* __restrict__ comb,
                                       const float4* __restrict__ residual, int rows, int m, int d4) {
  const int total = rows * m * d4;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int r = e / (m * d4), rest = e - r * m * d4, i = rest / d4, k = rest - i * d4;
    const float* c = comb + r * m * m;
    const float4* res = residual + static_cast<int64_t>(r) * m * d4 + k;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < m; ++j) {
      const float cj = c[j * m + i];
      const float4 v = res[static_cast<int64_t>(j) * d4];
      acc.x += cj * v.x;
      acc.y += cj * v.y;
      acc.z += cj * v.z;
      acc.w += cj * v.w;
    }
    const float pi = post[r * m + i];
    const float4 yv = y[static_cast<int64_t>(r) * d4 + k];
    out[e] = make_float4(pi * yv.x + acc.x, pi * yv.y + acc.y, pi * yv.z + acc.z, pi * yv.w + acc.w);
  }
}

bool vec4_ok(int64_t d, int64_t elements, std::initializer_list<const void*> ptrs) {
  if (d % 4 != 0 || elements >= (int64_t{1} << 31) || legacy_small_ops()) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
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
  if (m == 4 && !legacy_small_ops()) {
    constexpr int kThreads = 128, kPerBlock = kThreads / 16;
    const auto blocks = static_cast<unsigned>((rows + kPerBlock - 1) / kPerBlock);
    mhc_coeff_group_kernel_m<4><<<blocks, kThreads, 0, ctx.stream>>>(
        pre.data<float>(), post.data<float>(), comb.data<float>(), mix.data<float>(), base.data<float>(),
        scale.data<float>(), rows, hc_eps, sinkhorn_iters);
    check_launch("mhc_coefficients");
    return;
  }
  if (m * m <= 32) {
    int group = 1;
    while (group < m * m) group *= 2;
    const int threads = 128, per_block = threads / group;
    const auto blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
    mhc_coeff_group_kernel<<<blocks, threads, 0, ctx.stream>>>(pre.data<float>(), post.data<float>(),
                                                               comb.data<float>(), mix.data<float>(),
                                                               base.data<float>(), scale.data<float>(), rows,
                                                               static_cast<int>(m), group, hc_eps, sinkhorn_iters);
    check_launch("mhc_coefficients");
    return;
  }
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
  if (vec4_ok(d, rows * m * d, {out.raw(), y.raw(), residual.raw()})) {
    const int d4 = static_cast<int>(d / 4);
    mhc_expand_vec4_kernel<<<grid_1d(rows * m * d4, 128), 128, 0, ctx.stream>>>(
        reinterpret_cast<float4*>(out.data<float>()), reinterpret_cast<const float4*>(y.data<float>()),
        post.data<float>(), comb.data<float>(), reinterpret_cast<const float4*>(residual.data<float>()),
        static_cast<int>(rows), static_cast<int>(m), d4);
    check_launch("mhc_expand");
    return;
  }
  mhc_expand_kernel<<<grid_1d(rows * m * d), 256, 0, ctx.stream>>>(out.data<float>(), y.data<float>(),
                                                                    post.data<float>(), comb.data<float>(),
                                                                    residual.data<float>(), rows, m, d);
  check_launch("mhc_expand");
}

}  // namespace tf::cuda
