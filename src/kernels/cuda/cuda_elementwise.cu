// Elementwise and row-wise ops on the GPU: SwiGLU with the clamp, add, scale,
// sigmoid, softmax (one block per row) and top-k. Top-k with lower-index ties is
// a stable segmented radix sort (CUB) per row; top-k with PyTorch-CPU ties
// downloads the scores and runs the same selection as the CPU reference, since
// which equal values survive depends on libstdc++'s algorithms.
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda {
namespace {

// early: pdl_launch_dependents() first (early_trigger_enabled()).
__global__ void swiglu_kernel(float* __restrict__ out, const float* __restrict__ gu, int64_t rows, int64_t idim,
                              float limit, bool early) {
  if (early) pdl_launch_dependents();
  const int64_t total = rows * idim;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / idim, i = e % idim;
    const float* g = gu + r * 2 * idim;
    const float gc = fminf(g[i], limit);
    const float uc = fminf(fmaxf(g[idim + i], -limit), limit);
    out[e] = gc / (1.0f + expf(-gc)) * uc;
  }
}

// op 0: a + b, 1: x * s, 2: sigmoid(x).
__global__ void pointwise_kernel(float* out, const float* a, const float* b, float s, int64_t n, int op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (op == 0) out[i] = a[i] + b[i];
    else if (op == 1) out[i] = a[i] * s;
    else out[i] = 1.0f / (1.0f + expf(-a[i]));
  }
}

__global__ void softmax_kernel(float* out, const float* x, int64_t d) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * d;
  float* o = out + blockIdx.x * d;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) m = fmaxf(m, xr[i]);
  m = block_reduce(m, MaxOp{}, scratch);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float e = expf(xr[i] - m);
    o[i] = e;
    sum += e;
  }
  sum = block_reduce(sum, SumOp{}, scratch);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] /= sum;
}

__global__ void iota_rows_kernel(int32_t* idx, int32_t* offsets, int64_t rows, int64_t d) {
  const int64_t total = rows * d;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    idx[e] = static_cast<int32_t>(e % d);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r <= rows; r += int64_t(gridDim.x) * blockDim.x)
    offsets[r] = static_cast<int32_t>(r * d);
}

__global__ void take_first_kernel(float* values, int32_t* indices, const float* keys, const int32_t* idx,
                                  int64_t rows, int64_t d, int k) {
  const int64_t total = rows * k;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k, i = e % k;
    values[e] = keys[r * d + i];
    indices[e] = idx[r * d + i];
  }
}

void pointwise(CudaContext& ctx, const char* op, float* out, const float* a, const float* b, float s, int64_t n,
               int code) {
  if (n == 0) return;
  pointwise_kernel<<<grid_1d(n), 256, 0, ctx.stream>>>(out, a, b, s, n, code);
  check_launch(op);
}

void throw_if(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

}  // namespace

void swiglu(CudaContext& ctx, Tensor& out, const Tensor& gate_up, float limit) {
  check_dev(ctx, "swiglu gate_up", gate_up, DType::kF32);
  const int64_t two_i = gate_up.size(-1), idim = two_i / 2, rows = two_i == 0 ? 0 : gate_up.numel() / two_i;
  check_dev(ctx, "swiglu out", out, DType::kF32, rows * idim);
  if (rows * idim == 0) return;
  swiglu_kernel<<<grid_1d(rows * idim), 256, 0, ctx.stream>>>(out.data<float>(), gate_up.data<float>(), rows, idim,
                                                               limit, early_trigger_enabled());
  check_launch("swiglu");
}

void add(CudaContext& ctx, Tensor& out, const Tensor& a, const Tensor& b) {
  check_dev(ctx, "add a", a, DType::kF32);
  check_dev(ctx, "add b", b, DType::kF32, a.numel());
  check_dev(ctx, "add out", out, DType::kF32, a.numel());
  pointwise(ctx, "add", out.data<float>(), a.data<float>(), b.data<float>(), 0.0f, a.numel(), 0);
}

void scale(CudaContext& ctx, Tensor& out, const Tensor& x, float s) {
  check_dev(ctx, "scale x", x, DType::kF32);
  check_dev(ctx, "scale out", out, DType::kF32, x.numel());
  pointwise(ctx, "scale", out.data<float>(), x.data<float>(), nullptr, s, x.numel(), 1);
}

void sigmoid(CudaContext& ctx, Tensor& out, const Tensor& x) {
  check_dev(ctx, "sigmoid x", x, DType::kF32);
  check_dev(ctx, "sigmoid out", out, DType::kF32, x.numel());
  pointwise(ctx, "sigmoid", out.data<float>(), x.data<float>(), nullptr, 0.0f, x.numel(), 2);
}

