// moe_experts_fp8 on the GPU (cuda_moe_fp8.h): the routed experts of the official FP8
// release (Fp8ExpertStack: e4m3 codes, f32 scales per 128x128 block), grouped per expert
// on the device (moe_grouping.cuh) as moe_experts' f32 path does, so a decode step can be
// captured in a graph; calls of more than kMoeFp8ChunkTokens tokens run in chunks of that
// many (bounded scratch). Launches per chunk:
//   1. grouping: active experts in ascending id (slots), each (token, j) pair a row;
//   2. gate + up + SwiGLU: a warp owns NC intermediate columns of one slot, streams the
//      gate and up rows of those columns (16 codes per 16-byte load, U chunks per lane in
//      flight: MoeFp8Plan) and applies them to all of the expert's rows, RT rows per pass;
//   3. down: the same over the act rows;
//   4. combine (launch_moe_combine): each token's rows summed in j order.
// Weights are dequantized in registers: a chunk of 16 codes lies in one 128-column block,
// so its 16 products x * e4m3 are summed first (f32 FMAs) and the sum is scaled once by
// the block's scale: out = sum over chunks of scale_b * (sum of x * e4m3). That is the
// CPU's sum of x * (e4m3 * scale) up to f32 rounding (the tests hold it to a tolerance).
// A token's result does not depend on the other tokens of the call: every row of an
// expert runs the same per-output arithmetic whatever its pass or slot.
#include "kernels/cuda/cuda_moe_fp8.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_moe.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/moe_grouping.cuh"
#include "kernels/cuda/moe_gemv_rows.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;    // warps per block
constexpr int kChunk = 16;   // codes per 16-byte load
constexpr int kBlock = 128;  // scale block edge (kFp8BlockSize)

// One projection of the stack: codes [E, n, k], scales [E, ceil(n/128), ceil(k/128)].
struct Fp8Proj {
  const uint8_t* codes;
  const float* scales;
  int64_t n, k, kb;  // kb = ceil(k / 128): a scale row
};

// 16 e4m3 codes widened to f32 (exact: every e4m3 value is an f16 and an f32).
__device__ __forceinline__ void widen16(float (&v)[kChunk], const uint4& raw) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffffu), __NV_E4M3);
    const __half2 hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), __NV_E4M3);
    const float2 a = __half22float2(lo), b = __half22float2(hi);
    v[4 * i] = a.x;
    v[4 * i + 1] = a.y;
    v[4 * i + 2] = b.x;
    v[4 * i + 3] = b.y;
  }
}

