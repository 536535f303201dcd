#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_convert.cuh"

namespace tf::cuda {
namespace {

template <typename Src>
__device__ float load_f32(Src v);
template <> __device__ float load_f32(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
template <> __device__ float load_f32(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
template <> __device__ float load_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Src>
__global__ void to_f32_kernel(const Src* __restrict__ src, float* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = load_f32(src[i]);
  }
}

__global__ void from_f32_e4m3_kernel(const float* __restrict__ src, __nv_fp8_storage_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = __nv_cvt_float_to_fp8(src[i], __NV_SATFINITE, __NV_E4M3);
  }
}
__global__ void from_f32_e5m2_kernel(const float* __restrict__ src, __nv_fp8_storage_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = __nv_cvt_float_to_fp8(src[i], __NV_SATFINITE, __NV_E5M2);
  }
}
__global__ void from_f32_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = __float2bfloat16_rn(src[i]);
  }
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535)); }

Status check_pair(const Tensor& a, const Tensor& b, const char* what) {
  if (a.device().kind != DeviceKind::kCuda || a.device() != b.device() || a.numel() != b.numel() ||
      !a.is_contiguous() || !b.is_contiguous()) {
    return invalid_argument(std::string(what) + ": " + a.describe() + " and " + b.describe() +
                            " must be contiguous tensors of one size on one GPU");
  }
  return Status::ok();
}

}  // namespace

Status convert_to_f32(const Tensor& src, Tensor& dst) {
  TF_RETURN_IF_ERROR(check_pair(src, dst, "convert_to_f32"));
  if (dst.dtype() != DType::kF32) return invalid_argument("convert_to_f32: destination must be f32");
  const int64_t n = src.numel();
  if (n == 0) return Status::ok();
  float* out = dst.data<float>();
  switch (src.dtype()) {
    case DType::kF8E4M3: to_f32_kernel<<<grid_for(n), 256>>>(src.data<__nv_fp8_e4m3>(), out, n); break;
    case DType::kF8E5M2: to_f32_kernel<<<grid_for(n), 256>>>(src.data<__nv_fp8_e5m2>(), out, n); break;
    case DType::kBF16: to_f32_kernel<<<grid_for(n), 256>>>(src.data<__nv_bfloat16>(), out, n); break;
    default: return unimplemented(std::string("convert_to_f32 from ") + dtype_name(src.dtype()));
  }
  return cuda_status(cudaGetLastError(), "convert_to_f32 launch");
}

Status convert_from_f32(const Tensor& src, Tensor& dst) {
  TF_RETURN_IF_ERROR(check_pair(src, dst, "convert_from_f32"));
  if (src.dtype() != DType::kF32) return invalid_argument("convert_from_f32: source must be f32");
  const int64_t n = src.numel();
  if (n == 0) return Status::ok();
  const float* in = src.data<float>();
  switch (dst.dtype()) {
    case DType::kF8E4M3: from_f32_e4m3_kernel<<<grid_for(n), 256>>>(in, dst.data<__nv_fp8_storage_t>(), n); break;
    case DType::kF8E5M2: from_f32_e5m2_kernel<<<grid_for(n), 256>>>(in, dst.data<__nv_fp8_storage_t>(), n); break;
    case DType::kBF16: from_f32_bf16_kernel<<<grid_for(n), 256>>>(in, dst.data<__nv_bfloat16>(), n); break;
    default: return unimplemented(std::string("convert_from_f32 to ") + dtype_name(dst.dtype()));
  }
  return cuda_status(cudaGetLastError(), "convert_from_f32 launch");
}

}  // namespace tf::cuda
