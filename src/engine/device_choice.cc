// choose_device (see device_choice.h).
#include "engine/device_choice.h"

#if TF_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace tf::engine {

DeviceChoice choose_device(const std::string& requested, int cuda_device) {
  if (requested != "auto") return {requested, ""};
  const std::string gpu = "GPU " + std::to_string(cuda_device);
#if TF_HAVE_CUDA
  const Status usable = cuda_device_usable(cuda_device);
  if (usable.is_ok()) return {"cuda", gpu + " runs this build's CUDA kernels"};
  return {"cpu", gpu + " is not usable: " + usable.message(), true};
#else
  return {"cpu", "this tensorfold was built without CUDA, so " + gpu + " is not used"};
#endif
}

}  // namespace tf::engine