void softmax(CudaContext& ctx, Tensor& out, const Tensor& x) {
  check_dev(ctx, "softmax x", x, DType::kF32);
  check_dev(ctx, "softmax out", out, DType::kF32, x.numel());
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  if (rows == 0) return;
  softmax_kernel<<<static_cast<unsigned>(rows), 256, 0, ctx.stream>>>(out.data<float>(), x.data<float>(), d);
  check_launch("softmax");
}

void topk_torch_cpu_host(float* values, int32_t* indices, const float* x, int64_t rows, int64_t n, int k) {
  // The same selection as kernels/cpu topk(kTorchCpu): a partial sort when k*64 <= n,
  // else nth_element, over (value, index) pairs comparing values only; then the k
  // winners sorted by value, ties by index.
  std::vector<std::pair<float, int32_t>> q(static_cast<size_t>(n));
  auto greater = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& c) {
    return (std::isnan(a.first) && !std::isnan(c.first)) || a.first > c.first;
  };
  for (int64_t r = 0; r < rows && k > 0; ++r) {
    for (int64_t i = 0; i < n; ++i) q[i] = {x[r * n + i], static_cast<int32_t>(i)};
    if (static_cast<int64_t>(k) * 64 <= n) {
      std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
    } else {
      std::nth_element(q.begin(), q.begin() + k - 1, q.end(), greater);
    }
    std::sort(q.begin(), q.begin() + k, [](const auto& a, const auto& c) {
      return a.first > c.first || (a.first == c.first && a.second < c.second);
    });
    for (int i = 0; i < k; ++i) {
      values[r * k + i] = q[i].first;
      indices[r * k + i] = q[i].second;
    }
  }
}

void topk(CudaContext& ctx, Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties) {
  check_dev(ctx, "topk x", x, DType::kF32);
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  if (k < 0 || k > d) throw StatusError(invalid_argument("topk: k=" + std::to_string(k) + " exceeds the row width"));
  check_dev(ctx, "topk values", values, DType::kF32, rows * k);
  check_dev(ctx, "topk indices", indices, DType::kI32, rows * k);
  if (rows == 0 || k == 0) return;
  if (rows * d > INT32_MAX) throw StatusError(unimplemented("topk: more than 2^31 scores in one call"));
  if (ties == TopkTies::kTorchCpu) {
    std::vector<float> hx(static_cast<size_t>(rows * d)), hv(static_cast<size_t>(rows * k));
    std::vector<int32_t> hi(static_cast<size_t>(rows * k));
    throw_if(cuda_status(cudaMemcpyAsync(hx.data(), x.raw(), x.nbytes(), cudaMemcpyDeviceToHost, ctx.stream),
                         "topk download"));
    throw_if(cuda_status(cudaStreamSynchronize(ctx.stream), "topk download"));
    topk_torch_cpu_host(hv.data(), hi.data(), hx.data(), rows, d, k);
    throw_if(cuda_status(cudaMemcpyAsync(values.raw(), hv.data(), values.nbytes(), cudaMemcpyHostToDevice, ctx.stream),
                         "topk upload"));
    throw_if(cuda_status(cudaMemcpyAsync(indices.raw(), hi.data(), indices.nbytes(), cudaMemcpyHostToDevice,
                                         ctx.stream),
                         "topk upload"));
    // The host vectors die here: wait for the uploads.
    throw_if(cuda_status(cudaStreamSynchronize(ctx.stream), "topk upload"));
    return;
  }
  const int64_t n = rows * d;
  Tensor idx_in = ctx.scratch(n * 4), idx_out = ctx.scratch(n * 4), keys_out = ctx.scratch(n * 4),
         offsets = ctx.scratch((rows + 1) * 4);
  iota_rows_kernel<<<grid_1d(n), 256, 0, ctx.stream>>>(idx_in.data<int32_t>(), offsets.data<int32_t>(), rows, d);
  check_launch("topk");
  size_t temp_bytes = 0;
  const int32_t* off = offsets.data<int32_t>();
  throw_if(cuda_status(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                           nullptr, temp_bytes, x.data<float>(), keys_out.data<float>(), idx_in.data<int32_t>(),
                           idx_out.data<int32_t>(), static_cast<int>(n), static_cast<int>(rows), off, off + 1, 0, 32,
                           ctx.stream),
                       "topk sort"));
  Tensor temp = ctx.scratch(static_cast<int64_t>(temp_bytes));
  // Radix sort is stable: equal values keep index order, i.e. lower index first.
  throw_if(cuda_status(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                           temp.raw(), temp_bytes, x.data<float>(), keys_out.data<float>(), idx_in.data<int32_t>(),
                           idx_out.data<int32_t>(), static_cast<int>(n), static_cast<int>(rows), off, off + 1, 0, 32,
                           ctx.stream),
                       "topk sort"));
  take_first_kernel<<<grid_1d(rows * k), 256, 0, ctx.stream>>>(values.data<float>(), indices.data<int32_t>(),
                                                                keys_out.data<float>(), idx_out.data<int32_t>(), rows,
                                                                d, k);
  check_launch("topk");
}

}  // namespace tf::cuda
