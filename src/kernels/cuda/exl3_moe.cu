// The routed EXL3 experts of a MoE layer in one call, grouped on the device
// (CudaOps::moe_experts_exl3, up to 64 tokens; no host sync, so a
// decode step can be captured in a CUDA graph).
//
// The layer's experts are uploaded once (exl3_upload_experts): their tensors move to
// the GPU and a device table holds every expert's trellis / suh / svh / bias pointers
// per projection. Per call, seven launches:
//   1. route (one warp): a 64-bit token mask per expert; active experts get slots in
//      ascending id, each (token, expert) pair a row (rows of an expert in token order);
//   2. rotate: every row's x * suh (gate and up: their own suh) -> FWHT -> hi/lo fragments;
//   3-4. grouped GEMV gate, up: grid (128-column blocks x kMoeSplits, expert slots);
//      each warp decodes a column of tiles once for all of the expert's rows (up to 8
//      row tiles of 8 per MMA pass; exl3_gemv.cuh);
//   5. gate/up epilogue: sum splits, FWHT, * svh (+ bias), SwiGLU, then the down
//      projection's input rotation (act * suh_down, FWHT) straight into its fragments
//      (a 128-column block of act is exactly one Hadamard block of down's input);
//   6. grouped GEMV down;
//   7. combine: out[t] = 0 + w[t,0] * y(t,0) + w[t,1] * y(t,1) + ... where y(t,j) is the
//      down epilogue (FWHT, * svh, + bias) of the pair's row, in j order, each product
//      and sum rounded on its own (the CPU's scatter_add order).
// A row's arithmetic never depends on the other rows: the k-split count is fixed
// (kMoeSplits) and MMA columns are independent, so a token gives the same bits alone
// or in any batch.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/exl3_launch.cuh"

