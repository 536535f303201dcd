// What programmatic dependent launch (PDL) saves per kernel boundary inside a CUDA graph:
// a chain of N small dependent kernels (each reads the previous one's output), captured
// and replayed, launched plainly vs with cudaLaunchAttributeProgrammaticStreamSerialization
// (each kernel waits with griddepcontrol.wait before reading; optionally the previous one
// triggers its dependents early). Prints microseconds per kernel for a few grid sizes.
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_graph_timing.h"

namespace {

// out[i] = in[i] * 0.5 + 1 over n elements, grid-stride; `trigger`: launch_dependents first.
template <bool kWait, bool kTrigger>
__global__ void step_kernel(float* __restrict__ out, const float* __restrict__ in, int n) {
  if constexpr (kTrigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if constexpr (kWait) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * 0.5f + 1.0f;
}

template <bool kWait, bool kTrigger>
void launch(cudaStream_t s, float* out, const float* in, int n, int blocks, bool pdl) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  BENCH_CUDA(cudaLaunchKernelEx(&cfg, step_kernel<kWait, kTrigger>, out, in, n));
}

}  // namespace

int main() {
  constexpr int kChain = 200;
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int n : {256, 4096, 65536, 1 << 20}) {
    float *a, *b;
    BENCH_CUDA(cudaMalloc(&a, n * 4));
    BENCH_CUDA(cudaMalloc(&b, n * 4));
    BENCH_CUDA(cudaMemset(a, 0, n * 4));
    const int blocks = std::min(1056, (n + 255) / 256);
    auto run = [&](int mode) {
      cudaGraph_t g;
      BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < kChain; ++i) {
        float* out = (i % 2) ? a : b;
        const float* in = (i % 2) ? b : a;
        if (mode == 0) launch<false, false>(s, out, in, n, blocks, false);
        if (mode == 1) launch<true, false>(s, out, in, n, blocks, true);
        if (mode == 2) launch<true, true>(s, out, in, n, blocks, true);
      }
      BENCH_CUDA(cudaStreamEndCapture(s, &g));
      return tf::bench::replay_seconds_per_call(s, g, kChain) * 1e6;
    };
    const double plain = run(0), pdl = run(1), early = run(2);
    std::printf("[pdl] n=%-8d blocks=%-5d plain %6.2f us/kernel  pdl(wait) %6.2f  pdl(trigger+wait) %6.2f\n", n, blocks,
                plain, pdl, early);
    BENCH_CUDA(cudaFree(a));
    BENCH_CUDA(cudaFree(b));
  }
  return 0;
}
