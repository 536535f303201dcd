// moe_experts on the GPU: the routed experts of a MoE for all tokens of a call,
// grouped per expert on the device (moe_grouping.cuh) for any number of tokens: no
// host sync, no allocation outside the context's scratch, so any call can be captured
// in a CUDA graph. Launches per call:
//   1. grouping: active experts in ascending id (slots), each (token, j) pair a row,
//      rows of an expert in token order (moe_grouping.cuh);
//   2-3. gate_up + SwiGLU, then down, one launch each for all active experts:
//      - up to ctx.exact_rows tokens, or f32 weights, or shapes the tensor cores do not
//        take: the row-independent f32 kernels below (f32 activations);
//      - above ctx.exact_rows tokens with bf16 weights: BF16 tensor-core tiles
//        (moe_tc_gemm.cu; x and act rounded to bf16, f32 accumulation);
//      - with bf16 weights and at least kMoeCublasMinTokens tokens (prefill, not being
//        captured): cuBLAS grouped GEMM after one download of the slot table
//        (moe_prefill_cublas.cu);
//   4. combine: out[t] = 0 + w[t,0]*y[row(t,0)] + w[t,1]*y[row(t,1)] + ... in j order,
//      each product and sum rounded separately (as on the CPU).
// f32 kernels: grid (column blocks, every possible slot); blocks of slots past the
// active count exit at once. A warp owns NC output columns (gate row c and up row I + c
// for gate_up), streams their weight rows in 16-byte chunks and applies them to all of
// the expert's rows, RT rows per pass (RT = 1, 2, 4 or 8 by the call's token count:
// fewer accumulators, more warps resident), so an expert's weights are read once per
// pass for all its tokens. The per-output arithmetic is small_gemm's idea (cuda_linear.cu): lane l sums chunks l, l+32, ... of the weight row, C products at a
// time, into one accumulator per (row, column), then a fixed butterfly. It does not
// depend on how many rows the expert has nor on the tile a row lands in, so a token's
// result is the same alone or in any batch (bit for bit).
#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_moe.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/moe_grouping.cuh"
#include "kernels/cuda/moe_prefill_cublas.h"
#include "kernels/cuda/moe_gemv_rows.cuh"
#include "kernels/cuda/moe_tc_gemm.h"

namespace tf::cuda {
namespace {

constexpr int kMoeWarps = 8;               // warps per block of the grouped kernels
constexpr int kRowTile = 8;                // rows sharing each weight chunk load (most)

// A weight chunk (16 bytes: C values) widened to f32.
template <typename W>
__device__ __forceinline__ void widen(float (&v)[16 / sizeof(W)], const uint4& raw) {
  if constexpr (sizeof(W) == 2) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(h[e]);
      v[2 * e] = f.x;
      v[2 * e + 1] = f.y;
    }
  } else {
    v[0] = __uint_as_float(raw.x);
    v[1] = __uint_as_float(raw.y);
    v[2] = __uint_as_float(raw.z);
    v[3] = __uint_as_float(raw.w);
  }
}

template <bool kNoL1>
__device__ __forceinline__ uint4 load_weights(const void* p) {
  if constexpr (kNoL1) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  } else {
    return __ldg(reinterpret_cast<const uint4*>(p));
  }
}

