// DEVICE=auto, serve's default: the GPU when this build has the CUDA backend and the GPU
// can run its kernels, else the CPU. Users start the server on a GPU machine without naming
// the device, and a machine without one (CI, a laptop) still starts; the log says which was
// chosen and why.
#pragma once

#include <string>

namespace tf::engine {

struct DeviceChoice {
  std::string device;  // cpu | cuda
  std::string reason;  // why auto chose it; empty when the device was named
  bool gpu_unusable = false;  // a CUDA build that found no GPU it can run on (worth a warning)
};

// `requested`: auto, cpu or cuda (cpu and cuda come back as they are); `cuda_device`: the
// GPU this rank would use.
DeviceChoice choose_device(const std::string& requested, int cuda_device);

}  // namespace tf::engine