namespace tf::cuda {
namespace {

using exl3::kGemvWarps;

constexpr int64_t kMoeMaxTokens = 64;  // one bit per token in the expert masks
constexpr int kMoeSplits = 4;          // k-splits of every grouped GEMV (fixed: row independence)
constexpr int kGate = 0, kUp = 1, kDown = 2;

struct ExpertPtrs {
  const uint32_t* trellis[3];
  const __half* suh[3];
  const __half* svh[3];
  const __half* bias[3];  // null when absent
};

// What exl3_upload_experts keeps in Exl3ExpertTable::backend_state.
struct DeviceTable {
  Tensor ptrs;  // ExpertPtrs [E] on the device
  int device = -1;
  int64_t experts = 0;
};

struct Layout {
  int* num_active;   // [1]
  int* num_rows;     // [1]
  int* slot_expert;  // [S]
  int* slot_first;   // [S]
  int* slot_count;   // [S]
  int* row_token;    // [P]
  int* row_expert;   // [P]
  int* pair_row;     // [T*k], -1 for a bad expert id
};

// One warp. smem: experts masks and first rows.
__global__ void __launch_bounds__(32)
    route_kernel(const int32_t* __restrict__ ids, int tokens, int k, int experts, Layout lay, unsigned* err) {
  extern __shared__ unsigned long long mask[];          // [experts]
  int* first = reinterpret_cast<int*>(mask + experts);  // [experts]
  const int lane = threadIdx.x;
  const int pairs = tokens * k;
  for (int i = lane; i < experts; i += 32) mask[i] = 0;
  __syncwarp();
  for (int p = lane; p < pairs; p += 32) {
    const int e = ids[p];
    if (e < 0 || e >= experts) {
      atomicOr(err, kErrMoeExpertId);
      continue;
    }
    atomicOr(&mask[e], 1ull << (p / k));
  }
  __syncwarp();
  const int per = (experts + 31) / 32, b = min(experts, lane * per), end = min(experts, b + per);
  int rows = 0, active = 0;
  for (int e = b; e < end; ++e) {
    const int c = __popcll(mask[e]);
    rows += c;
    active += c > 0;
  }
  int row = rows, slot = active;  // inclusive scans
  for (int o = 1; o < 32; o <<= 1) {
    const int r = __shfl_up_sync(0xffffffffu, row, o), s = __shfl_up_sync(0xffffffffu, slot, o);
    if (lane >= o) {
      row += r;
      slot += s;
    }
  }
  if (lane == 31) {
    *lay.num_rows = row;
    *lay.num_active = slot;
  }
  row -= rows;
  slot -= active;
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
  __syncwarp();
  for (int p = lane; p < pairs; p += 32) {
    const int e = ids[p], t = p / k;
    if (e < 0 || e >= experts) {
      lay.pair_row[p] = -1;
      continue;
    }
    const int r = first[e] + __popcll(mask[e] & ((1ull << t) - 1ull));
    lay.pair_row[p] = r;
    lay.row_token[r] = t;
    lay.row_expert[r] = e;
  }
}

// grid (k_pad/128, P, 2): xr[proj][row] = fragments of FWHT(x[token] * suh_proj[expert]).
__global__ void __launch_bounds__(128)
    rotate_rows_kernel(uint4* __restrict__ xr_gate, uint4* __restrict__ xr_up, const float* __restrict__ x,
                       int64_t h, int64_t k_pad, const ExpertPtrs* __restrict__ table, Layout lay) {
  __shared__ float smem[128];
  const int row = blockIdx.y;
  if (row >= *lay.num_rows) return;  // block-uniform
  const int proj = blockIdx.z;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const int t = lay.row_token[row], e = lay.row_expert[row];
  const __half* suh = table[e].suh[proj];
  const float v = c < h ? __fmul_rn(x[static_cast<int64_t>(t) * h + c], __half2float(suh[c])) : 0.0f;
  const float r = exl3::block_fwht128(v, smem);
  exl3::store_fragment_value((proj == kGate ? xr_gate : xr_up) + static_cast<int64_t>(row) * (k_pad / 16) * 4,
                             static_cast<int>(c), r);
}

// grid (n_blocks * kMoeSplits, slots): partial[split][row][n] for the rows of each slot.
template <int K, int CB, int RT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    grouped_gemv_kernel(float* __restrict__ partial, const ExpertPtrs* __restrict__ table, int proj,
                        const uint4* __restrict__ xr, int64_t tiles_k, int64_t tiles_n, int per, int64_t prows,
                        Layout lay) {
  const int slot = blockIdx.y;
  if (slot >= *lay.num_active) return;
  const int split = blockIdx.x % kMoeSplits, nb = blockIdx.x / kMoeSplits;
  const int e = lay.slot_expert[slot], first = lay.slot_first[slot], cnt = lay.slot_count[slot];
  const int64_t tn = static_cast<int64_t>(nb) * kGemvWarps + (threadIdx.x >> 5);
  const int64_t tk0 = static_cast<int64_t>(split) * per;
  const int ntiles = static_cast<int>(min(static_cast<int64_t>(per), tiles_k - tk0));
  if (ntiles <= 0) return;  // block-uniform
  const int64_t tile_words = 8 * K, n = tiles_n * 16, xs = tiles_k * 4;
  float acc[RT][4];
  exl3::gemv_warp<K, CB, RT>(table[e].trellis[proj] + (tk0 * tiles_n + tn) * tile_words, tiles_n * tile_words,
                             ntiles, xr + first * xs + tk0 * 4, xs, cnt, acc);
  exl3::store_partial<RT>(partial + (split * prows + first) * n, n, tn * 16, cnt, acc);
}

template <int K, int CB>
struct GroupedKernels {
  static void launch(bool wide, dim3 grid, cudaStream_t s, float* part, const ExpertPtrs* table, int proj,
                     const uint4* xr, int64_t tk, int64_t tn, int per, int64_t prows, const Layout& lay) {
    if (wide) grouped_gemv_kernel<K, CB, 8><<<grid, kGemvWarps * 32, 0, s>>>(part, table, proj, xr, tk, tn, per, prows, lay);
    else grouped_gemv_kernel<K, CB, 1><<<grid, kGemvWarps * 32, 0, s>>>(part, table, proj, xr, tk, tn, per, prows, lay);
  }
};

// Sum of the splits, FWHT, * svh (+ bias) of row `row`, column c of a projection.
__device__ __forceinline__ float finish(const float* __restrict__ partial, int64_t prows, int64_t n, int row,
                                        int64_t c, const __half* __restrict__ svh, const __half* __restrict__ bias,
                                        float* smem) {
  float v = 0.0f;
#pragma unroll
  for (int s = 0; s < kMoeSplits; ++s) v = __fadd_rn(v, partial[(s * prows + row) * n + c]);
  v = exl3::block_fwht128(v, smem);
  v = __fmul_rn(v, __half2float(svh[c]));
  return bias ? __fadd_rn(v, __half2float(bias[c])) : v;
}

// grid (i_pad/128, P): act = swiglu(gate, up) (0 beyond `inter`), then down's input
// fragments FWHT(act * suh_down).
__global__ void __launch_bounds__(128)
    act_kernel(uint4* __restrict__ xr_down, const float* __restrict__ pg, const float* __restrict__ pu,
               int64_t prows, int64_t i_pad, int64_t inter, const ExpertPtrs* __restrict__ table, Layout lay,
               float limit) {
  __shared__ float smem[128];
  const int row = blockIdx.y;
  if (row >= *lay.num_rows) return;
  const int e = lay.row_expert[row];
  const ExpertPtrs& p = table[e];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const float g = finish(pg, prows, i_pad, row, c, p.svh[kGate], p.bias[kGate], smem);
  const float u = finish(pu, prows, i_pad, row, c, p.svh[kUp], p.bias[kUp], smem);
  float a = 0.0f;
  if (c < inter) {
    // As the CPU's swiglu: silu(min(gate, limit)) * clamp(up, -limit, limit).
    const float gc = fminf(g, limit);
    const float uc = fminf(fmaxf(u, -limit), limit);
    a = gc / (1.0f + expf(-gc)) * uc;
  }
  const float v = c < inter ? __fmul_rn(a, __half2float(p.suh[kDown][c])) : 0.0f;
  const float r = exl3::block_fwht128(v, smem);
  exl3::store_fragment_value(xr_down + static_cast<int64_t>(row) * (i_pad / 16) * 4, static_cast<int>(c), r);
}

// grid (h_pad/128, T): out[t, c] = sum_j w[t, j] * y(row(t, j))[c] in j order.
__global__ void __launch_bounds__(128)
    combine_kernel(float* __restrict__ out, const float* __restrict__ pd, int64_t prows, int64_t h_pad, int64_t h,
                   const float* __restrict__ w, int k, const ExpertPtrs* __restrict__ table, Layout lay) {
  __shared__ float smem[128];
  const int t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int row = lay.pair_row[t * k + j];
    if (row < 0) continue;  // block-uniform
    const ExpertPtrs& p = table[lay.row_expert[row]];
    const float y = finish(pd, prows, h_pad, row, c, p.svh[kDown], p.bias[kDown], smem);
    acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], y));
  }
  if (c < h) out[static_cast<int64_t>(t) * h + c] = acc;
}

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

