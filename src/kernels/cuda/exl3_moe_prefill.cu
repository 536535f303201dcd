// Prefill-sized EXL3 MoE calls: each active expert's W_hat is decoded once per call into
// fp16 scratch and multiplied by cuBLAS, instead of being decoded once per 64 of its rows
// by the grouped kernels (whose activations are re-read from L2 for every 16 output
// columns). Issue #8's "decode to BF16 then GEMM" prefill path, in fp16 because W_hat's
// values are fp16 (the codebooks produce them) and bf16 would round them.
//
// After the device grouping (moe_grouping.cuh) and one download of its slot table, the
// active experts go in batches (at most kBatchExperts experts, kBatchRows rows unless one
// expert has more), each:
//   1. rotate: every row's x * suh (gate and up: their own suh), FWHT, split into fp16
//      hi + lo (exl3_moe_rows.cuh HiLoRowSink), stored as two interleaved rows;
//   2. decode gate and up W_hat [h_pad, i_pad] of the batch's experts;
//   3. one grouped GEMM for gate and up: per expert [2 rows, h_pad] x W_hat, f32 out, so
//      hi * W + lo * W is x * W_hat within ~2^-22 as in the grouped kernels;
//   4. act: hi + lo products summed, FWHT, * svh (+ bias), SwiGLU, down's rotated input
//      as hi / lo rows again;
//   5. decode down W_hat (into the gate/up W_hat's scratch), grouped GEMM down;
//   6. finish: FWHT, * svh (+ bias) into y [row, h].
// Then combine: out[t] = sum_j w[t, j] * y(row(t, j)) in j order (combine_kernel's sum).
// The arithmetic around the products is the grouped body's; the products' f32 sums come
// in cuBLAS's order, so a token's result agrees with the decode kernels within f32
// rounding, not bit for bit, and may depend on how many rows its expert has in the call.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cublas_grouped_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/exl3_launch.cuh"
#include "kernels/cuda/exl3_moe_prefill.h"
#include "kernels/cuda/exl3_moe_rows.cuh"
#include "kernels/cuda/moe_grouping.cuh"