// One warp's share of a grouped product: NC output columns from col0 for the rows
// first..first+cnt of one expert (weights we):
//   kSwiglu: out[row, c] = swiglu(in_row · we[c], in_row · we[n_out + c]) for c < n_out
//            (we = gate_up [2*n_out, k]; in rows are x rows of the row's token, row_token);
//   else:    out[row, c] = in_row · we[c] (we = down [n_out, k]; in rows are the rows themselves).
// out rows are n_out wide. UU: chunks per lane whose 16-byte loads are all issued before
// their math (decode is latency-bound: each lane keeps U * NR loads in flight; 0 = by
// NR). kNoL1: weight loads bypass L1 (they are read once; L1 keeps the activation rows).
// RT: rows sharing each weight chunk load (fewer: fewer registers, more warps resident).
template <typename W, bool kVec, int NC, bool kSwiglu, int UU, bool kNoL1, int RT>
__device__ __forceinline__ void warp_columns(float* __restrict__ out, int64_t n_out, const float* in, int64_t k,
                                             const W* __restrict__ we, int64_t col0, int first, int cnt,
                                             const int* __restrict__ row_token, float limit) {
  constexpr int C = 16 / sizeof(W);
  constexpr int NR = kSwiglu ? 2 * NC : NC;  // weight rows per warp
  constexpr int U = UU > 0 ? UU : NR <= 2 ? 4 : 2;
  const int lane = threadIdx.x & 31;
  const W* wrow[NR];
  bool wok[NR];
#pragma unroll
  for (int q = 0; q < NR; ++q) {
    const int cc = q % NC;
    wok[q] = col0 + cc < n_out;
    wrow[q] = we + ((kSwiglu && q >= NC ? n_out : 0) + col0 + cc) * k;
  }
  for (int r0 = 0; r0 < cnt; r0 += RT) {
    const int rows = min(RT, cnt - r0);
    const float* xr[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const int row = first + r0 + min(r, rows - 1);
      xr[r] = in + static_cast<int64_t>(kSwiglu ? row_token[row] : row) * k;
    }
    float acc[RT][NR];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int q = 0; q < NR; ++q) acc[r][q] = 0.0f;
    // acc[r][q] += the C products of the chunk at c0 (lane l: chunks l, l+32, ... in order).
    auto fma_chunk = [&](const float (&wv)[NR][C], int64_t c0) {
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        if (r >= rows) break;
        float xv[C];
        moe_load_row_chunk<kVec>(xv, xr[r], c0, k);
#pragma unroll
        for (int q = 0; q < NR; ++q)
#pragma unroll
          for (int e1 = 0; e1 < C; ++e1) acc[r][q] += wv[q][e1] * xv[e1];
      }
    };
    if constexpr (kVec) {
      for (int64_t cb = int64_t(lane) * C; cb < k; cb += int64_t(U) * 32 * C) {
        uint4 raw[U][NR];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int q = 0; q < NR; ++q) {
            const int64_t c0 = cb + int64_t(u) * 32 * C;
            raw[u][q] = wok[q] && c0 < k ? load_weights<kNoL1>(wrow[q] + c0) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t c0 = cb + int64_t(u) * 32 * C;
          if (c0 >= k) break;
          float wv[NR][C];
#pragma unroll
          for (int q = 0; q < NR; ++q) widen<W>(wv[q], raw[u][q]);
          fma_chunk(wv, c0);
        }
      }
    } else {
      // Unaligned or ragged rows: element loads, zero-padded tail (the same arithmetic).
      for (int64_t c0 = int64_t(lane) * C; c0 < k; c0 += 32 * C) {
        float wv[NR][C];
#pragma unroll
        for (int q = 0; q < NR; ++q)
#pragma unroll
          for (int e1 = 0; e1 < C; ++e1) wv[q][e1] = wok[q] && c0 + e1 < k ? to_f32(wrow[q][c0 + e1]) : 0.0f;
        fma_chunk(wv, c0);
      }
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      if (r >= rows) break;
      moe_reduce_store_row<NC, NR, kSwiglu>(out + static_cast<int64_t>(first + r0 + r) * n_out + col0, acc[r], wok,
                                            true, limit);
    }
  }
}


// One grouped product, a launch: grid (column blocks, every possible slot); blocks of
// slots past the active count exit at once.
template <typename W, bool kVec, int NC, bool kSwiglu, int UU = 0, bool kNoL1 = false, int RT = kRowTile>
__global__ void __launch_bounds__(kMoeWarps * 32)
    grouped_kernel(float* __restrict__ out, int64_t n_out, const float* __restrict__ in, int64_t k,
                   const W* __restrict__ w, int64_t w_expert_stride, MoeGroups lay, float limit) {
  const int slot = blockIdx.y;
  if (slot >= *lay.num_active) return;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kMoeWarps + (threadIdx.x >> 5)) * NC;
  if (col0 >= n_out) return;
  const int e = lay.slot_expert[slot];
  warp_columns<W, kVec, NC, kSwiglu, UU, kNoL1, RT>(out, n_out, in, k, w + e * w_expert_stride, col0,
                                                        lay.slot_first[slot], lay.slot_count[slot], lay.row_token,
                                                        limit);
}

