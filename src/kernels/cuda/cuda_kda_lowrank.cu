// The KDA low-rank ups of decode rows in one launch (cuda_kda_lowrank.h):
//   g = kda_gate(fa · f_b^T),  gate = ga · g_b^T,  beta = sigmoid(beta_logits).
//
// Layout: the 2C output columns (C = H*Dk: f_b's, then g_b's) are cut into groups of
// kNc = 4 adjacent columns, one warp each (GLM-5.3-Flash: 4096 warps, 512 blocks, all
// resident at once), so the two [C, R] matrices (2 MB each in bf16) are requested in
// one wave: each lane loads its quads of its 4 columns (R = 128: one 8-byte quad per
// column) into registers before anything else. With programmatic dependent launch
// those loads start while the kernel before (matmul_many, which wrote fa, ga and the
// beta logits) drains; griddepcontrol.wait then orders every read of the activations
// and every write after it (outputs may reuse memory the kernel before still reads).
// The warp then walks the rows: the row's x quad, 4 FMAs per column, the four columns'
// butterflies folded into one (6 shuffles: the 8-64 row calls are shuffle-bound), and
// lanes 0, 8, 16, 24 apply the epilogue (the gate formula for f_b's columns) and store.
//
// Arithmetic: small_gemm's with one K slice (small_gemm_kernel.cuh): lane l sums quads
// l, l+32 (ascending) of the row, 4 FMAs each from +0, then warp_reduce's xor
// butterfly; the gate is kda_gate_kernel's expression and sigmoid pointwise_kernel's.
// So every output has the bits of the default sequence on this backend (matmul at
// rows <= exact_rows, kda_gate, sigmoid, matmul) and a row's bits never depend on the
// other rows; the tests compare bit for bit.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kda_lowrank.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/legacy_small_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/small_gemm.h"
#include "kernels/cuda/small_gemm_kernel.cuh"

namespace tf::cuda {
namespace {

constexpr int kNc = 4;     // adjacent output columns per warp
constexpr int kWarps = 8;  // warps per block
constexpr int64_t kMaxRank = 256;  // R: at most two quads per lane

struct LowrankArgs {
  float* g;
  float* gate;
  float* beta;             // may be beta_logits (each element is read and written by one thread)
  const float* beta_logits;
  const float* fa;         // [rows, k]
  const float* ga;         // [rows, k]
  const void* f_b;         // [c, k]
  const void* g_b;         // [c, k]
  const float* dt_bias;    // [c]
  const float* a_log;      // [heads]
  int64_t rows, c, k, dk, heads;
  bool has_lb;
  float lb;
};

// QPL: quads per lane (R <= 128 * QPL).
template <typename W, int QPL>
__global__ void __launch_bounds__(kWarps * 32) kda_lowrank_kernel(const LowrankArgs a) {
  using small_gemm_detail::load_quad;
  using small_gemm_detail::quad_to_f32;
  using Bits = typename small_gemm_detail::QuadBits<W>::Type;
  const int lane = threadIdx.x & 31;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kNc;
  const bool active = col0 < 2 * a.c;
  const bool up = col0 >= a.c;  // the output gate's half (c % kNc == 0: a group never straddles)
  const int64_t j0 = up ? col0 - a.c : col0;
  const int64_t nq = a.k / 4;
  // The weights first: they do not depend on the kernel before.
  Bits raw[QPL][kNc];
  if (active) {
    const W* w = static_cast<const W*>(up ? a.g_b : a.f_b) + j0 * a.k;
#pragma unroll
    for (int u = 0; u < QPL; ++u) {
      const int64_t q = lane + 32 * u;
#pragma unroll
      for (int cc = 0; cc < kNc; ++cc) raw[u][cc] = q < nq ? load_quad<true>(w + cc * a.k + q * 4, 4) : Bits{};
    }
  }
  pdl_wait();
  const int64_t nb = a.rows * a.heads;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < nb;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x)
    a.beta[t] = 1.0f / (1.0f + expf(-a.beta_logits[t]));  // pointwise_kernel's sigmoid
  if (!active) return;  // a whole warp: no shuffle is left half-way
  float4 wf[QPL][kNc];
#pragma unroll
  for (int u = 0; u < QPL; ++u)
#pragma unroll
    for (int cc = 0; cc < kNc; ++cc) wf[u][cc] = quad_to_f32(raw[u][cc]);
  const float* x = up ? a.ga : a.fa;
  float* out = up ? a.gate : a.g;
  // After the reduction lanes 8c..8c+7 hold column j0 + c (see below); lane 8c stores it.
  const int mine_col = lane >> 3;
  const int64_t j = j0 + mine_col;
  const float bias = up ? 0.0f : a.dt_bias[j];
  const float decay_rate = up ? 0.0f : expf(a.a_log[j / a.dk]);
  for (int64_t r = 0; r < a.rows; ++r) {
    float acc[kNc];
#pragma unroll
    for (int cc = 0; cc < kNc; ++cc) acc[cc] = 0.0f;
#pragma unroll
    for (int u = 0; u < QPL; ++u) {
      const int64_t q = lane + 32 * u;
      if (q < nq) {
        const float4 xv = __ldg(reinterpret_cast<const float4*>(x + r * a.k + q * 4));
#pragma unroll
        for (int cc = 0; cc < kNc; ++cc) {
          float s = acc[cc];
          s = __fmaf_rn(wf[u][cc].x, xv.x, s);
          s = __fmaf_rn(wf[u][cc].y, xv.y, s);
          s = __fmaf_rn(wf[u][cc].z, xv.z, s);
          s = __fmaf_rn(wf[u][cc].w, xv.w, s);
          acc[cc] = s;
        }
      }
    }
    // warp_reduce's xor butterfly for the 4 columns at once, in 6 shuffles instead of 20:
    // at distance 16 the lower half keeps columns 0-1 and the upper half 2-3, at 8 each
    // quarter keeps one column, then 4, 2, 1 as usual. Each lane adds exactly the pairs
    // the butterfly adds at that lane (own value first; IEEE addition is commutative), so
    // the column's sum has warp_reduce's bits.
    const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0;
    float s0 = hi16 ? acc[2] : acc[0], s1 = hi16 ? acc[3] : acc[1];
    const float r0 = __shfl_xor_sync(0xffffffffu, hi16 ? acc[0] : acc[2], 16);
    const float r1 = __shfl_xor_sync(0xffffffffu, hi16 ? acc[1] : acc[3], 16);
    s0 = s0 + r0;
    s1 = s1 + r1;
    float mine = hi8 ? s1 : s0;
    mine = mine + __shfl_xor_sync(0xffffffffu, hi8 ? s0 : s1, 8);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) mine = mine + __shfl_xor_sync(0xffffffffu, mine, o);
    if ((lane & 7) == 0) {
      float res = mine;
      if (!up) {  // kda_gate_kernel's expression on the stored matmul result
        const float xg = mine + bias;
        res = a.has_lb ? a.lb * (1.0f / (1.0f + expf(-(decay_rate * xg))))
                       : -decay_rate * (xg > 20.0f ? xg : logf(1.0f + expf(xg)));
      }
      out[r * a.c + j] = res;
    }
  }
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }

template <typename W>
void launch(CudaContext& ctx, const LowrankArgs& a) {
  const int64_t warps = 2 * a.c / kNc;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((warps + kWarps - 1) / kWarps));
  cfg.blockDim = dim3(kWarps * 32);
  cfg.stream = ctx.stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = kda_lowrank_pdl() ? 1 : 0;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  const cudaError_t e = a.k <= 128 ? cudaLaunchKernelEx(&cfg, kda_lowrank_kernel<W, 1>, a)
                                   : cudaLaunchKernelEx(&cfg, kda_lowrank_kernel<W, 2>, a);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("kda_lowrank_gates launch: ") + cudaGetErrorString(e)));
}

}  // namespace

bool kda_lowrank_gates_fused(CudaContext& ctx, Tensor& g, Tensor& gate, Tensor& beta, const Tensor& fa,
                             const Tensor& ga, const Tensor& beta_logits, const Tensor& f_b, const Tensor& g_b,
                             const Tensor& dt_bias, const Tensor& a_log, bool has_lower_bound, float lower_bound) {
  const char* op = "kda_lowrank_gates";
  if (fa.dim() != 2 || f_b.dim() != 2 || g_b.shape() != f_b.shape() || f_b.size(1) != fa.size(1))
    throw StatusError(invalid_argument(std::string(op) + ": fa " + fa.describe() + ", f_b " + f_b.describe() +
                                       " and g_b " + g_b.describe() + " must be [T, R], [C, R], [C, R]"));
  const int64_t rows = fa.size(0), k = fa.size(1), c = f_b.size(0), h = a_log.numel();
  if (h == 0 || c % h != 0 || dt_bias.numel() != c)
    throw StatusError(invalid_argument(std::string(op) + ": dt_bias " + dt_bias.describe() + " and a_log " +
                                       a_log.describe() + " do not match f_b " + f_b.describe()));
  check_dev(ctx, op, fa, DType::kF32, rows * k);
  check_dev(ctx, op, ga, DType::kF32, rows * k);
  check_dev(ctx, op, g, DType::kF32, rows * c);
  check_dev(ctx, op, gate, DType::kF32, rows * c);
  check_dev(ctx, op, beta, DType::kF32, rows * h);
  check_dev(ctx, op, beta_logits, DType::kF32, rows * h);
  check_dev(ctx, op, dt_bias, DType::kF32, c);
  check_dev(ctx, op, a_log, DType::kF32, h);
  check_weight(ctx, op, f_b);
  check_weight(ctx, op, g_b);
  if (legacy_small_ops() || rows > ctx.exact_rows || f_b.dtype() != g_b.dtype() || k <= 0 || k % 4 != 0 || k > kMaxRank ||
      c % kNc != 0 || small_gemm_k_splits(c, k, 1) != 1)
    return false;
  for (const Tensor* t : {&fa, &ga, &f_b, &g_b})
    if (!aligned16(*t)) return false;
  if (rows == 0 || c == 0) return true;
  LowrankArgs a;
  a.g = g.data<float>();
  a.gate = gate.data<float>();
  a.beta = beta.data<float>();
  a.beta_logits = beta_logits.data<float>();
  a.fa = fa.data<float>();
  a.ga = ga.data<float>();
  a.f_b = f_b.raw();
  a.g_b = g_b.raw();
  a.dt_bias = dt_bias.data<float>();
  a.a_log = a_log.data<float>();
  a.rows = rows;
  a.c = c;
  a.k = k;
  a.dk = c / h;
  a.heads = h;
  a.has_lb = has_lower_bound;
  a.lb = lower_bound;
  if (f_b.dtype() == DType::kBF16)
    launch<__nv_bfloat16>(ctx, a);
  else
    launch<float>(ctx, a);
  return true;
}

std::atomic<bool>& kda_lowrank_pdl() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_KDA_PDL");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

}  // namespace tf::cuda
