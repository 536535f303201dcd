// Test helpers for Fp8ExpertStack (kernels/api/fp8_expert_stack.h): a random stack in
// the release's layout and its dequantized stacks in moe_experts' dense layout, so the
// FP8 op can be compared with the dense op on the same weights.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "kernels/api/fp8_expert_stack.h"
#include "kernels/api/matrix.h"
#include "kernels/api/ops.h"

namespace tf {

// Random e4m3 codes (every finite code, none of the two NaNs 0x7f / 0xff) and random
// positive block scales around `scale` (every block its own).
inline Fp8ExpertStack random_fp8_stack(int64_t e, int64_t i, int64_t h, uint32_t seed, float scale = 0.01f) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> s(0.25f * scale, 1.75f * scale);
  auto codes = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::kF8E4M3);
    auto* p = t.data<uint8_t>();
    for (int64_t n = 0; n < t.numel(); ++n) {
      int b = byte(rng);
      while ((b & 0x7f) == 0x7f) b = byte(rng);
      p[n] = static_cast<uint8_t>(b);
    }
    return t;
  };
  auto scales = [&](int64_t n, int64_t k) {
    Tensor t = Tensor::empty({e, (n + kFp8BlockSize - 1) / kFp8BlockSize, (k + kFp8BlockSize - 1) / kFp8BlockSize},
                             DType::kF32);
    for (int64_t q = 0; q < t.numel(); ++q) t.data<float>()[q] = s(rng);
    return t;
  };
  Fp8ExpertStack st;
  st.gate = codes({e, i, h});
  st.gate_scales = scales(i, h);
  st.up = codes({e, i, h});
  st.up_scales = scales(i, h);
  st.down = codes({e, h, i});
  st.down_scales = scales(h, i);
  return st;
}

// The stack dequantized (e4m3 * scale, f32) as moe_experts takes it: gate_up [E, 2I, H]
// (each expert's gate rows, then its up rows) and down [E, H, I].
inline void dequantized_fp8_stack(const Fp8ExpertStack& st, Tensor* gate_up, Tensor* down) {
  const int64_t e = st.num_experts(), i = st.intermediate(), h = st.hidden();
  *gate_up = Tensor::empty({e, 2 * i, h}, DType::kF32);
  *down = Tensor::empty({e, h, i}, DType::kF32);
  for (int64_t x = 0; x < e; ++x) {
    float* gu = gate_up->data<float>() + x * 2 * i * h;
    dequantize_matrix_rows(st.gate_of(x), 0, i, gu);
    dequantize_matrix_rows(st.up_of(x), 0, i, gu + i * h);
    dequantize_matrix_rows(st.down_of(x), 0, h, down->data<float>() + x * h * i);
  }
}

// The stack's six tensors on `ops`' device.
inline Fp8ExpertStack fp8_stack_on(Ops& ops, const Fp8ExpertStack& st) {
  Fp8ExpertStack d;
  d.gate = ops.to_device(st.gate);
  d.gate_scales = ops.to_device(st.gate_scales);
  d.up = ops.to_device(st.up);
  d.up_scales = ops.to_device(st.up_scales);
  d.down = ops.to_device(st.down);
  d.down_scales = ops.to_device(st.down_scales);
  return d;
}

}  // namespace tf
