#include "engine/checkpoint_pages.h"

#include <cstdlib>
#include <string>

#include "core/logging.h"
#include "model/safetensors.h"
#if TF_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace tf {

void decide_checkpoint_pages(const std::string& device, int cuda_device) {
  bool release = false;
  const char* env = std::getenv("TF_RELEASE_MODEL_PAGES");
  if (env != nullptr && (std::string(env) == "0" || std::string(env) == "1")) {
    release = std::string(env) == "1";
  } else if (device == "cuda") {
#if TF_HAVE_CUDA
    release = cuda_shares_host_memory(cuda_device);
#else
    (void)cuda_device;
#endif
  }
  set_release_checkpoint_pages(release);
  if (release)
    TF_LOG_INFO("checkpoint pages go back to the OS as the weights load (the GPU shares the host's memory; "
                "TF_RELEASE_MODEL_PAGES=0 keeps them cached)");
}

}  // namespace tf
