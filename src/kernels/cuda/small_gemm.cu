// Small-batch GEMM (m <= 64 rows, decode), host side: the launch plan (rows and
// columns per warp, block shape) and the launches of small_gemm_kernel.cuh, whose
// top comment gives the per-output arithmetic and the memory-access design.
// small_gemm_many puts several matrices' launches (each its own layout) in one grid.
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

namespace {

int device_sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    sms = 132;
  return sms;
}

// The launch of rows [r0, r0 + min(64, m - r0)) of a call: the plan, the kernel
// arguments, the grid's column blocks and the block's threads.
struct Layout {
  SmallGemmPlan plan;
  KernelArgs ka;
  int64_t blocks = 0;
  unsigned threads = 0;
};

Layout layout(const SmallGemmArgs& a, int64_t r0, int sms, int cols_per_warp, int k_splits) {
  Layout l;
  const int splits = k_splits > 0 ? k_splits : small_gemm_k_splits(a.n, a.k, a.heads);
  const int64_t nq = (a.k + 3) / 4, slice_quads = std::max<int64_t>(1, (nq + splits - 1) / splits);
  const int64_t m = std::min<int64_t>(kSmallGemmMaxRows, a.m - r0);
  // The slices multiply the warps in flight as heads do (the plan's column choice).
  l.plan = small_gemm_plan(m, a.n, a.heads * splits, sms, cols_per_warp);
  // Short K (one quad per lane per column: KDA f_b/g_b 8192 x 128): a warp of 1-2
  // columns is one load per lane and the blocks run in waves; 8 (4 with 2-4 rows,
  // whose 8-column variants spill) columns per warp put every load in one wave.
  if (cols_per_warp == 0 && m <= 8 && nq <= 32)
    l.plan.cols_per_warp = l.plan.rows_per_warp == 2 || l.plan.rows_per_warp == 4 ? 4 : 8;
  const int row_warps = static_cast<int>((m + l.plan.rows_per_warp - 1) / l.plan.rows_per_warp);
  // Up to 8 rows the slices of a column group run on warps of one block; above,
  // each warp walks them (its x rows fill the block already).
  const int slice_warps = row_warps == 1 ? splits : 1;
  const int col_warps = std::max(1, kWarpsPerBlock / (row_warps * slice_warps));
  const int64_t cols_per_block = int64_t{col_warps} * l.plan.cols_per_warp;
  l.blocks = (a.n + cols_per_block - 1) / cols_per_block;
  l.ka = KernelArgs{a.out + r0 * a.ldo, a.ldo,  a.o_hs,     a.x + r0 * a.ldx, a.ldx,      a.x_hs,
                    a.w,                a.w_hs, m,          a.n,              a.k,        row_warps,
                    col_warps,          splits, slice_warps, slice_quads,     a.accumulate};
  l.threads = static_cast<unsigned>(32 * row_warps * slice_warps * col_warps);
  return l;
}

void check_launch_error() {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw StatusError(internal_error(std::string("small_gemm: kernel launch failed: ") +
                                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")"));
}

}  // namespace

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
  const int sms = device_sm_count();
  // Vector loads need every quad start aligned: 4 | k and the strides, aligned bases.
  const bool w_vec = a.k % 4 == 0 && a.w_hs % 4 == 0 && aligned(a.w, bf16 ? 8 : 16);
  const bool x_vec = a.ldx % 4 == 0 && a.x_hs % 4 == 0 && aligned(a.x, 16);
  const bool vec = w_vec && x_vec;
  for (int64_t r0 = 0; r0 < a.m; r0 += kSmallGemmMaxRows) {
    const Layout l = layout(a, r0, sms, cols_per_warp, k_splits);
    if (l.blocks > 0x7fffffff)
      throw StatusError(invalid_argument("small_gemm: n=" + std::to_string(a.n) + " needs too many blocks"));
    const dim3 grid(static_cast<unsigned>(l.blocks), static_cast<unsigned>(a.heads));
    const dim3 block(l.threads);
    if (bf16) {
      launch_dtype<__nv_bfloat16>(l.plan, vec, grid, block, stream, l.ka);
    } else {
      launch_dtype<float>(l.plan, vec, grid, block, stream, l.ka);
    }
  }
  check_launch_error();
}

