// moe_experts on the GPU: the routed experts of a MoE for all tokens of a call,
// grouped per expert on the device.
//
// Up to kMoeDeviceMaxRows tokens (decode, small batches), four launches and no host
// sync (so a step can be captured in a CUDA graph):
//   1. route_tokens (one block): a 64-bit token mask per expert (atomicOr, so the
//      result does not depend on thread order), a block scan over the experts gives
//      every active expert a slot (ascending expert id) and its first row in the
//      sorted pair list, and each (token, slot j) pair its row: the expert's first
//      row + the number of earlier tokens in its mask. Rows of one expert are thus in
//      token order; a token listing an expert twice gets one row, used twice.
//   2. grouped gate_up + SwiGLU: grid (column blocks, every possible slot); blocks of
//      slots past the active count exit at once. A warp owns gate row c and up row
//      I + c of its expert (NC such pairs), streams them in 16-byte chunks and applies
//      them to all of the expert's tokens, kRowTile rows per pass, so an expert's
//      weights are read once per pass for all its tokens (from HBM once, later
//      passes mostly from L2). It writes act = swiglu(gate, up) directly.
//   3. grouped down: the same scheme over down [H, I] and the act rows.
//   4. combine: out[t] = 0 + w[t,0]*y[row(t,0)] + w[t,1]*y[row(t,1)] + ... in slot
//      order, each product and sum rounded separately (as on the CPU).
// The per-output arithmetic is small_gemm's idea (cuda_linear.cu): lane l sums
// chunks l, l+32, ... of the weight row, C products at a time, into one accumulator
// per (row, column), then a fixed butterfly. It does not depend on how many rows the
// expert has nor on the tile a row lands in, so a token's result is the same alone or
// in any batch (bit for bit).
//
// Above kMoeDeviceMaxRows tokens (prefill), the pairs are grouped on the host (one
// download of ids) into the same layout and each active expert runs cuda::matmul
// (cuBLAS above its 64-row threshold) on its gathered rows; combine as above.
#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int64_t kMoeDeviceMaxRows = 64;  // one bit per token in the expert masks
constexpr int kMoeWarps = 8;               // warps per block of the grouped kernels
constexpr int kRowTile = 8;                // rows sharing each weight chunk load
constexpr int kRouteThreads = 512;
constexpr int64_t kMoeMaxExpertsOnDevice = 3072;  // route_tokens' shared memory: 12 bytes per expert (< 48 KB)

// Where the pair list lives in scratch memory (device pointers).
struct MoeLayout {
  int* num_active;   // [1]
  int* slot_expert;  // [S] expert of each active slot (ascending)
  int* slot_first;   // [S] its first row in the sorted pair list
  int* slot_count;   // [S] its number of rows
  int* row_token;    // [P] token of each sorted row
  int* pair_row;     // [T*k] sorted row of pair (t, j); -1 for a bad expert id
};

// Exclusive prefix sum of v over the block (ints, so any order gives the same sums);
// *total gets the block's sum. smem: 32 ints.
__device__ int block_exclusive_scan(int v, int* smem, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  __syncthreads();
  if (lane == 31) smem[warp] = inc;
  __syncthreads();
  int base = 0, tot = 0;
  for (int w = 0; w < nw; ++w) {
    if (w < warp) base += smem[w];
    tot += smem[w];
  }
  *total = tot;
  return base + inc - v;
}

__global__ void __launch_bounds__(kRouteThreads)
    route_tokens_kernel(const int32_t* __restrict__ ids, int tokens, int k, int experts, MoeLayout lay,
                        unsigned* err) {
  extern __shared__ unsigned long long mask[];            // [experts]
  int* first = reinterpret_cast<int*>(mask + experts);  // [experts]
  __shared__ int scan_smem[32];
  const int pairs = tokens * k;
  for (int i = threadIdx.x; i < experts; i += blockDim.x) mask[i] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int e = ids[p];
    if (e < 0 || e >= experts) {
      atomicOr(err, kErrMoeExpertId);
      continue;
    }
    atomicOr(&mask[e], 1ull << (p / k));
  }
  __syncthreads();
  // Each thread scans a contiguous run of experts.
  const int per = (experts + blockDim.x - 1) / blockDim.x;
  const int b = min(experts, static_cast<int>(threadIdx.x) * per), end = min(experts, b + per);
  int rows = 0, active = 0;
  for (int e = b; e < end; ++e) {
    const int c = __popcll(mask[e]);
    rows += c;
    active += c > 0;
  }
  int total_rows, total_active;
  int row = block_exclusive_scan(rows, scan_smem, &total_rows);
  int slot = block_exclusive_scan(active, scan_smem, &total_active);
  for (int e = b; e < end; ++e) {
    const int c = __popcll(mask[e]);
    first[e] = row;
    if (c > 0) {
      lay.slot_expert[slot] = e;
      lay.slot_first[slot] = row;
      lay.slot_count[slot] = c;
      ++slot;
    }
    row += c;
  }
  if (threadIdx.x == 0) *lay.num_active = total_active;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int e = ids[p], t = p / k;
    if (e < 0 || e >= experts) {
      lay.pair_row[p] = -1;
      continue;
    }
    const int r = first[e] + __popcll(mask[e] & ((1ull << t) - 1));
    lay.pair_row[p] = r;
    lay.row_token[r] = t;
  }
}

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