// out[t, c] = 0 + sum over j of w[t, j] * y[pair_row[t, j], c], in j order, each step rounded.
__global__ void combine_kernel(float* __restrict__ out, const float* __restrict__ y, const float* __restrict__ w,
                               const int* __restrict__ pair_row, int64_t tokens, int k, int64_t h) {
  const int64_t total = tokens * h;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, c = i % h;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int r = pair_row[t * k + j];
      if (r >= 0) acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], y[r * h + c]));
    }
    out[i] = acc;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// fn(std::integral_constant<int, rt>) for rt in 1, 2, 4, 8.
template <typename Fn>
void with_rows(int rt, Fn&& fn) {
  if (rt == 1) fn(std::integral_constant<int, 1>{});
  else if (rt == 2) fn(std::integral_constant<int, 2>{});
  else if (rt == 4) fn(std::integral_constant<int, 4>{});
  else fn(std::integral_constant<int, 8>{});
}

template <typename W, int NC, bool kSwiglu, int U = 0, bool kNoL1 = false, int RT = kRowTile>
void launch_grouped_nc(bool vec, unsigned slots, cudaStream_t stream, float* out, int64_t n_out, const float* in,
                       int64_t k, const W* w, int64_t stride, const MoeGroups& lay, float limit) {
  const int64_t cols_per_block = int64_t{kMoeWarps} * NC;
  const dim3 grid(static_cast<unsigned>((n_out + cols_per_block - 1) / cols_per_block), slots);
  if (vec) {
    grouped_kernel<W, true, NC, kSwiglu, U, kNoL1, RT>
        <<<grid, kMoeWarps * 32, 0, stream>>>(out, n_out, in, k, w, stride, lay, limit);
  } else {
    grouped_kernel<W, false, NC, kSwiglu><<<grid, kMoeWarps * 32, 0, stream>>>(out, n_out, in, k, w, stride, lay,
                                                                               limit);
  }
}

// One grouped product over `slots` possible slots. bf16 weights in 16-byte vectors
// follow `plan`; otherwise one column per warp, two above 8 tokens (`wide`: fewer
// activation loads per weight element).
template <bool kSwiglu>
void launch_grouped(CudaContext& ctx, const char* op, float* out, int64_t n_out, const float* in, int64_t k,
                    const Tensor& w, int64_t slots, bool wide, int rt, const MoeGemvPlan& plan, const MoeGroups& lay,
                    float limit) {
  const bool bf16 = w.dtype() == DType::kBF16;
  const int64_t c = bf16 ? 8 : 4;
  const int64_t stride = w.size(1) * w.size(2);
  const bool vec = k % c == 0 && aligned16(w.raw()) && aligned16(in);
  const unsigned s = static_cast<unsigned>(slots);
  cudaStream_t st = ctx.stream;
  if (bf16 && vec) {
    const auto* wp = w.data<__nv_bfloat16>();
    using B = __nv_bfloat16;
    const int nc = plan.nc > 0 ? plan.nc : wide ? 2 : 1;
    with_rows(rt, [&](auto rtc) {
      constexpr int R = decltype(rtc)::value;
      if (nc == 1 && plan.u == 8) launch_grouped_nc<B, 1, kSwiglu, 8, true, R>(true, s, st, out, n_out, in, k, wp, stride, lay, limit);
      else if (nc == 1 && plan.no_l1) launch_grouped_nc<B, 1, kSwiglu, 0, true, R>(true, s, st, out, n_out, in, k, wp, stride, lay, limit);
      else if (nc == 1) launch_grouped_nc<B, 1, kSwiglu, 0, false, R>(true, s, st, out, n_out, in, k, wp, stride, lay, limit);
      else if (nc == 2) launch_grouped_nc<B, 2, kSwiglu, 0, true, R>(true, s, st, out, n_out, in, k, wp, stride, lay, limit);
      else launch_grouped_nc<B, 4, kSwiglu, 2, true, R>(true, s, st, out, n_out, in, k, wp, stride, lay, limit);
    });
  } else if (bf16) {
    const auto* wp = w.data<__nv_bfloat16>();
    if (wide) launch_grouped_nc<__nv_bfloat16, 2, kSwiglu>(false, s, st, out, n_out, in, k, wp, stride, lay, limit);
    else launch_grouped_nc<__nv_bfloat16, 1, kSwiglu>(false, s, st, out, n_out, in, k, wp, stride, lay, limit);
  } else {
    const auto* wp = w.data<float>();
    if (wide) launch_grouped_nc<float, 2, kSwiglu>(vec, s, st, out, n_out, in, k, wp, stride, lay, limit);
    else launch_grouped_nc<float, 1, kSwiglu>(vec, s, st, out, n_out, in, k, wp, stride, lay, limit);
  }
  check_launch(op);
}

