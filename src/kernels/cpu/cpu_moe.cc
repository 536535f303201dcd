// moe_experts on the CPU: the routed experts of a MoE for all tokens of a call.
//
// The (token, slot) pairs are grouped per expert on the host (a stable counting
// sort: ascending expert, then token order); each active expert then runs its
// gate_up product, SwiGLU and down product over its own tokens, reading its
// weights once, and the k expert outputs of a token are summed in slot order.
// Every product element is cpu::dot over one weight row, the same arithmetic as
// cpu::matmul, so the result is bit for bit what gather_rows + matmul + swiglu +
// matmul + scatter_add_rows per expert (in ascending expert order) gives.
// bf16 weights are widened to f32 one row at a time.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tf::cpu {
namespace {

constexpr int64_t kColBlock = 64;

void check_expert_weight(const char* what, const Tensor& t) {
  if ((t.dtype() != DType::kF32 && t.dtype() != DType::kBF16) || !t.is_contiguous() || t.dim() != 3 ||
      !t.device().is_cpu())
    throw StatusError(invalid_argument(std::string("moe_experts ") + what +
                                       ": expected packed f32 or bf16 [E, rows, cols] on the host, got " +
                                       t.describe()));
}

// out[r, c] = dot(x row rows[r], w row c) for r < n, c < n_out; w is [n_out, k] of
// `dtype` at `w`; x rows are k wide, `ldx` apart; out rows n_out wide.
void expert_matmul(float* out, const float* x, int64_t ldx, const int32_t* rows, int64_t n, const void* w,
                   DType dtype, int64_t n_out, int64_t k) {
  const int64_t col_blocks = (n_out + kColBlock - 1) / kColBlock;
  parallel_rows(col_blocks, std::min(n_out, kColBlock) * k * n, [&](int64_t b, int64_t e) {
    std::vector<float> wide(dtype == DType::kBF16 ? static_cast<size_t>(k) : 0);
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t c1 = std::min(n_out, (blk + 1) * kColBlock);
      for (int64_t c = blk * kColBlock; c < c1; ++c) {
        const float* wr;
        if (dtype == DType::kBF16) {
          convert_to_f32(static_cast<const uint16_t*>(w) + c * k, DType::kBF16, wide.data(), static_cast<size_t>(k));
          wr = wide.data();
        } else {
          wr = static_cast<const float*>(w) + c * k;
        }
        for (int64_t r = 0; r < n; ++r) {
          const int64_t src = rows ? rows[r] : r;
          out[r * n_out + c] = dot(x + src * ldx, wr, k);
        }
      }
    }
  });
}

}  // namespace

void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& gate_up,
                 const Tensor& down, float swiglu_limit) {
  check_f32("moe_experts x", x);
  check_expert_weight("gate_up", gate_up);
  check_expert_weight("down", down);
  const int64_t e_count = gate_up.size(0), two_i = gate_up.size(1), h = gate_up.size(2), idim = two_i / 2;
  if (two_i % 2 != 0 || two_i == 0 || h == 0 || down.size(0) != e_count || down.size(1) != h || down.size(2) != idim)
    throw StatusError(invalid_argument("moe_experts: gate_up " + gate_up.describe() + " and down " +
                                       down.describe() + " are not [E, 2I, H] and [E, H, I]"));
  if (x.numel() % h != 0)
    throw StatusError(invalid_argument("moe_experts: x " + x.describe() + " rows are not H=" + std::to_string(h) +
                                       " wide"));
  const int64_t t_count = x.numel() / h;
  check_i32("moe_experts ids", ids);
  if (t_count == 0 ? ids.numel() != 0 : ids.numel() % t_count != 0)
    throw StatusError(invalid_argument("moe_experts: ids " + ids.describe() + " is not [T, k] for T=" +
                                       std::to_string(t_count)));
  const int64_t k = t_count == 0 ? 0 : ids.numel() / t_count, pairs = t_count * k;
  check_f32("moe_experts weights", weights, pairs);
  check_f32("moe_experts out", out, t_count * h);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t p = 0; p < pairs; ++p)
    if (id[p] < 0 || id[p] >= e_count)
      throw StatusError(out_of_range("moe_experts: expert id " + std::to_string(id[p]) + " at row " +
                                     std::to_string(p / k) + " outside [0, " + std::to_string(e_count) + ")"));

  // Stable counting sort of the pairs by expert: first[e] .. first[e+1] hold expert
  // e's pairs in token order; pos[p] is pair p's place in that order.
  std::vector<int64_t> first(static_cast<size_t>(e_count) + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) ++first[id[p] + 1];
  for (int64_t e = 0; e < e_count; ++e) first[e + 1] += first[e];
  std::vector<int64_t> fill(first.begin(), first.end() - 1), pos(static_cast<size_t>(pairs));
  std::vector<int32_t> token(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    pos[p] = fill[id[p]]++;
    token[pos[p]] = static_cast<int32_t>(p / k);
  }

  // Per active expert: act = swiglu(x · gate_up^T) over its tokens, y = act · down^T.
  std::vector<float> gu, act;
  std::vector<float> y(static_cast<size_t>(pairs * h));
  const size_t es = dtype_size(gate_up.dtype()), ds = dtype_size(down.dtype());
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    gu.resize(static_cast<size_t>(n * two_i));
    act.resize(static_cast<size_t>(n * idim));
    expert_matmul(gu.data(), x.data<float>(), h, token.data() + first[e], n,
                  static_cast<const char*>(gate_up.raw()) + e * two_i * h * es, gate_up.dtype(), two_i, h);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < idim; ++i) {
        const float gc = std::min(gu[r * two_i + i], swiglu_limit);
        const float uc = std::clamp(gu[r * two_i + idim + i], -swiglu_limit, swiglu_limit);
        act[r * idim + i] = gc / (1.0f + std::exp(-gc)) * uc;
      }
    expert_matmul(y.data() + first[e] * h, act.data(), idim, nullptr, n,
                  static_cast<const char*>(down.raw()) + e * h * idim * ds, down.dtype(), h, idim);
  }

  // Combine: each token's k expert outputs, in slot order, onto zero.
  const float* w = weights.data<float>();
  parallel_rows(t_count, k * h, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out.data<float>() + t * h;
      std::fill_n(o, h, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float s = w[t * k + j];
        const float* yr = y.data() + pos[t * k + j] * h;
        for (int64_t c = 0; c < h; ++c) o[c] += s * yr[c];
      }
    }
  });
}

}  // namespace tf::cpu
