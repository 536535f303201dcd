// See device_probe.h. Timings use CUDA events on a private stream; each figure
// is the best of five repetitions (a roofline is the best the chip does, not
// the average under noise).
#include "kernels/cuda/device_probe.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "kernels/cuda/cuda_check.h"

namespace tf::cuda {
namespace {

// Owns what the probe allocates, whatever path it leaves by.
struct ProbeResources {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cublasHandle_t cublas = nullptr;
  void* buffers[5] = {};
  ~ProbeResources() {
    for (void* b : buffers)
      if (b) cudaFree(b);
    if (cublas) cublasDestroy(cublas);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }
};

__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.25f);
  }
}

// Milliseconds of the fastest of `reps` runs of `body` (after two warm-ups).
Expected<float> best_ms(ProbeResources& r, int reps, const std::function<Status()>& body) {
  for (int i = 0; i < 2; ++i) TF_RETURN_IF_ERROR(body());
  float best = 1e30f;
  for (int i = 0; i < reps; ++i) {
    TF_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.start, r.stream));
    TF_RETURN_IF_ERROR(body());
    TF_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.stop, r.stream));
    TF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(r.stop));
    float ms = 0;
    TF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, r.start, r.stop));
    best = std::min(best, ms);
  }
  return best;
}

}  // namespace

Expected<DeviceProbe> probe_device(int device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device || device < 0)
    return not_found("probe: no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)");
  TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  DeviceProbe out;
  cudaDeviceProp prop{};
  TF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  out.name = prop.name;
  out.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);

  ProbeResources r;
  TF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  TF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.start));
  TF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&r.stop));

  // HBM: copy 512 MiB (far beyond the 50-60 MB L2), counted as read + write.
  const size_t copy = size_t{512} << 20;
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.buffers[0], copy));
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.buffers[1], copy));
  TF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(r.buffers[0], 1, copy, r.stream));
  auto copy_ms = best_ms(r, 5, [&]() -> Status {
    for (int i = 0; i < 4; ++i)
      TF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(r.buffers[1 - i % 2], r.buffers[i % 2], copy, cudaMemcpyDeviceToDevice,
                                              r.stream));
    return Status::ok();
  });
  if (!copy_ms) return copy_ms.status().with_context("probe: device-to-device copy");
  out.copy_bytes = 2.0 * static_cast<double>(copy);
  out.hbm_gbps = 4 * out.copy_bytes / (*copy_ms * 1e-3) / 1e9;

  // Tensor cores: C = A x B, n = 8192, BF16 inputs (random, as real weights), f32 accumulate and output.
  const int n = 8192;
  const size_t elems = size_t{n} * n;
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.buffers[2], elems * sizeof(__nv_bfloat16)));
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.buffers[3], elems * sizeof(__nv_bfloat16)));
  TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&r.buffers[4], elems * sizeof(float)));
  fill_bf16<<<1024, 256, 0, r.stream>>>(static_cast<__nv_bfloat16*>(r.buffers[2]), int64_t(elems), 1u);
  fill_bf16<<<1024, 256, 0, r.stream>>>(static_cast<__nv_bfloat16*>(r.buffers[3]), int64_t(elems), 2u);
  TF_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (cublasCreate(&r.cublas) != CUBLAS_STATUS_SUCCESS) return internal_error("probe: cublasCreate failed");
  if (cublasSetStream(r.cublas, r.stream) != CUBLAS_STATUS_SUCCESS)
    return internal_error("probe: cublasSetStream failed");
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm_ms = best_ms(r, 5, [&]() -> Status {
    const cublasStatus_t s =
        cublasGemmEx(r.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, r.buffers[2], CUDA_R_16BF, n, r.buffers[3],
                     CUDA_R_16BF, n, &beta, r.buffers[4], CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      return internal_error("probe: cublasGemmEx (bf16, " + std::to_string(n) + "^3) failed with status " +
                            std::to_string(static_cast<int>(s)));
    return Status::ok();
  });
  if (!gemm_ms) return gemm_ms.status();
  out.gemm_n = n;
  out.bf16_tflops = 2.0 * n * double(n) * n / (*gemm_ms * 1e-3) / 1e12;
  return out;
}

}  // namespace tf::cuda
