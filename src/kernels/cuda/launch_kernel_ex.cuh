// One cudaLaunchKernelEx call with the two launch attributes our kernels use: a
// thread-block cluster (`cluster` non-null: its dimensions) and programmatic dependent
// launch (`pdl`: the kernel may start while the one before it finishes; it must call
// griddepcontrol.wait before reading that kernel's output). Returns the launch's error.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace tf::cuda {

template <typename... P, typename... A>
cudaError_t launch_kernel_ex(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             const dim3* cluster, bool pdl, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute at[2];
  unsigned n = 0;
  if (cluster != nullptr) {
    at[n].id = cudaLaunchAttributeClusterDimension;
    at[n].val.clusterDim.x = cluster->x;
    at[n].val.clusterDim.y = cluster->y;
    at[n].val.clusterDim.z = cluster->z;
    ++n;
  }
  if (pdl) {
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = at;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

}  // namespace tf::cuda
