// Whether the checkpoint's file pages go back to the OS as the weights load
// (model/safetensors.h: set_release_checkpoint_pages).
#pragma once

#include <string>

namespace tf {

// On for a GPU that shares the host's memory (a DGX Spark: its cache pool and weights come
// out of the same RAM as the page cache), else off. TF_RELEASE_MODEL_PAGES=1 / 0 decides
// instead. Call before the weights are read; logs the choice when it is on.
void decide_checkpoint_pages(const std::string& device, int cuda_device);

}  // namespace tf