const DeviceTable& device_table(const CudaContext& ctx, const Exl3ExpertTable& ex) {
  const auto* dt = static_cast<const DeviceTable*>(ex.backend_state.get());
  if (!dt || dt->device != ctx.device || dt->experts != ex.num_experts())
    throw StatusError(invalid_argument("moe_experts_exl3: the experts were not uploaded to cuda:" +
                                       std::to_string(ctx.device) + " (Ops::upload_exl3_experts)"));
  return *dt;
}

}  // namespace

Status exl3_upload_experts(CudaContext& ctx, Exl3ExpertTable& ex) {
  TF_RETURN_IF_ERROR(check_exl3_expert_table(ex, "EXL3 experts"));
  const Exl3Weight& g0 = ex.gate[0];
  const Exl3Weight& d0 = ex.down[0];
  if (g0.out_features() != d0.in_features() || ex.up[0].out_features() != g0.out_features() ||
      ex.up[0].in_features() != g0.in_features() || d0.out_features() != g0.in_features())
    return invalid_argument("EXL3 experts: gate " + g0.trellis.describe() + ", up " + ex.up[0].trellis.describe() +
                            " and down " + d0.trellis.describe() + " do not chain (padded widths)");
  auto to_dev = [&](Tensor& t) -> Status {
    if (t.is_null() || (t.device().kind == DeviceKind::kCuda && t.device().index == ctx.device)) return Status::ok();
    auto storage = ctx.alloc->allocate(static_cast<size_t>(t.nbytes()));
    if (!storage) return storage.status();
    Tensor d = Tensor::on_storage(*storage, 0, t.shape(), t.dtype());
    TF_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d.raw(), t.raw(), t.nbytes(), cudaMemcpyDefault, ctx.stream),
                                   "EXL3 expert upload"));
    TF_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(ctx.stream), "EXL3 expert upload"));
    t = d;
    return Status::ok();
  };
  const int64_t e = ex.num_experts();
  std::vector<ExpertPtrs> host(static_cast<size_t>(e));
  std::vector<Exl3Weight>* sets[3] = {&ex.gate, &ex.up, &ex.down};
  for (int p = 0; p < 3; ++p)
    for (int64_t i = 0; i < e; ++i) {
      Exl3Weight& w = (*sets[p])[i];
      for (Tensor* t : {&w.trellis, &w.suh, &w.svh, &w.bias}) TF_RETURN_IF_ERROR(to_dev(*t));
      host[i].trellis[p] = w.trellis.data<uint32_t>();
      host[i].suh[p] = static_cast<const __half*>(w.suh.raw());
      host[i].svh[p] = static_cast<const __half*>(w.svh.raw());
      host[i].bias[p] = w.bias.is_null() ? nullptr : static_cast<const __half*>(w.bias.raw());
    }
  auto dt = std::make_shared<DeviceTable>();
  auto storage = ctx.alloc->allocate(host.size() * sizeof(ExpertPtrs));
  if (!storage) return storage.status();
  dt->ptrs = Tensor::on_storage(*storage, 0, {static_cast<int64_t>(host.size() * sizeof(ExpertPtrs))}, DType::kU8);
  TF_RETURN_IF_ERROR(cuda_status(cudaMemcpy(dt->ptrs.raw(), host.data(), host.size() * sizeof(ExpertPtrs),
                                            cudaMemcpyHostToDevice),
                                 "EXL3 expert table upload"));
  dt->device = ctx.device;
  dt->experts = e;
  ex.backend_state = std::move(dt);
  return Status::ok();
}