void check_experts(const CudaContext& ctx, const Tensor& gate_up, const Tensor& down) {
  check_weight(ctx, "moe_experts gate_up", gate_up);
  check_weight(ctx, "moe_experts down", down);
  if (gate_up.dim() != 3 || down.dim() != 3 || gate_up.size(1) % 2 != 0 || gate_up.size(1) == 0 ||
      gate_up.size(2) == 0 || down.size(0) != gate_up.size(0) || down.size(1) != gate_up.size(2) ||
      down.size(2) != gate_up.size(1) / 2)
    throw StatusError(invalid_argument("moe_experts: gate_up " + gate_up.describe() + " and down " +
                                       down.describe() + " are not [E, 2I, H] and [E, H, I]"));
}

}  // namespace

MoeGemvPlan moe_default_plan(int64_t tokens) {
  // The fastest plans measured on an H200 (cuda_moe_experts_bench, E = 8, H 4096, I 2048):
  // T = 1: 1 column per warp (87% of HBM); T = 2: 2; T = 3..8: 4 columns, 2 chunks in flight.
  MoeGemvPlan p;
  p.no_l1 = true;
  if (tokens <= 1) {
    p.nc = 1;
  } else if (tokens <= 2 || tokens > 8) {
    p.nc = 2;
  } else {
    p.nc = 4;
    p.u = 2;
  }
  return p;
}

void moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const Tensor& gate_up, const Tensor& down, float swiglu_limit) {
  moe_experts_with_plan(ctx, out, x, ids, weights, gate_up, down, swiglu_limit,
                        moe_default_plan(gate_up.dim() == 3 && gate_up.size(2) > 0 ? x.numel() / gate_up.size(2) : 0));
}

