// Fp8ExpertStack's structural check (layout in fp8_expert_stack.h).
#include "kernels/api/fp8_expert_stack.h"

namespace tf {
namespace {

int64_t blocks(int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; }

Status check_one(const Tensor& codes, const Tensor& scales, const Shape& want, const std::string& what,
                 const char* name, const Device& dev) {
  const std::string w = what + " " + name;
  if (codes.dtype() != DType::kF8E4M3 || codes.shape() != want || !codes.is_contiguous())
    return invalid_argument(w + ": codes must be packed f8_e4m3" + shape_to_string(want) + ", got " +
                            codes.describe());
  const Shape grid = {want[0], blocks(want[1]), blocks(want[2])};
  if (scales.dtype() != DType::kF32 || scales.shape() != grid || !scales.is_contiguous())
    return invalid_argument(w + ": scales must be packed f32" + shape_to_string(grid) + ", got " +
                            scales.describe());
  if (codes.device() != dev || scales.device() != dev)
    return invalid_argument(w + ": codes " + codes.describe() + " and scales " + scales.describe() +
                            " must be on " + dev.to_string());
  return Status::ok();
}

}  // namespace

Status check_fp8_expert_stack(const Fp8ExpertStack& s, const std::string& what) {
  if (s.gate.dim() != 3 || s.gate.size(0) == 0 || s.gate.size(1) == 0 || s.gate.size(2) == 0)
    return invalid_argument(what + ": gate must be a non-empty [E, I, H] stack, got " + s.gate.describe());
  const int64_t e = s.num_experts(), i = s.intermediate(), h = s.hidden();
  const Device dev = s.gate.device();
  TF_RETURN_IF_ERROR(check_one(s.gate, s.gate_scales, {e, i, h}, what, "gate", dev));
  TF_RETURN_IF_ERROR(check_one(s.up, s.up_scales, {e, i, h}, what, "up", dev));
  return check_one(s.down, s.down_scales, {e, h, i}, what, "down", dev);
}

}  // namespace tf