bool exl3_moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Exl3ExpertTable& ex, float swiglu_limit) {
  const int64_t h = ex.hidden, inter = ex.intermediate, experts = ex.num_experts();
  check_dev(ctx, "moe_experts_exl3 x", x, DType::kF32);
  if (x.dim() != 2 || x.size(1) != h)
    throw StatusError(invalid_argument("moe_experts_exl3: x " + x.describe() + " is not [T, " + std::to_string(h) + "]"));
  const int64_t tokens = x.size(0);
  // Up to 64 tokens whatever ctx.exact_rows: these kernels already run on tensor cores and
  // keep rows independent, there is no faster inexact path to hand over to.
  if (tokens > kMoeMaxTokens) return false;
  check_dev(ctx, "moe_experts_exl3 ids", ids, DType::kI32);
  if (ids.dim() != 2 || ids.size(0) != tokens)
    throw StatusError(invalid_argument("moe_experts_exl3: ids " + ids.describe() + " is not [T, k]"));
  const int64_t k = ids.size(1), pairs = tokens * k;
  check_dev(ctx, "moe_experts_exl3 weights", weights, DType::kF32, pairs);
  check_dev(ctx, "moe_experts_exl3 out", out, DType::kF32, tokens * h);
  if (tokens == 0) return true;
  const DeviceTable& dt = device_table(ctx, ex);
  const auto* table = static_cast<const ExpertPtrs*>(dt.ptrs.raw());
  const Exl3Weight &g0 = ex.gate[0], &u0 = ex.up[0], &d0 = ex.down[0];
  const int64_t h_pad = g0.in_features(), i_pad = g0.out_features();
  if (experts * 12 > 48 * 1024)
    throw StatusError(invalid_argument("moe_experts_exl3: " + std::to_string(experts) + " experts (at most 4096)"));

  // Scratch: layout ints, then xr gate/up [P, h_pad*4 B], xr down [P, i_pad*4 B],
  // partials gate/up [S, P, i_pad], down [S, P, h_pad] (f32).
  const int64_t slots = std::min(experts, pairs);
  const int64_t n_ints = 2 + 3 * slots + 3 * pairs;
  int64_t off = round_up(n_ints * 4, 256);
  const int64_t xg_off = off;
  off += round_up(pairs * h_pad * 4, 256);
  const int64_t xu_off = off;
  off += round_up(pairs * h_pad * 4, 256);
  const int64_t xd_off = off;
  off += round_up(pairs * i_pad * 4, 256);
  const int64_t pg_off = off;
  off += round_up(kMoeSplits * pairs * i_pad * 4, 256);
  const int64_t pu_off = off;
  off += round_up(kMoeSplits * pairs * i_pad * 4, 256);
  const int64_t pd_off = off;
  off += round_up(kMoeSplits * pairs * h_pad * 4, 256);
  Tensor scratch = ctx.scratch(off);
  char* base = static_cast<char*>(scratch.raw());
  Layout lay;
  lay.num_active = reinterpret_cast<int*>(base);
  lay.num_rows = lay.num_active + 1;
  lay.slot_expert = lay.num_rows + 1;
  lay.slot_first = lay.slot_expert + slots;
  lay.slot_count = lay.slot_first + slots;
  lay.row_token = lay.slot_count + slots;
  lay.row_expert = lay.row_token + pairs;
  lay.pair_row = lay.row_expert + pairs;
  auto* xg = reinterpret_cast<uint4*>(base + xg_off);
  auto* xu = reinterpret_cast<uint4*>(base + xu_off);
  auto* xd = reinterpret_cast<uint4*>(base + xd_off);
  auto* pg = reinterpret_cast<float*>(base + pg_off);
  auto* pu = reinterpret_cast<float*>(base + pu_off);
  auto* pd = reinterpret_cast<float*>(base + pd_off);

  const size_t smem = static_cast<size_t>(experts) * (sizeof(unsigned long long) + sizeof(int));
  route_kernel<<<1, 32, smem, ctx.stream>>>(ids.data<int32_t>(), static_cast<int>(tokens), static_cast<int>(k),
                                           static_cast<int>(experts), lay, ctx.error_word);
  check_launch("moe_experts_exl3 (route)");
  rotate_rows_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(pairs), 2), 128, 0,
                       ctx.stream>>>(xg, xu, x.data<float>(), h, h_pad, table, lay);
  check_launch("moe_experts_exl3 (rotate)");
  const bool wide = tokens > 8;
  auto gemv = [&](const Exl3Weight& w, int proj, const uint4* xr, float* part) {
    const int64_t tk = w.trellis.size(0), tn = w.trellis.size(1);
    const int per = static_cast<int>((tk + kMoeSplits - 1) / kMoeSplits);
    const dim3 grid(static_cast<unsigned>(tn / kGemvWarps * kMoeSplits), static_cast<unsigned>(slots));
    exl3_dispatch<GroupedKernels>(w.bits, w.codebook, [&](auto kernels) {
      decltype(kernels)::launch(wide, grid, ctx.stream, part, table, proj, xr, tk, tn, per, pairs, lay);
    });
    check_launch("moe_experts_exl3 (grouped gemv)");
  };
  gemv(g0, kGate, xg, pg);
  gemv(u0, kUp, xu, pu);
  act_kernel<<<dim3(static_cast<unsigned>(i_pad / 128), static_cast<unsigned>(pairs)), 128, 0, ctx.stream>>>(
      xd, pg, pu, pairs, i_pad, inter, table, lay, swiglu_limit);
  check_launch("moe_experts_exl3 (act)");
  gemv(d0, kDown, xd, pd);
  combine_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(tokens)), 128, 0, ctx.stream>>>(
      out.data<float>(), pd, pairs, h_pad, h, weights.data<float>(), static_cast<int>(k), table, lay);
  check_launch("moe_experts_exl3 (combine)");
  return true;
}

}  // namespace tf::cuda