// One grouped product. For active slot blockIdx.y (expert e, rows first..first+cnt):
//   kSwiglu: out[row, c] = swiglu(in_row · w_e[c], in_row · w_e[n_out + c]) for c < n_out
//            (w_e = gate_up [2*n_out, k]; in rows are x rows of the row's token);
//   else:    out[row, c] = in_row · w_e[c] (w_e = down [n_out, k]; in rows are the act rows).
// out rows are n_out wide. A warp owns NC output columns.
template <typename W, bool kVec, int NC, bool kSwiglu>
__global__ void __launch_bounds__(kMoeWarps * 32)
    grouped_kernel(float* __restrict__ out, int64_t n_out, const float* __restrict__ in, int64_t k,
                   const W* __restrict__ w, int64_t w_expert_stride, MoeLayout lay, float limit) {
  constexpr int C = 16 / sizeof(W);
  constexpr int NR = kSwiglu ? 2 * NC : NC;  // weight rows per warp
  // Chunks per lane whose 16-byte loads are all issued before their math: decode is
  // latency-bound, so each lane keeps U * NR loads in flight (raw, 4 registers each).
  constexpr int U = NR <= 2 ? 4 : 2;
  const int slot = blockIdx.y;
  if (slot >= *lay.num_active) return;
  const int lane = threadIdx.x & 31;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kMoeWarps + (threadIdx.x >> 5)) * NC;
  if (col0 >= n_out) return;
  const int e = lay.slot_expert[slot], first = lay.slot_first[slot], cnt = lay.slot_count[slot];
  const W* we = w + e * w_expert_stride;
  const W* wrow[NR];
  bool wok[NR];
#pragma unroll
  for (int q = 0; q < NR; ++q) {
    const int cc = q % NC;
    wok[q] = col0 + cc < n_out;
    wrow[q] = we + ((kSwiglu && q >= NC ? n_out : 0) + col0 + cc) * k;
  }
  for (int r0 = 0; r0 < cnt; r0 += kRowTile) {
    const int rows = min(kRowTile, cnt - r0);
    const float* xr[kRowTile];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
      const int row = first + r0 + min(r, rows - 1);
      xr[r] = in + static_cast<int64_t>(kSwiglu ? lay.row_token[row] : row) * k;
    }
    float acc[kRowTile][NR];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r)
#pragma unroll
      for (int q = 0; q < NR; ++q) acc[r][q] = 0.0f;
    // acc[r][q] += the C products of the chunk at c0 (lane l: chunks l, l+32, ... in order).
    auto fma_chunk = [&](const float (&wv)[NR][C], int64_t c0) {
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        if (r >= rows) break;
        float xv[C];
        if constexpr (kVec) {
#pragma unroll
          for (int e4 = 0; e4 < C; e4 += 4) {
            const float4 f = *reinterpret_cast<const float4*>(xr[r] + c0 + e4);
            xv[e4] = f.x;
            xv[e4 + 1] = f.y;
            xv[e4 + 2] = f.z;
            xv[e4 + 3] = f.w;
          }
        } else {
#pragma unroll
          for (int e1 = 0; e1 < C; ++e1) xv[e1] = c0 + e1 < k ? xr[r][c0 + e1] : 0.0f;
        }
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
            raw[u][q] = wok[q] && c0 < k ? __ldg(reinterpret_cast<const uint4*>(wrow[q] + c0)) : make_uint4(0, 0, 0, 0);
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
    for (int r = 0; r < kRowTile; ++r) {
      if (r >= rows) break;
      float v[NR];
#pragma unroll
      for (int q = 0; q < NR; ++q) v[q] = warp_reduce(acc[r][q], SumOp{});
      if (lane == 0) {
        float* o = out + static_cast<int64_t>(first + r0 + r) * n_out + col0;
#pragma unroll
        for (int cc = 0; cc < NC; ++cc) {
          if (!wok[cc]) continue;
          if constexpr (kSwiglu) {
            const float gc = fminf(v[cc], limit);
            const float uc = fminf(fmaxf(v[NC + cc], -limit), limit);
            o[cc] = gc / (1.0f + expf(-gc)) * uc;
          } else {
            o[cc] = v[cc];
          }
        }
      }
    }
  }
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