namespace tf::cuda {
namespace {

using exl3::ExpertPtrs;
using exl3::HiLoProducts;
using exl3::HiLoRowSink;
constexpr int kGate = exl3::kProjGate, kUp = exl3::kProjUp, kDown = exl3::kProjDown;

// Batch bounds: W_hat scratch is kBatchExperts x 2 x h_pad x i_pad fp16 (268 MB for
// GLM-5.3-Flash's experts), the row buffers ~72 KB per row (147 MB at 2,048 rows).
constexpr int kBatchExperts = 8;
constexpr int64_t kBatchRows = 2048;

// grid (ceil(tiles / 8), experts of the batch), 256 threads, a warp per tile: W_hat of
// projection `proj` of the expert in slot s0 + blockIdx.y, into out + blockIdx.y * k * n.
template <int K, int CB>
__global__ void __launch_bounds__(256)
    decode_batch_kernel(__half* __restrict__ out, const ExpertPtrs* __restrict__ table, MoeGroups lay, int s0,
                        int proj, int64_t tiles_k, int64_t tiles_n) {
  const int64_t tile = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (tile >= tiles_k * tiles_n) return;  // warp-uniform
  const int e = lay.slot_expert[s0 + blockIdx.y];
  const int64_t n = tiles_n * 16;
  exl3::decode_tile_to_w_hat<K, CB>(out + blockIdx.y * tiles_k * 16 * n,
                                    table[e].trellis[proj] + tile * (8 * K), tile / tiles_n, tile % tiles_n,
                                    n, static_cast<int>(threadIdx.x & 31));
}

template <int K, int CB>
struct DecodeKernels {
  static void launch(dim3 grid, cudaStream_t s, __half* out, const ExpertPtrs* table, const MoeGroups& lay,
                     int s0, int proj, int64_t tk, int64_t tn) {
    decode_batch_kernel<K, CB><<<grid, 256, 0, s>>>(out, table, lay, s0, proj, tk, tn);
  }
};

// grid (h_pad/128, rows), 128 threads, row r = row0 + blockIdx.y: y[r, c] = the down
// projection's finish (FWHT, * svh, + bias) for c < h.
__global__ void __launch_bounds__(128)
    finish_rows_kernel(float* __restrict__ y, HiLoProducts down, int64_t h_pad, int64_t h, int row0,
                       const ExpertPtrs* __restrict__ table, MoeGroups lay) {
  __shared__ float smem[128];
  const int row = row0 + static_cast<int>(blockIdx.y);
  if (row >= *lay.num_rows) return;  // block-uniform
  const ExpertPtrs& p = table[lay.row_expert[row]];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const float v = exl3::finish(down, h_pad, row, c, p.svh[kDown], p.bias[kDown], smem);
  if (c < h) y[static_cast<int64_t>(row) * h + c] = v;
}

// grid (ceil(h/128), T), 128 threads: out[t, c] = 0 + w[t,0] * y(row(t,0)) + ... in j order,
// each product and sum rounded on its own (combine_kernel's sum); pairs without a row
// (an id outside [0, E)) add nothing.
__global__ void __launch_bounds__(128)
    combine_rows_kernel(float* __restrict__ out, const float* __restrict__ y, int64_t h,
                        const float* __restrict__ w, int k, MoeGroups lay) {
  const int t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  if (c >= h) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int row = lay.pair_row[t * k + j];
    if (row < 0) continue;
    acc = __fadd_rn(acc, __fmul_rn(w[t * k + j], y[static_cast<int64_t>(row) * h + c]));
  }
  out[static_cast<int64_t>(t) * h + c] = acc;
}

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// One expert's products C [n2, n_out] f32 = rows [n2, k] fp16 · W_hat [k, n_out] fp16 (all
// row-major; n2 = its hi and lo rows), in cuBLAS's column-major terms:
// C^T [n_out, n2] = W_hat^T [n_out, k] · rows^T [k, n2].
GemmProblem product(const __half* w_hat, const __half* rows, float* c, int k, int n_out, int n2) {
  return GemmProblem{w_hat, rows, c, n_out, n2, k, n_out, k, n_out};
}

// Active experts in slot order, cut into batches.
struct Batch {
  int s0 = 0, s1 = 0;  // slots [s0, s1)
  int r0 = 0, r1 = 0;  // rows [r0, r1)
};

std::vector<Batch> plan_batches(int active, const int* first, const int* count) {
  std::vector<Batch> out;
  for (int s = 0; s < active; ++s) {
    if (count[s] == 0) continue;
    Batch* b = out.empty() ? nullptr : &out.back();
    if (b && b->s1 == s && b->s1 - b->s0 < kBatchExperts && b->r1 - b->r0 + count[s] <= kBatchRows) {
      b->s1 = s + 1;
      b->r1 = first[s] + count[s];
    } else {
      out.push_back({s, s + 1, first[s], first[s] + count[s]});
    }
  }
  return out;
}

thread_local const char* g_last_path = "none";

void decode(CudaContext& ctx, __half* out, const Exl3Weight& w, const ExpertPtrs* table, const MoeGroups& lay,
            const Batch& b, int proj) {
  const int64_t tk = w.trellis.size(0), tn = w.trellis.size(1);
  const dim3 grid(static_cast<unsigned>((tk * tn + 7) / 8), static_cast<unsigned>(b.s1 - b.s0));
  exl3_dispatch<DecodeKernels>(w.bits, w.codebook, [&](auto kernels) {
    decltype(kernels)::launch(grid, ctx.stream, out, table, lay, b.s0, proj, tk, tn);
  });
  check_launch("moe_experts_exl3 (prefill W_hat decode)");
}

}  // namespace

const char* exl3_moe_prefill_last_path() { return g_last_path; }