// The 16 codes of a row from column c0 (kVec: one 16-byte load, the row 16-byte aligned
// and c0 + 16 <= k; else byte loads, zeros past k).
template <bool kVec>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* row, int64_t c0, int64_t k) {
  if constexpr (kVec) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(row + c0));
    return v;
  } else {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      if (c0 + i < k) w[i / 4] |= static_cast<uint32_t>(row[c0 + i]) << (8 * (i % 4));
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// One grouped product, a launch: grid (column blocks, every possible slot); blocks of
// slots past the active count exit at once. kSwiglu: out [rows, n] = swiglu(in · gate^T,
// in · up^T) with in the rows' tokens' x (a = gate, b = up); else out [rows, n] = in ·
// a^T with in the rows themselves (a = down). NC output columns per warp, RT rows per
// pass; U chunks per lane loaded before their math.
template <bool kVec, int NC, bool kSwiglu, int RT, int U>
__global__ void __launch_bounds__(kWarps * 32)
    grouped_fp8_kernel(float* __restrict__ out, const float* __restrict__ in, Fp8Proj a, Fp8Proj b, MoeGroups lay,
                       float limit) {
  const int slot = blockIdx.y;
  if (slot >= *lay.num_active) return;
  const int64_t n = a.n, k = a.k;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * NC;
  if (col0 >= n) return;
  const int lane = threadIdx.x & 31;
  const int e = lay.slot_expert[slot], first = lay.slot_first[slot], cnt = lay.slot_count[slot];
  constexpr int NR = kSwiglu ? 2 * NC : NC;  // weight rows per warp
  const uint8_t* wrow[NR];
  const float* srow[NR];
  bool wok[NR];
#pragma unroll
  for (int q = 0; q < NR; ++q) {
    const Fp8Proj& p = kSwiglu && q >= NC ? b : a;
    const int64_t c = col0 + q % NC;
    wok[q] = c < n;
    const int64_t cc = wok[q] ? c : col0;
    wrow[q] = p.codes + (static_cast<int64_t>(e) * n + cc) * k;
    srow[q] = p.scales + (static_cast<int64_t>(e) * ((n + kBlock - 1) / kBlock) + cc / kBlock) * p.kb;
  }
  for (int r0 = 0; r0 < cnt; r0 += RT) {
    const int rows = min(RT, cnt - r0);
    const float* xr[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const int row = first + r0 + min(r, rows - 1);
      xr[r] = in + static_cast<int64_t>(kSwiglu ? lay.row_token[row] : row) * k;
    }
    float acc[RT][NR];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int q = 0; q < NR; ++q) acc[r][q] = 0.0f;
    for (int64_t cb = int64_t{lane} * kChunk; cb < k; cb += int64_t{U} * 32 * kChunk) {
      uint4 raw[U][NR];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int q = 0; q < NR; ++q) {
          const int64_t c0 = cb + int64_t{u} * 32 * kChunk;
          raw[u][q] = wok[q] && c0 < k ? load_chunk<kVec>(wrow[q], c0, k) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t c0 = cb + int64_t{u} * 32 * kChunk;
        if (c0 >= k) break;  // (the lane's last chunks: uniform per lane, after every load)
        float sc[NR];
#pragma unroll
        for (int q = 0; q < NR; ++q) sc[q] = srow[q][c0 / kBlock];
        if constexpr (RT == 1) {
          // One row: x once, each weight row widened as it is used (fewer live registers).
          float xv[kChunk];
          moe_load_row_chunk<kVec>(xv, xr[0], c0, k);
#pragma unroll
          for (int q = 0; q < NR; ++q) {
            float wq[kChunk];
            widen16(wq, raw[u][q]);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < kChunk; ++i) part = fmaf(wq[i], xv[i], part);
            acc[0][q] = fmaf(part, sc[q], acc[0][q]);
          }
        } else {
          float wv[NR][kChunk];
#pragma unroll
          for (int q = 0; q < NR; ++q) widen16(wv[q], raw[u][q]);
#pragma unroll
          for (int r = 0; r < RT; ++r) {
            // (An exit, not a predicate: an expert's rows are often fewer than RT, and
            // computing the missing ones costs 1.5-3.5x at 2-8 tokens, run2s14.)
            if (r >= rows) break;
            float xv[kChunk];
            moe_load_row_chunk<kVec>(xv, xr[r], c0, k);
#pragma unroll
            for (int q = 0; q < NR; ++q) {
              float part = 0.0f;
#pragma unroll
              for (int i = 0; i < kChunk; ++i) part = fmaf(wv[q][i], xv[i], part);
              acc[r][q] = fmaf(part, sc[q], acc[r][q]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < RT; ++r)
      moe_reduce_store_row<NC, NR, kSwiglu>(out + static_cast<int64_t>(first + r0 + r) * n + col0, acc[r], wok,
                                            r < rows, limit);
  }
}

template <bool kVec, int NC, bool kSwiglu, int RT, int U>
void launch_one(unsigned slots, cudaStream_t stream, float* out, const float* in, const Fp8Proj& a, const Fp8Proj& b,
                const MoeGroups& lay, float limit) {
  const int64_t cols_per_block = int64_t{kWarps} * NC;
  const dim3 grid(static_cast<unsigned>((a.n + cols_per_block - 1) / cols_per_block), slots);
  grouped_fp8_kernel<kVec, NC, kSwiglu, RT, U><<<grid, kWarps * 32, 0, stream>>>(out, in, a, b, lay, limit);
}

// The plan's kernel for RT rows per pass: the bench plans (cuda_moe_fp8.h) on 16-byte
// rows, else 4 chunks in flight and one or two columns.
template <bool kSwiglu, int RT>
void launch_rt(bool vec, const MoeFp8Plan& p, unsigned slots, cudaStream_t stream, float* out, const float* in,
               const Fp8Proj& a, const Fp8Proj& b, const MoeGroups& lay, float limit) {
#define TF_FP8_LAUNCH(VEC, NC, U) launch_one<VEC, NC, kSwiglu, RT, U>(slots, stream, out, in, a, b, lay, limit)
  if (!vec) {
    if (p.nc >= 2) TF_FP8_LAUNCH(false, 2, 4);
    else TF_FP8_LAUNCH(false, 1, 4);
    return;
  }
  if (p.nc == 1 && p.u == 2) return TF_FP8_LAUNCH(true, 1, 2);
  if (p.nc == 1 && p.u == 8) return TF_FP8_LAUNCH(true, 1, 8);
  if (p.nc == 2 && p.u == 1) return TF_FP8_LAUNCH(true, 2, 1);
  if (p.nc == 2 && p.u == 2) return TF_FP8_LAUNCH(true, 2, 2);
  if (p.nc == 4 && p.u == 1) return TF_FP8_LAUNCH(true, 4, 1);
  if (p.nc == 4 && p.u == 2) return TF_FP8_LAUNCH(true, 4, 2);
  if (p.nc >= 2) TF_FP8_LAUNCH(true, 2, 4);
  else TF_FP8_LAUNCH(true, 1, 4);
#undef TF_FP8_LAUNCH
}

// One grouped product over `slots` possible slots.
template <bool kSwiglu>
void launch_grouped(cudaStream_t stream, int64_t tokens, const MoeFp8Plan& plan, unsigned slots, float* out,
                    const float* in, const Fp8Proj& a, const Fp8Proj& b, const MoeGroups& lay, float limit) {
  const bool vec = a.k % kChunk == 0 && reinterpret_cast<uintptr_t>(a.codes) % 16 == 0 &&
                   (!kSwiglu || reinterpret_cast<uintptr_t>(b.codes) % 16 == 0) &&
                   reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const int rt = moe_rows_per_pass(tokens);
  if (rt == 1) launch_rt<kSwiglu, 1>(vec, plan, slots, stream, out, in, a, b, lay, limit);
  else if (rt == 2) launch_rt<kSwiglu, 2>(vec, plan, slots, stream, out, in, a, b, lay, limit);
  else if (rt == 4) launch_rt<kSwiglu, 4>(vec, plan, slots, stream, out, in, a, b, lay, limit);
  else launch_rt<kSwiglu, 8>(vec, plan, slots, stream, out, in, a, b, lay, limit);
}

void check_stack(const CudaContext& ctx, const Fp8ExpertStack& s) {
  const Status st = check_fp8_expert_stack(s, "moe_experts_fp8");
  if (!st.is_ok()) throw StatusError(st);
  if (s.gate.device() != Device::cuda(ctx.device))
    throw StatusError(invalid_argument("moe_experts_fp8: the experts are on " + s.gate.device().to_string() +
                                       ", not cuda:" + std::to_string(ctx.device)));
}

Fp8Proj proj(const Tensor& codes, const Tensor& scales) {
  const int64_t n = codes.size(1), k = codes.size(2);
  return Fp8Proj{static_cast<const uint8_t*>(codes.raw()), scales.data<float>(), n, k, (k + kBlock - 1) / kBlock};
}

}  // namespace

// The fastest plans on an H200 at the release's shapes (288 experts, H 4096, I 2048, us per
// call; run5s14, run9s14, run12s14): T=1 nc2 u2 75.2 (nc1 u4 105.2, nc4 u2 80.1); T=2 nc4 u1
// 145.0 (nc2 u1 152.6, nc1 u4 211.4); T=3 nc2 u1 222.9 (nc2 u4 253.6); T=4 nc2 u1 293.4 (nc2 u4
// 322.7, nc1 u4 431.2); T=8 nc4 u1 641.5 (nc2 u4 654.4); T=16 nc4 u1 1170 (nc2 u4 1225); T=64
// (a chunk) nc4 u1 3329 (nc2 u4 3806).
MoeFp8Plan moe_fp8_default_plan(int64_t tokens) {
  if (tokens <= 1) return MoeFp8Plan{2, 2};
  if (tokens == 3 || tokens == 4) return MoeFp8Plan{2, 1};
  return MoeFp8Plan{4, 1};
}

void moe_experts_fp8(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const Fp8ExpertStack& experts, float swiglu_limit) {
  moe_experts_fp8_with_plan(ctx, out, x, ids, weights, experts, swiglu_limit,
                            moe_fp8_default_plan(x.dim() == 2 ? std::min(x.size(0), kMoeFp8ChunkTokens) : 0));
}

void moe_experts_fp8_with_plan(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids,
                               const Tensor& weights, const Fp8ExpertStack& experts, float swiglu_limit,
                               const MoeFp8Plan& plan) {
  check_stack(ctx, experts);
  const int64_t ne = experts.num_experts(), il = experts.intermediate(), h = experts.hidden();
  check_dev(ctx, "moe_experts_fp8 x", x, DType::kF32);
  if (x.dim() != 2 || x.size(1) != h)
    throw StatusError(invalid_argument("moe_experts_fp8: x " + x.describe() + " must be [T, " + std::to_string(h) +
                                       "]"));
  const int64_t tokens = x.size(0);
  check_dev(ctx, "moe_experts_fp8 ids", ids, DType::kI32);
  if (ids.dim() != 2 || ids.size(0) != tokens)
    throw StatusError(invalid_argument("moe_experts_fp8: ids " + ids.describe() + " is not [T, k] for T=" +
                                       std::to_string(tokens)));
  const int64_t k = ids.size(1);
  check_dev(ctx, "moe_experts_fp8 weights", weights, DType::kF32, tokens * k);
  check_dev(ctx, "moe_experts_fp8 out", out, DType::kF32, tokens * h);
  if (tokens == 0) return;
  if (ne > kMoeGroupingMaxExperts)
    throw StatusError(invalid_argument("moe_experts_fp8: " + std::to_string(ne) + " experts (at most " +
                                       std::to_string(kMoeGroupingMaxExperts) + ")"));
  // Scratch for one chunk of tokens: the grouping's ints, act [P, I] and y [P, H] (f32),
  // each 256-byte aligned.
  const int64_t chunk = std::min(tokens, kMoeFp8ChunkTokens), max_pairs = chunk * k;
  const int64_t act_off = moe_round_up(moe_groups_ints(ne, max_pairs, 0) * 4, 256);
  const int64_t y_off = act_off + moe_round_up(max_pairs * il * 4, 256);
  Tensor scratch = ctx.scratch(std::max<int64_t>(1, y_off + max_pairs * h * 4));
  char* base = static_cast<char*>(scratch.raw());
  auto* act = reinterpret_cast<float*>(base + act_off);
  auto* y = reinterpret_cast<float*>(base + y_off);
  const Fp8Proj gate = proj(experts.gate, experts.gate_scales), up = proj(experts.up, experts.up_scales);
  const Fp8Proj down = proj(experts.down, experts.down_scales);
  // Chunks of tokens one after the other (a token's result does not depend on its chunk).
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n = std::min(chunk, tokens - t0), pairs = n * k;
    const MoeGroups lay = moe_groups_at(reinterpret_cast<int*>(base), ne, pairs, 0);
    const float* xc = x.data<float>() + t0 * h;
    if (pairs > 0) {
      launch_moe_grouping(ids.data<int32_t>() + t0 * k, n, k, ne, 0, lay, ctx.error_word, ctx.stream);
      check_launch("moe_experts_fp8 (grouping)");
      const auto slots = static_cast<unsigned>(moe_max_slots(ne, pairs));
      launch_grouped<true>(ctx.stream, n, plan, slots, act, xc, gate, up, lay, swiglu_limit);
      check_launch("moe_experts_fp8 (gate_up)");
      launch_grouped<false>(ctx.stream, n, plan, slots, y, act, down, down, lay, swiglu_limit);
      check_launch("moe_experts_fp8 (down)");
    }
    launch_moe_combine(ctx.stream, out.data<float>() + t0 * h, y, weights.data<float>() + t0 * k, lay.pair_row, n,
                       static_cast<int>(k), h);
    check_launch("moe_experts_fp8 (combine)");
  }
}

}  // namespace tf::cuda