namespace {

using small_gemm_detail::kMaxMatrices;
using small_gemm_detail::ManyArgs;
using small_gemm_detail::small_gemm_many_kernel;
static_assert(kMaxMatrices == kSmallGemmMaxMatrices);

template <typename W, int MR>
void launch_many_rows(int nc, dim3 grid, dim3 block, cudaStream_t stream, const ManyArgs& a) {
  switch (nc) {
    case 1:
      return small_gemm_many_kernel<W, MR, 1><<<grid, block, 0, stream>>>(a);
    case 2:
      return small_gemm_many_kernel<W, MR, 2><<<grid, block, 0, stream>>>(a);
    case 4:
      return small_gemm_many_kernel<W, MR, 4><<<grid, block, 0, stream>>>(a);
    default:
      return small_gemm_many_kernel<W, MR, 8><<<grid, block, 0, stream>>>(a);
  }
}

template <typename W>
void launch_many(int mr, int nc, dim3 grid, dim3 block, cudaStream_t stream, const ManyArgs& a) {
  switch (mr) {
    case 1:
      return launch_many_rows<W, 1>(nc, grid, block, stream, a);
    case 2:
      return launch_many_rows<W, 2>(nc, grid, block, stream, a);
    case 4:
      return launch_many_rows<W, 4>(nc, grid, block, stream, a);
    default:
      return launch_many_rows<W, 8>(nc, grid, block, stream, a);
  }
}

}  // namespace

void small_gemm_many(cudaStream_t stream, const float* x, int64_t ldx, int64_t m, int64_t k,
                     const SmallGemmMatrix* mats, int count, bool accumulate) {
  if (count < 0 || (count > 0 && mats == nullptr))
    throw StatusError(invalid_argument("small_gemm_many: bad matrix count " + std::to_string(count)));
  const auto args_of = [&](const SmallGemmMatrix& w) {
    SmallGemmArgs a;
    a.out = w.out;
    a.ldo = w.ldo;
    a.x = x;
    a.ldx = ldx;
    a.w = w.w;
    a.w_dtype = w.w_dtype;
    a.m = m;
    a.n = w.n;
    a.k = k;
    a.accumulate = accumulate;
    return a;
  };
  // One launch needs one weight dtype, vector loads for every operand and <= 8 matrices.
  bool one = count >= 2 && count <= kSmallGemmMaxMatrices && m > 0 && k % 4 == 0 && ldx % 4 == 0 &&
             aligned(x, 16);
  for (int i = 0; one && i < count; ++i) {
    const SmallGemmMatrix& w = mats[i];
    one = w.w_dtype == mats[0].w_dtype && (w.w_dtype == DType::kBF16 || w.w_dtype == DType::kF32) && w.n > 0 &&
          aligned(w.w, w.w_dtype == DType::kBF16 ? 8 : 16);
  }
  if (!one) {
    for (int i = 0; i < count; ++i) small_gemm(stream, args_of(mats[i]));
    return;
  }
  const int sms = device_sm_count();
  for (int64_t r0 = 0; r0 < m; r0 += kSmallGemmMaxRows) {
    ManyArgs ma{};
    ma.count = count;
    int mr = 0, nc = 8;
    unsigned threads = 0;
    int64_t blocks = 0;
    bool same_block = true;
    Layout ls[kMaxMatrices];
    for (int i = 0; i < count; ++i) {
      ls[i] = layout(args_of(mats[i]), r0, sms, 0, 0);
      mr = ls[i].plan.rows_per_warp;
      nc = std::min(nc, ls[i].plan.cols_per_warp);
      same_block = same_block && (i == 0 || ls[i].threads == threads);
      threads = ls[i].threads;
    }
    // The column count per warp is common: recompute each matrix's blocks with it (its
    // K slices and warp layout stay; only which warp runs a column changes).
    for (int i = 0; i < count; ++i) {
      const int64_t cols_per_block = int64_t{ls[i].ka.col_warps} * nc;
      ma.mat[i] = ls[i].ka;
      ma.first_block[i] = blocks;
      blocks += (mats[i].n + cols_per_block - 1) / cols_per_block;
    }
    for (int i = count; i <= kMaxMatrices; ++i) ma.first_block[i] = blocks;
    // (The block size depends on m only; a mismatch would be a bug in layout().)
    if (!same_block || blocks > 0x7fffffff)
      throw StatusError(internal_error("small_gemm_many: matrices of one call got different block shapes"));
    const dim3 grid(static_cast<unsigned>(blocks)), block(threads);
    if (mats[0].w_dtype == DType::kBF16) {
      launch_many<__nv_bfloat16>(mr, nc, grid, block, stream, ma);
    } else {
      launch_many<float>(mr, nc, grid, block, stream, ma);
    }
  }
  check_launch_error();
}

}  // namespace tf::cuda
