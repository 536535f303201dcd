// Small-batch GEMM (m <= 64 rows, decode), host side: the launch plan (rows and
// columns per warp, block shape) and the launches of small_gemm_kernel.cuh, whose
// top comment gives the per-output arithmetic and the memory-access design.
#include <algorithm>
#include <string>

#include "core/status.h"
#include "kernels/cuda/small_gemm.h"
#include "kernels/cuda/small_gemm_kernel.cuh"

namespace tf::cuda {
namespace {

using small_gemm_detail::KernelArgs;
using small_gemm_detail::kMaxRowsPerWarp;
using small_gemm_detail::kWarpsPerBlock;
using small_gemm_detail::small_gemm_kernel;

template <typename W, int MR, int NC>
void launch_plan(bool vec, dim3 grid, dim3 block, cudaStream_t stream, const KernelArgs& a) {
  if (vec) {
    small_gemm_kernel<W, true, MR, NC><<<grid, block, 0, stream>>>(a);
  } else {
    small_gemm_kernel<W, false, MR, NC><<<grid, block, 0, stream>>>(a);
  }
}

template <typename W, int MR>
void launch_rows(int nc, bool vec, dim3 grid, dim3 block, cudaStream_t stream, const KernelArgs& a) {
  switch (nc) {
    case 1:
      return launch_plan<W, MR, 1>(vec, grid, block, stream, a);
    case 2:
      return launch_plan<W, MR, 2>(vec, grid, block, stream, a);
    case 4:
      return launch_plan<W, MR, 4>(vec, grid, block, stream, a);
    default:
      return launch_plan<W, MR, 8>(vec, grid, block, stream, a);
  }
}

template <typename W>
void launch_dtype(const SmallGemmPlan& p, bool vec, dim3 grid, dim3 block, cudaStream_t stream,
                  const KernelArgs& a) {
  switch (p.rows_per_warp) {
    case 1:
      return launch_rows<W, 1>(p.cols_per_warp, vec, grid, block, stream, a);
    case 2:
      return launch_rows<W, 2>(p.cols_per_warp, vec, grid, block, stream, a);
    case 4:
      return launch_rows<W, 4>(p.cols_per_warp, vec, grid, block, stream, a);
    default:
      return launch_rows<W, 8>(p.cols_per_warp, vec, grid, block, stream, a);
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

SmallGemmPlan small_gemm_plan(int64_t m, int64_t n, int64_t heads, int sm_count, int cols_per_warp) {
  SmallGemmPlan p;
  p.rows_per_warp = m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : kMaxRowsPerWarp;
  if (cols_per_warp > 0) {
    p.cols_per_warp = cols_per_warp;
    return p;
  }
  // x costs 2 * rows / cols bytes of L1 traffic per weight byte (f32 x, bf16 w):
  // prefer cols >= rows, but keep >= 8 warps per SM (with their loads in flight
  // and the L2 prefetch, enough to cover HBM latency) while cols may shrink.
  // A first guess: cuda_ops_bench's sweep shows every choice on the GPU.
  const int64_t rows = std::min<int64_t>(m, kSmallGemmMaxRows);
  const int64_t row_warps = (rows + p.rows_per_warp - 1) / p.rows_per_warp;
  int nc = m <= 2 ? 2 : m <= 4 ? 4 : 8;
  const int min_nc = m <= 2 ? 1 : 2;
  const int64_t want_warps = int64_t{8} * std::max(sm_count, 1);
  while (nc > min_nc && (n + nc - 1) / nc * heads * row_warps < want_warps) nc /= 2;
  p.cols_per_warp = nc;
  return p;
}

int small_gemm_k_splits(int64_t n, int64_t k, int64_t heads) {
  // 2048 warps of one column each: ~16 per SM, enough loads in flight to cover
  // DRAM latency at decode (f_a/g_a 128 x 4096, b_proj 64 x 4096, the router, mHC's
  // 24 x 16384 fn); wide matrices (n >= 2048) keep one slice.
  int s = 1;
  while (s < 8 && int64_t{2} * s * 256 <= k && n * heads * s < 2048) s *= 2;
  return s;
}

void small_gemm(cudaStream_t stream, const SmallGemmArgs& a, int cols_per_warp, int k_splits) {
  const bool bf16 = a.w_dtype == DType::kBF16;
  if (!bf16 && a.w_dtype != DType::kF32)
    throw StatusError(invalid_argument(std::string("small_gemm: weights must be f32 or bf16, got ") +
                                       dtype_name(a.w_dtype)));
  if (cols_per_warp != 0 && cols_per_warp != 1 && cols_per_warp != 2 && cols_per_warp != 4 &&
      cols_per_warp != 8)
    throw StatusError(invalid_argument("small_gemm: cols_per_warp must be 1, 2, 4 or 8, got " +
                                       std::to_string(cols_per_warp)));
  if (k_splits != 0 && k_splits != 1 && k_splits != 2 && k_splits != 4 && k_splits != 8)
    throw StatusError(invalid_argument("small_gemm: k_splits must be 1, 2, 4 or 8, got " +
                                       std::to_string(k_splits)));
  if (a.m < 0 || a.n < 0 || a.k < 0 || a.heads < 0 || a.heads > 65535)
    throw StatusError(invalid_argument("small_gemm: bad sizes m=" + std::to_string(a.m) +
                                       " n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) +
                                       " heads=" + std::to_string(a.heads)));
  if (a.m == 0 || a.n == 0 || a.heads == 0) return;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    sms = 132;
  // Vector loads need every quad start aligned: 4 | k and the strides, aligned bases.
  const bool w_vec = a.k % 4 == 0 && a.w_hs % 4 == 0 && aligned(a.w, bf16 ? 8 : 16);
  const bool x_vec = a.ldx % 4 == 0 && a.x_hs % 4 == 0 && aligned(a.x, 16);
  const bool vec = w_vec && x_vec;
  const int splits = k_splits > 0 ? k_splits : small_gemm_k_splits(a.n, a.k, a.heads);
  const int64_t nq = (a.k + 3) / 4, slice_quads = std::max<int64_t>(1, (nq + splits - 1) / splits);
  for (int64_t r0 = 0; r0 < a.m; r0 += kSmallGemmMaxRows) {
    const int64_t m = std::min<int64_t>(kSmallGemmMaxRows, a.m - r0);
    // The slices multiply the warps in flight as heads do (the plan's column choice).
    SmallGemmPlan plan = small_gemm_plan(m, a.n, a.heads * splits, sms, cols_per_warp);
    // Short K (one quad per lane per column: KDA f_b/g_b 8192 x 128): a warp of 1-2
    // columns is one load per lane and the blocks run in waves; 8 (4 with 2-4 rows,
    // whose 8-column variants spill) columns per warp put every load in one wave.
    if (cols_per_warp == 0 && m <= 8 && nq <= 32)
      plan.cols_per_warp = plan.rows_per_warp == 2 || plan.rows_per_warp == 4 ? 4 : 8;
    const int row_warps = static_cast<int>((m + plan.rows_per_warp - 1) / plan.rows_per_warp);
    // Up to 8 rows the slices of a column group run on warps of one block; above,
    // each warp walks them (its x rows fill the block already).
    const int slice_warps = row_warps == 1 ? splits : 1;
    const int col_warps = std::max(1, kWarpsPerBlock / (row_warps * slice_warps));
    const int64_t cols_per_block = int64_t{col_warps} * plan.cols_per_warp;
    const int64_t blocks = (a.n + cols_per_block - 1) / cols_per_block;
    if (blocks > 0x7fffffff)
      throw StatusError(invalid_argument("small_gemm: n=" + std::to_string(a.n) + " needs too many blocks"));
    const KernelArgs ka{a.out + r0 * a.ldo, a.ldo,  a.o_hs,     a.x + r0 * a.ldx, a.ldx,      a.x_hs,
                        a.w,                a.w_hs, m,          a.n,              a.k,        row_warps,
                        col_warps,          splits, slice_warps, slice_quads,     a.accumulate};
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.heads));
    const dim3 block(static_cast<unsigned>(32 * row_warps * slice_warps * col_warps));
    if (bf16) {
      launch_dtype<__nv_bfloat16>(plan, vec, grid, block, stream, ka);
    } else {
      launch_dtype<float>(plan, vec, grid, block, stream, ka);
    }
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw StatusError(internal_error(std::string("small_gemm: kernel launch failed: ") +
                                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")"));
}

}  // namespace tf::cuda
