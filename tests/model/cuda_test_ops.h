// The GPU backend of the model's CUDA tests, made once per test binary; a machine without
// a GPU fails here (never skipped).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "kernels/cuda/cuda_ops.h"

namespace tf::test {

inline Ops* gpu_ops() {
  static std::unique_ptr<Ops> ops = [] {
    auto o = make_cuda_ops(0);
    if (!o) {
      ADD_FAILURE() << o.status().to_string();
      return std::unique_ptr<Ops>();
    }
    return std::move(*o);
  }();
  return ops.get();
}

}  // namespace tf::test