void moe_experts_with_plan(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const Tensor& gate_up, const Tensor& down, float swiglu_limit, const MoeGemvPlan& plan) {
  check_dev(ctx, "moe_experts x", x, DType::kF32);
  check_experts(ctx, gate_up, down);
  const int64_t experts = gate_up.size(0), two_i = gate_up.size(1), idim = two_i / 2, h = gate_up.size(2);
  if (x.numel() % h != 0)
    throw StatusError(invalid_argument("moe_experts: x " + x.describe() + " rows are not H=" + std::to_string(h) +
                                       " wide"));
  const int64_t tokens = x.numel() / h;
  check_dev(ctx, "moe_experts ids", ids, DType::kI32);
  if (tokens == 0 ? ids.numel() != 0 : ids.numel() % tokens != 0)
    throw StatusError(invalid_argument("moe_experts: ids " + ids.describe() + " is not [T, k] for T=" +
                                       std::to_string(tokens)));
  const int64_t k = tokens == 0 ? 0 : ids.numel() / tokens, pairs = tokens * k;
  check_dev(ctx, "moe_experts weights", weights, DType::kF32, pairs);
  check_dev(ctx, "moe_experts out", out, DType::kF32, tokens * h);
  if (tokens == 0) return;
  if (pairs > INT32_MAX / 2 || experts > INT32_MAX / 2)
    throw StatusError(invalid_argument("moe_experts: " + std::to_string(pairs) + " (token, expert) pairs"));

  if (experts > kMoeGroupingMaxExperts)
    throw StatusError(invalid_argument("moe_experts: " + std::to_string(experts) + " experts (at most " +
                                       std::to_string(kMoeGroupingMaxExperts) + ")"));

  // Tensor cores above exact_rows tokens when the weights are bf16 and the rows take 16-byte vectors.
  const bool tc = tokens > ctx.exact_rows && gate_up.dtype() == DType::kBF16 && down.dtype() == DType::kBF16 &&
                  moe_tc_shapes_ok(h, idim) && aligned16(gate_up.raw()) && aligned16(down.raw()) &&
                  aligned16(x.raw());
  const int tile_rows = tc ? moe_tc_tile_rows(tokens) : 0;
  const int64_t max_tiles = moe_max_tiles(experts, pairs, tile_rows);
  // Scratch: the grouping's ints, then (tensor cores) x in bf16, act [P, I] (bf16 or f32)
  // and y [P, H] f32, each 256-byte aligned.
  const int64_t act_bytes = tc ? 2 : 4;
  const int64_t xb_off = moe_round_up(moe_groups_ints(experts, pairs, tile_rows) * 4, 256);
  const int64_t act_off = xb_off + (tc ? moe_round_up(tokens * h * 2, 256) : 0);
  const int64_t y_off = act_off + moe_round_up(pairs * idim * act_bytes, 256);
  Tensor scratch = ctx.scratch(std::max<int64_t>(1, y_off + pairs * h * 4));
  char* base = static_cast<char*>(scratch.raw());
  const MoeGroups lay = moe_groups_at(reinterpret_cast<int*>(base), experts, pairs, tile_rows);
  float* y = reinterpret_cast<float*>(base + y_off);

  // (k = 0 routes nothing: only combine runs, writing zeros.)
  if (pairs > 0) {
    launch_moe_grouping(ids.data<int32_t>(), tokens, k, experts, tile_rows, lay, ctx.error_word, ctx.stream);
    check_launch("moe_experts (grouping)");
    if (tc) {
      auto* xb = reinterpret_cast<__nv_bfloat16*>(base + xb_off);
      auto* act = reinterpret_cast<__nv_bfloat16*>(base + act_off);
      const bool cublas = plan.prefill == 2 || (plan.prefill == 0 && tokens >= kMoeCublasMinTokens);
      if (cublas) {
        moe_to_bf16(ctx.stream, xb, x.data<float>(), tokens * h);
        check_launch("moe_experts (x to bf16)");
      }
      if (!cublas || !moe_prefill_cublas(ctx, y, xb, gate_up, down, h, idim, experts, pairs, lay, swiglu_limit)) {
        moe_tc_gate_up(ctx.stream, act, x.data<float>(), gate_up.data<__nv_bfloat16>(), idim, h, lay, max_tiles, tile_rows,
                       swiglu_limit);
        check_launch("moe_experts (gate_up, tensor cores)");
        moe_tc_down(ctx.stream, y, act, down.data<__nv_bfloat16>(), h, idim, lay, max_tiles, tile_rows);
        check_launch("moe_experts (down, tensor cores)");
      }
    } else {
      float* act = reinterpret_cast<float*>(base + act_off);
      const int64_t slots = moe_max_slots(experts, pairs);
      const bool wide = tokens > 8;
      launch_grouped<true>(ctx, "moe_experts (gate_up)", act, idim, x.data<float>(), h, gate_up, slots, wide,
                           moe_rows_per_pass(tokens), plan, lay, swiglu_limit);
      launch_grouped<false>(ctx, "moe_experts (down)", y, h, act, idim, down, slots, wide,
                            moe_rows_per_pass(tokens), plan, lay, swiglu_limit);
    }
  }
  launch_moe_combine(ctx.stream, out.data<float>(), y, weights.data<float>(), lay.pair_row, tokens,
                     static_cast<int>(k), h);
  check_launch("moe_experts (combine)");
}

void launch_moe_combine(cudaStream_t stream, float* out, const float* y, const float* weights, const int* pair_row,
                        int64_t tokens, int k, int64_t h) {
  combine_kernel<<<grid_1d(tokens * h), 256, 0, stream>>>(out, y, weights, pair_row, tokens, k, h);
}

}  // namespace tf::cuda
