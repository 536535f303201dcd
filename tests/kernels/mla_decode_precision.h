// The two precisions of the CUDA split-token MLA kernel for bf16/fp8 pages
// (cuda_mla_decode.h mla_decode_bf16): TF32 hi/lo products (about f32 accuracy, 1e-5 of the
// largest reference magnitude) and one BF16 product with q and the probabilities rounded to
// bf16 once, as the reference's bf16 attention rounds them (each a 2^-9 relative rounding:
// 1e-2, the prefill kernel's bf16 tolerance). f32 pages and widths that are not a multiple
// of 128 keep the TF32 or scalar kernels either way.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_mla_decode.h"

namespace tf {

constexpr double kMlaDecodeTol = 1e-5;
constexpr double kMlaDecodeTolBf16 = 1e-2;

// body(" tf32" | " bf16", tolerance) once per precision; the process's choice is restored.
template <typename Body>
void each_mla_decode_precision(DType pages, int64_t width, Body body) {
  const bool saved = cuda::mla_decode_bf16().load();
  for (bool bf16 : {false, true}) {
    cuda::mla_decode_bf16() = bf16;
    const bool rounds = bf16 && pages != DType::kF32 && width % 128 == 0;
    body(bf16 ? " bf16" : " tf32", rounds ? kMlaDecodeTolBf16 : kMlaDecodeTol);
  }
  cuda::mla_decode_bf16() = saved;
}

}  // namespace tf
