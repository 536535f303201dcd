// Fp8ExpertStack: a MoE layer's routed experts in the official FP8 release's format,
// stacked per expert so that one op can run all of them (Ops::moe_experts_fp8).
//
// Each projection (gate, up, down) is the release's own bytes, expert after expert:
//   codes  f8_e4m3 [E, N, K]
//   scales f32     [E, ceil(N/128), ceil(K/128)]
//   w[e, n, k] = e4m3(codes[e, n, k]) * scales[e, n / 128, k / 128]
// i.e. expert e's slice is a Matrix::fp8_block (matrix.h), partial edge blocks included.
// gate and up stay two stacks (not one packed [2I, H] matrix) so that their block grids
// are the checkpoint's whatever I is. Stored FP8, the experts take half the memory and
// half the decode bytes of a BF16 stack (the release: 305 GB instead of 610 GB).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/matrix.h"

namespace tf {

struct Fp8ExpertStack {
  Tensor gate, gate_scales;  // [E, I, H], [E, ceil(I/128), ceil(H/128)]
  Tensor up, up_scales;      // as gate
  Tensor down, down_scales;  // [E, H, I], [E, ceil(H/128), ceil(I/128)]

  int64_t num_experts() const { return gate.dim() == 3 ? gate.size(0) : 0; }
  int64_t intermediate() const { return gate.dim() == 3 ? gate.size(1) : 0; }
  int64_t hidden() const { return gate.dim() == 3 ? gate.size(2) : 0; }
  // Expert e's projections as matrices (views of the stacks).
  Matrix gate_of(int64_t e) const { return Matrix::fp8_block(gate.select(0, e), gate_scales.select(0, e)); }
  Matrix up_of(int64_t e) const { return Matrix::fp8_block(up.select(0, e), up_scales.select(0, e)); }
  Matrix down_of(int64_t e) const { return Matrix::fp8_block(down.select(0, e), down_scales.select(0, e)); }
};

// The stacks' dtypes, shapes (gate and up [E, I, H], down [E, H, I], each scale grid
// ceil-divided by 128), packing and device agree. Errors name `what`.
Status check_fp8_expert_stack(const Fp8ExpertStack& s, const std::string& what);

}  // namespace tf