template <typename W, int NC, bool kSwiglu>
void launch_grouped_nc(bool vec, dim3 grid, cudaStream_t stream, float* out, int64_t n_out, const float* in,
                       int64_t k, const W* w, int64_t stride, const MoeLayout& lay, float limit) {
  if (vec) {
    grouped_kernel<W, true, NC, kSwiglu><<<grid, kMoeWarps * 32, 0, stream>>>(out, n_out, in, k, w, stride, lay, limit);
  } else {
    grouped_kernel<W, false, NC, kSwiglu><<<grid, kMoeWarps * 32, 0, stream>>>(out, n_out, in, k, w, stride, lay,
                                                                               limit);
  }
}

// One grouped product over `slots` possible slots; `wide`: two columns per warp (more
// rows per expert: fewer activation loads per weight element).
template <bool kSwiglu>
void launch_grouped(CudaContext& ctx, const char* op, float* out, int64_t n_out, const float* in, int64_t k,
                    const Tensor& w, int64_t slots, bool wide, const MoeLayout& lay, float limit) {
  const bool bf16 = w.dtype() == DType::kBF16;
  const int64_t c = bf16 ? 8 : 4;
  const int64_t stride = w.size(1) * w.size(2);
  const bool vec = k % c == 0 && aligned16(w.raw()) && aligned16(in);
  const int nc = wide ? 2 : 1;
  const int64_t cols_per_block = int64_t{kMoeWarps} * nc;
  dim3 grid(static_cast<unsigned>((n_out + cols_per_block - 1) / cols_per_block), static_cast<unsigned>(slots));
  if (bf16) {
    const auto* wp = w.data<__nv_bfloat16>();
    if (wide) launch_grouped_nc<__nv_bfloat16, 2, kSwiglu>(vec, grid, ctx.stream, out, n_out, in, k, wp, stride, lay, limit);
    else launch_grouped_nc<__nv_bfloat16, 1, kSwiglu>(vec, grid, ctx.stream, out, n_out, in, k, wp, stride, lay, limit);
  } else {
    const auto* wp = w.data<float>();
    if (wide) launch_grouped_nc<float, 2, kSwiglu>(vec, grid, ctx.stream, out, n_out, in, k, wp, stride, lay, limit);
    else launch_grouped_nc<float, 1, kSwiglu>(vec, grid, ctx.stream, out, n_out, in, k, wp, stride, lay, limit);
  }
  check_launch(op);
}

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

void check_experts(const CudaContext& ctx, const Tensor& gate_up, const Tensor& down) {
  check_weight(ctx, "moe_experts gate_up", gate_up);
  check_weight(ctx, "moe_experts down", down);
  if (gate_up.dim() != 3 || down.dim() != 3 || gate_up.size(1) % 2 != 0 || gate_up.size(1) == 0 ||
      gate_up.size(2) == 0 || down.size(0) != gate_up.size(0) || down.size(1) != gate_up.size(2) ||
      down.size(2) != gate_up.size(1) / 2)
    throw StatusError(invalid_argument("moe_experts: gate_up " + gate_up.describe() + " and down " +
                                       down.describe() + " are not [E, 2I, H] and [E, H, I]"));
}

void copy_sync(CudaContext& ctx, void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return;
  for (cudaError_t err : {cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream),
                          cudaStreamSynchronize(ctx.stream)}) {
    const Status s = cuda_status(err, what);
    if (!s.is_ok()) throw StatusError(s);
  }
}

}  // namespace

void moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const Tensor& gate_up, const Tensor& down, float swiglu_limit) {
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

  // Scratch: the layout's ints, then act [P, I] and y [P, H] (f32), 256-byte aligned.
  const int64_t slots = std::min(experts, pairs);
  const int64_t n_ints = 1 + 3 * slots + 2 * pairs;
  const int64_t act_off = round_up(n_ints * 4, 256), y_off = act_off + round_up(pairs * idim * 4, 256);
  Tensor scratch = ctx.scratch(std::max<int64_t>(1, y_off + pairs * h * 4));
  char* base = static_cast<char*>(scratch.raw());
  MoeLayout lay;
  lay.num_active = reinterpret_cast<int*>(base);
  lay.slot_expert = lay.num_active + 1;
  lay.slot_first = lay.slot_expert + slots;
  lay.slot_count = lay.slot_first + slots;
  lay.row_token = lay.slot_count + slots;
  lay.pair_row = lay.row_token + pairs;
  float* act = reinterpret_cast<float*>(base + act_off);
  float* y = reinterpret_cast<float*>(base + y_off);

  // (k = 0 routes nothing: only combine runs, writing zeros.)
  if (pairs > 0 && tokens <= std::min(kMoeDeviceMaxRows, ctx.exact_rows) && experts <= kMoeMaxExpertsOnDevice) {
    const size_t smem = static_cast<size_t>(experts) * (sizeof(unsigned long long) + sizeof(int));
    route_tokens_kernel<<<1, kRouteThreads, smem, ctx.stream>>>(ids.data<int32_t>(), static_cast<int>(tokens),
                                                               static_cast<int>(k), static_cast<int>(experts), lay,
                                                               ctx.error_word);
    check_launch("moe_experts (routing)");
    const bool wide = tokens > 8;
    launch_grouped<true>(ctx, "moe_experts (gate_up)", act, idim, x.data<float>(), h, gate_up, slots, wide, lay,
                         swiglu_limit);
    launch_grouped<false>(ctx, "moe_experts (down)", y, h, act, idim, down, slots, wide, lay, swiglu_limit);
  } else if (pairs > 0) {
    // Prefill: group on the host into the same layout, then per-expert matmuls.
    std::vector<int32_t> id(static_cast<size_t>(pairs));
    copy_sync(ctx, id.data(), ids.raw(), id.size() * 4, "moe_experts: routing download");
    std::vector<int32_t> host(static_cast<size_t>(n_ints), 0);
    std::vector<int64_t> count(static_cast<size_t>(experts), 0), first(static_cast<size_t>(experts), 0);
    for (int64_t p = 0; p < pairs; ++p) {
      if (id[p] < 0 || id[p] >= experts)
        throw StatusError(out_of_range("moe_experts: expert id " + std::to_string(id[p]) + " at row " +
                                       std::to_string(p / k) + " outside [0, " + std::to_string(experts) + ")"));
      ++count[id[p]];
    }
    int32_t* h_expert = host.data() + 1;
    int32_t* h_first = h_expert + slots;
    int32_t* h_count = h_first + slots;
    int32_t* h_token = h_count + slots;
    int32_t* h_pair = h_token + pairs;
    int64_t row = 0, active = 0;
    for (int64_t e = 0; e < experts; ++e) {
      first[e] = row;
      if (count[e] > 0) {
        h_expert[active] = static_cast<int32_t>(e);
        h_first[active] = static_cast<int32_t>(row);
        h_count[active] = static_cast<int32_t>(count[e]);
        ++active;
      }
      row += count[e];
    }
    host[0] = static_cast<int32_t>(active);
    for (int64_t p = 0; p < pairs; ++p) {  // token order within each expert
      const int64_t r = first[id[p]]++;
      h_pair[p] = static_cast<int32_t>(r);
      h_token[r] = static_cast<int32_t>(p / k);
    }
    copy_sync(ctx, base, host.data(), host.size() * 4, "moe_experts: pair list upload");
    for (int64_t s = 0; s < active; ++s) {
      const int64_t e = h_expert[s], r0 = h_first[s], n = h_count[s];
      const Tensor rows = Tensor::view_of(lay.row_token + r0, {n}, DType::kI32, x.device());
      Tensor gathered = Tensor::on_storage(ctx.scratch(n * h * 4).storage(), 0, {n, h}, DType::kF32);
      gather_rows(ctx, gathered, x, rows);
      Tensor gu = Tensor::on_storage(ctx.scratch(n * two_i * 4).storage(), 0, {n, two_i}, DType::kF32);
      matmul(ctx, gu, gathered, gate_up.select(0, e), false);
      Tensor a = Tensor::view_of(act + r0 * idim, {n, idim}, DType::kF32, x.device());
      swiglu(ctx, a, gu, swiglu_limit);
      Tensor ye = Tensor::view_of(y + r0 * h, {n, h}, DType::kF32, x.device());
      matmul(ctx, ye, a, down.select(0, e), false);
    }
  }
  combine_kernel<<<grid_1d(tokens * h), 256, 0, ctx.stream>>>(out.data<float>(), y, weights.data<float>(),
                                                              lay.pair_row, tokens, static_cast<int>(k), h);
  check_launch("moe_experts (combine)");
}

}  // namespace tf::cuda