bool exl3_moe_prefill(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids,
                      const Tensor& weights, const Exl3ExpertTable& ex, const ExpertPtrs* table,
                      float swiglu_limit) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (ctx.capturing || cudaStreamIsCapturing(ctx.stream, &cap) != cudaSuccess ||
      cap != cudaStreamCaptureStatusNone) {
    g_last_path = "capturing";
    return false;
  }
  const int64_t tokens = x.size(0), k = ids.size(1), pairs = tokens * k, experts = ex.num_experts();
  const int64_t h = ex.hidden, inter = ex.intermediate;
  const Exl3Weight &g0 = ex.gate[0], &u0 = ex.up[0], &d0 = ex.down[0];
  const int64_t h_pad = g0.in_features(), i_pad = g0.out_features();

  // The grouping and its slot table on the host (the GEMM sizes).
  Tensor groups = ctx.scratch(moe_groups_ints(experts, pairs, 0) * 4);
  const MoeGroups lay = moe_groups_at(static_cast<int*>(groups.raw()), experts, pairs, 0);
  launch_moe_grouping(ids.data<int32_t>(), tokens, k, experts, 0, lay, ctx.error_word, ctx.stream);
  check_launch("moe_experts_exl3 (prefill route)");
  const int64_t slots = moe_max_slots(experts, pairs);
  std::vector<int> table_h(static_cast<size_t>(1 + 3 * slots));  // num_active, then slot_expert/first/count
  for (const cudaError_t e :
       {cudaMemcpyAsync(table_h.data(), lay.num_active, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream),
        cudaMemcpyAsync(table_h.data() + 1, lay.slot_expert, 3 * slots * sizeof(int), cudaMemcpyDeviceToHost,
                        ctx.stream),
        cudaStreamSynchronize(ctx.stream)}) {
    const Status s = cuda_status(e, "moe_experts_exl3: slot table download");
    if (!s.is_ok()) throw StatusError(s);
  }
  const int active = std::clamp(table_h[0], 0, static_cast<int>(slots));
  const int* s_first = table_h.data() + 1 + slots;
  const int* s_count = s_first + slots;
  const std::vector<Batch> batches = plan_batches(active, s_first, s_count);

  // Scratch: W_hat of a batch (down's reuses gate/up's), the batch's row buffers, y.
  int max_experts = 0, max_rows = 0;
  for (const Batch& b : batches) {
    max_experts = std::max(max_experts, b.s1 - b.s0);
    max_rows = std::max(max_rows, b.r1 - b.r0);
  }
  const int64_t w_bytes = round_up(int64_t{max_experts} * 2 * h_pad * i_pad * 2, 256);
  const int64_t x_bytes = round_up(int64_t{max_rows} * 2 * h_pad * 2, 256);  // hi/lo rows, per projection
  const int64_t gu_bytes =
      round_up(int64_t{max_rows} * 2 * i_pad * 4, 256);  // hi/lo products, per projection
  const int64_t xd_bytes = round_up(int64_t{max_rows} * 2 * i_pad * 2, 256);
  const int64_t y_bytes = round_up(pairs * h * 4, 256);
  Tensor scratch = ctx.scratch(w_bytes + 2 * x_bytes + 2 * gu_bytes + xd_bytes + y_bytes);
  char* base = static_cast<char*>(scratch.raw());
  auto* wh = reinterpret_cast<__half*>(base);
  auto* xg = reinterpret_cast<__half*>(base + w_bytes);
  auto* xu = reinterpret_cast<__half*>(base + w_bytes + x_bytes);
  auto* pd = reinterpret_cast<float*>(xg);  // down's hi/lo products [2 rows, h_pad] f32: xg and xu's bytes
  auto* pg = reinterpret_cast<float*>(base + w_bytes + 2 * x_bytes);
  auto* pu = reinterpret_cast<float*>(base + w_bytes + 2 * x_bytes + gu_bytes);
  auto* xd = reinterpret_cast<__half*>(base + w_bytes + 2 * x_bytes + 2 * gu_bytes);
  auto* y = reinterpret_cast<float*>(base + w_bytes + 2 * x_bytes + 2 * gu_bytes + xd_bytes);

  bool all_grouped = true;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const int hp = static_cast<int>(h_pad), ip = static_cast<int>(i_pad);
  for (const Batch& b : batches) {
    const int nb = b.s1 - b.s0, rows = b.r1 - b.r0;
    exl3::rotate_rows_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(rows), 2), 128,
                               0, ctx.stream>>>(HiLoRowSink{xg, h_pad, b.r0}, HiLoRowSink{xu, h_pad, b.r0},
                                                x.data<float>(), h, b.r0, table, lay);
    check_launch("moe_experts_exl3 (prefill rotate)");
    decode(ctx, wh, g0, table, lay, b, kGate);
    decode(ctx, wh + int64_t{nb} * h_pad * i_pad, u0, table, lay, b, kUp);
    std::vector<GemmProblem> gu(static_cast<size_t>(2 * nb));
    for (int i = 0; i < nb; ++i) {
      const int s = b.s0 + i, r = s_first[s] - b.r0, n2 = 2 * s_count[s];
      gu[i] = product(wh + int64_t{i} * h_pad * i_pad, xg + int64_t{2} * r * h_pad,
                      pg + int64_t{2} * r * i_pad, hp, ip, n2);
      gu[nb + i] = product(wh + int64_t{nb + i} * h_pad * i_pad, xu + int64_t{2} * r * h_pad,
                           pu + int64_t{2} * r * i_pad, hp, ip, n2);
    }
    bool grouped = true;
    st = run_gemm_problems(ctx, CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16F, CUDA_R_32F, gu, &grouped);
    all_grouped = all_grouped && grouped;
    if (st != CUBLAS_STATUS_SUCCESS) break;
    exl3::act_kernel<<<dim3(static_cast<unsigned>(i_pad / 128), static_cast<unsigned>(rows)), 128, 0,
                       ctx.stream>>>(HiLoRowSink{xd, i_pad, b.r0}, HiLoProducts{pg, b.r0},
                                     HiLoProducts{pu, b.r0}, i_pad, inter, b.r0, table, lay, swiglu_limit);
    check_launch("moe_experts_exl3 (prefill act)");
    decode(ctx, wh, d0, table, lay, b, kDown);
    std::vector<GemmProblem> dn(static_cast<size_t>(nb));
    for (int i = 0; i < nb; ++i) {
      const int s = b.s0 + i, r = s_first[s] - b.r0, n2 = 2 * s_count[s];
      dn[i] = product(wh + int64_t{i} * i_pad * h_pad, xd + int64_t{2} * r * i_pad,
                      pd + int64_t{2} * r * h_pad, ip, hp, n2);
    }
    st = run_gemm_problems(ctx, CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16F, CUDA_R_32F, dn, &grouped);
    all_grouped = all_grouped && grouped;
    if (st != CUBLAS_STATUS_SUCCESS) break;
    finish_rows_kernel<<<dim3(static_cast<unsigned>(h_pad / 128), static_cast<unsigned>(rows)), 128, 0,
                         ctx.stream>>>(y, HiLoProducts{pd, b.r0}, h_pad, h, b.r0, table, lay);
    check_launch("moe_experts_exl3 (prefill finish)");
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    g_last_path = "cublas refused";
    return false;
  }
  combine_rows_kernel<<<dim3(static_cast<unsigned>((h + 127) / 128), static_cast<unsigned>(tokens)), 128, 0,
                        ctx.stream>>>(out.data<float>(), y, h, weights.data<float>(), static_cast<int>(k),
                                      lay);
  check_launch("moe_experts_exl3 (prefill combine)");
  g_last_path = all_grouped ? "cublas-grouped" : "cublas-per-expert";
  return true;
}

}  // namespace tf::cuda
