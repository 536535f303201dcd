// Runtime (bits, codebook) -> compile-time kernel instantiation for the EXL3 kernels:
// exl3_dispatch<Kernels>(bits, cb, fn) calls fn(Kernels<K, CB>{}) for K = bits.
// (Host code of .cu files only; every K in 1..8 and codebook gets instantiated.)
#pragma once

#include <string>

#include "core/status.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/cuda/exl3_decode.cuh"

namespace tf::cuda {

template <template <int, int> class Kernels, int K, typename Fn>
void exl3_dispatch_cb(Exl3Codebook cb, Fn&& fn) {
  switch (cb) {
    case Exl3Codebook::k3Inst: fn(Kernels<K, exl3::kCb3Inst>{}); return;
    case Exl3Codebook::kMcg: fn(Kernels<K, exl3::kCbMcg>{}); return;
    case Exl3Codebook::kMul1: fn(Kernels<K, exl3::kCbMul1>{}); return;
  }
  throw StatusError(invalid_argument("EXL3: unknown codebook"));
}

template <template <int, int> class Kernels, typename Fn>
void exl3_dispatch(int bits, Exl3Codebook cb, Fn&& fn) {
  switch (bits) {
    case 1: exl3_dispatch_cb<Kernels, 1>(cb, fn); return;
    case 2: exl3_dispatch_cb<Kernels, 2>(cb, fn); return;
    case 3: exl3_dispatch_cb<Kernels, 3>(cb, fn); return;
    case 4: exl3_dispatch_cb<Kernels, 4>(cb, fn); return;
    case 5: exl3_dispatch_cb<Kernels, 5>(cb, fn); return;
    case 6: exl3_dispatch_cb<Kernels, 6>(cb, fn); return;
    case 7: exl3_dispatch_cb<Kernels, 7>(cb, fn); return;
    case 8: exl3_dispatch_cb<Kernels, 8>(cb, fn); return;
  }
  throw StatusError(out_of_range("EXL3: " + std::to_string(bits) + " bits per weight (1 to 8)"));
}

}  // namespace tf::cuda
